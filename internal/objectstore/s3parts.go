package objectstore

// The part-size rule. S3 allows at most 10,000 parts per object, all but the last at least
// 5 MiB, of any sizes. The size of an object being streamed is not known in advance, so parts
// start at the configured part size P and double after every 1,000 parts, up to 1 GiB:
//
//	size of part n (1-based) = min(P × 2^⌊(n−1)/1000⌋, 1 GiB)
//
// An upload therefore never needs more than 10,000 parts for objects up to 3.17 TiB with
// P = 5 MiB, 4.87 TiB with the default 16 MiB and 9.77 TiB with P = 1 GiB (maxObject; Amazon
// S3 itself stores at most 5 TiB per object). With the default, objects up to 15.6 GiB use
// 16 MiB parts, up to 46.9 GiB parts of at most 32 MiB, up to 109 GiB 64 MiB, up to 234 GiB
// 128 MiB, up to 484 GiB 256 MiB, up to 984 GiB 512 MiB, and 1 GiB beyond. An upload holds at
// most Concurrency+1 buffers of the current part size: 48 MiB with the defaults up to
// 15.6 GiB, 1.5 GiB for an object near 1 TiB, 3 GiB beyond.
const (
	s3MaxParts     = 10000
	s3PartsPerStep = 1000
)

// s3PartRule is the part-size rule with its constants (tests use smaller ones).
type s3PartRule struct {
	base     int64 // first part size
	perStep  int   // parts per doubling
	maxParts int
}

func newS3PartRule(base int64) s3PartRule {
	return s3PartRule{base: base, perStep: s3PartsPerStep, maxParts: s3MaxParts}
}

// size is the size of part n (1-based).
func (r s3PartRule) size(n int) int64 {
	size := r.base
	for step := (n - 1) / r.perStep; step > 0 && size < MaxS3PartSize; step-- {
		size *= 2
	}
	return min(size, MaxS3PartSize)
}

// maxObject is the largest object an upload can write with maxParts parts.
func (r s3PartRule) maxObject() int64 {
	var total int64
	for n := 1; n <= r.maxParts; n += r.perStep {
		total += int64(min(r.perStep, r.maxParts-n+1)) * r.size(n)
	}
	return total
}

package objectstore_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
)

func newStore(t testing.TB, cfg objectstore.S3Config, o objectstore.S3TestOptions) objectstore.Store {
	t.Helper()
	st, err := objectstore.NewS3ForTest(context.Background(), cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// pendingUploads lists the multipart uploads in progress under prefix.
func pendingUploads(t testing.TB, srv *s3test.Server, prefix string) int {
	t.Helper()
	out, err := srv.Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{
		Bucket: &srv.Bucket, Prefix: aws.String(prefix),
	})
	if err != nil {
		t.Fatalf("ListMultipartUploads: %v", err)
	}
	return len(out.Uploads)
}

func put(t testing.TB, st objectstore.Store, key string, data []byte) objectstore.ObjectInfo {
	t.Helper()
	u, err := st.Create(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Write(data); err != nil {
		t.Fatal(err)
	}
	info, err := u.Commit()
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func get(t testing.TB, st objectstore.Store, key string) []byte {
	t.Helper()
	r, err := st.Open(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestServerLargeRoundTripBoundedMemory streams 200 MiB of random data through
// Create/Write/Commit with the default part size and concurrency, reads it back, and checks
// that the upload's memory stays near (concurrency+1) × part size, far below the object.
func TestServerLargeRoundTripBoundedMemory(t *testing.T) {
	srv := s3test.Start(t)
	cfg := srv.Config("big")
	cfg.PartSize = 0 // default 16 MiB
	var reqs objectstore.RequestCounter
	st := newStore(t, cfg, objectstore.S3TestOptions{Requests: &reqs})
	const size = 200<<20 + 12345
	const partSize, conc = objectstore.DefaultS3PartSize, objectstore.DefaultS3Concurrency

	src := rand.NewChaCha8([32]byte{1, 2, 3})
	chunk := make([]byte, 3<<20)
	sums := sha256.New()
	chunkSizes := []int{1, 4095, 1 << 20, 3<<20 - 7, 65536}

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()

	start := time.Now()
	u, err := st.Create(context.Background(), "backup.xb.zst")
	if err != nil {
		t.Fatal(err)
	}
	for written, i := 0, 0; written < size; i++ {
		n := min(chunkSizes[i%len(chunkSizes)], size-written)
		_, _ = src.Read(chunk[:n])
		sums.Write(chunk[:n])
		if m, err := u.Write(chunk[:n]); err != nil || m != n {
			t.Fatalf("Write: %d, %v", m, err)
		}
		written += n
	}
	info, err := u.Commit()
	if err != nil {
		t.Fatal(err)
	}
	upload := time.Since(start)
	close(stopSampling)
	<-sampled
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	if info.Size != size || info.Key != "backup.xb.zst" || info.Modified.IsZero() {
		t.Fatalf("Commit returned %+v", info)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	heapGrowth := int64(peak) - int64(before.HeapInuse)
	t.Logf("uploaded %d MiB in %v: %d parts, at most %d in flight; allocated %.1f MiB in all, heap in use grew by at most %.1f MiB",
		size>>20, upload.Round(time.Millisecond), len(reqs.PartSizes()), reqs.MaxPartsInFlight(),
		float64(allocated)/(1<<20), float64(heapGrowth)/(1<<20))
	// Buffers: (conc+1) parts plus the first buffer's growth (< 1 part); the rest is the SDK's.
	if limit := uint64((conc+2)*partSize + 16<<20); allocated > limit {
		t.Errorf("the upload allocated %d bytes, more than %d for (concurrency+1) × part size and the SDK", allocated, limit)
	}
	if limit := int64((conc+1)*partSize + 24<<20); heapGrowth > limit {
		t.Errorf("heap in use grew by %d bytes during the upload, more than %d", heapGrowth, limit)
	}
	if got := reqs.MaxPartsInFlight(); got > conc {
		t.Errorf("%d parts were in flight at once, concurrency is %d", got, conc)
	}
	if want := size/partSize + 1; len(reqs.PartSizes()) != want || reqs.PutObjects() != 0 {
		t.Errorf("sent %d parts and %d PutObject, want %d parts and none", len(reqs.PartSizes()), reqs.PutObjects(), want)
	}

	start = time.Now()
	r, err := st.Open(context.Background(), "backup.xb.zst")
	if err != nil {
		t.Fatal(err)
	}
	back := sha256.New()
	n, err := io.Copy(back, r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read back in %v", time.Since(start).Round(time.Millisecond))
	if n != size || !bytes.Equal(back.Sum(nil), sums.Sum(nil)) {
		t.Fatalf("read back %d bytes with sha256 %x, wrote %d with %x", n, back.Sum(nil), size, sums.Sum(nil))
	}
	if got, err := st.Stat(context.Background(), "backup.xb.zst"); err != nil || got.Size != size {
		t.Fatalf("Stat: %+v, %v", got, err)
	}
	if n := pendingUploads(t, srv, ""); n != 0 {
		t.Errorf("%d multipart uploads left pending", n)
	}
}

// TestServerSmallObjects: an object up to one part is a single PutObject (its ETag is its
// MD5); one byte more is a two-part upload.
func TestServerSmallObjects(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	var reqs objectstore.RequestCounter
	cfg := srv.Config("small/")
	st := newStore(t, cfg, objectstore.S3TestOptions{Requests: &reqs})
	rng := rand.NewChaCha8([32]byte{7})
	for _, tc := range []struct {
		key   string
		size  int
		parts int
	}{
		{"empty", 0, 0},
		{"manifest.json", 100, 0},
		{"one-part", int(cfg.PartSize), 0},
		{"two-parts", int(cfg.PartSize) + 1, 2},
	} {
		data := make([]byte, tc.size)
		_, _ = rng.Read(data)
		puts, parts := reqs.PutObjects(), len(reqs.PartSizes())
		info := put(t, st, tc.key, data)
		if info.Size != int64(tc.size) {
			t.Errorf("%s: Commit says %d bytes, want %d", tc.key, info.Size, tc.size)
		}
		if got := get(t, st, tc.key); !bytes.Equal(got, data) {
			t.Errorf("%s: read back %d bytes that differ from the %d written", tc.key, len(got), len(data))
		}
		gotPuts, gotParts := reqs.PutObjects()-puts, len(reqs.PartSizes())-parts
		if tc.parts == 0 && (gotPuts != 1 || gotParts != 0) || tc.parts > 0 && (gotPuts != 0 || gotParts != tc.parts) {
			t.Errorf("%s: %d PutObject and %d parts, want %d parts (0: one PutObject)", tc.key, gotPuts, gotParts, tc.parts)
		}
		head, err := srv.Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &srv.Bucket, Key: aws.String("small/" + tc.key)})
		if err != nil {
			t.Fatal(err)
		}
		sum := md5.Sum(data)
		if etag := strings.Trim(aws.ToString(head.ETag), `"`); tc.parts == 0 && etag != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: ETag %s, want the MD5 %x of a single PUT", tc.key, etag, sum)
		}
	}
}

// TestServerPartsGrow: with a doubling every 2 parts, part sizes go 5, 5, 10, 10, 20 MiB …
// and the server accepts parts of different sizes; past MaxParts the upload fails, aborted.
func TestServerPartsGrow(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	var reqs objectstore.RequestCounter
	st := newStore(t, srv.Config("grow"), objectstore.S3TestOptions{Requests: &reqs, PartsPerStep: 2, MaxParts: 5})
	const mib = 1 << 20
	// 5+5+10+10+20 = 50 MiB fit in 5 parts.
	data := make([]byte, 50*mib)
	_, _ = rand.NewChaCha8([32]byte{9}).Read(data)
	put(t, st, "fits", data)
	if got := get(t, st, "fits"); !bytes.Equal(got, data) {
		t.Fatal("read back differs")
	}
	want := []int64{5 * mib, 5 * mib, 10 * mib, 10 * mib, 20 * mib}
	if got := reqs.PartSizes(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("part sizes %v, want %v", got, want)
	}

	u, err := st.Create(context.Background(), "too-big")
	if err != nil {
		t.Fatal(err)
	}
	_, err = u.Write(append(data, 1))
	if err == nil || !strings.Contains(err.Error(), "raise the part size") {
		t.Fatalf("writing 50 MiB + 1 byte into 5 parts: %v", err)
	}
	if _, cerr := u.Commit(); cerr == nil {
		t.Fatal("Commit after a failed Write succeeded")
	}
	assertGone(t, srv, st, "too-big")
}

// TestServerCancelDuringCreateLeavesNothing: a cancel that lands while CreateMultipartUpload
// is answered must not leave the upload the server created (its ID is needed to abort it).
func TestServerCancelDuringCreateLeavesNothing(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	reqs := &objectstore.RequestCounter{AfterCreate: cancel}
	st := newStore(t, srv.Config(""), objectstore.S3TestOptions{Requests: reqs})
	u, err := st.Create(ctx, "cancelled-create")
	if err != nil {
		t.Fatal(err)
	}
	_, err = u.Write(make([]byte, 6<<20)) // more than a 5 MiB part: the upload is created
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Write: %v, want context.Canceled", err)
	}
	if err := u.Abort(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, srv, st, "cancelled-create")
}

func assertGone(t *testing.T, srv *s3test.Server, st objectstore.Store, key string) {
	t.Helper()
	if _, err := st.Stat(context.Background(), key); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Stat %s: %v, want ErrNotFound", key, err)
	}
	if n := pendingUploads(t, srv, ""); n != 0 {
		t.Errorf("%d multipart uploads left pending", n)
	}
}

// TestServerAbortLeavesNothing: Abort, a cancelled context (with or without Abort) and a
// Commit on a cancelled context leave no object and no pending multipart upload.
func TestServerAbortLeavesNothing(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := newStore(t, srv.Config(""), objectstore.S3TestOptions{})
	data := make([]byte, 12<<20) // two full 5 MiB parts sent, 2 MiB buffered

	t.Run("Abort", func(t *testing.T) {
		u, _ := st.Create(context.Background(), "aborted")
		if _, err := u.Write(data); err != nil {
			t.Fatal(err)
		}
		if n := pendingUploads(t, srv, "aborted"); n != 1 {
			t.Fatalf("%d multipart uploads before Abort, want 1", n)
		}
		if err := u.Abort(); err != nil {
			t.Fatal(err)
		}
		assertGone(t, srv, st, "aborted")
		if _, err := u.Write([]byte("x")); err == nil {
			t.Error("Write after Abort succeeded")
		}
		if _, err := u.Commit(); err == nil {
			t.Error("Commit after Abort succeeded")
		}
	})
	t.Run("AbortSmall", func(t *testing.T) {
		u, _ := st.Create(context.Background(), "aborted-small")
		_, _ = u.Write([]byte("hello"))
		if err := u.Abort(); err != nil {
			t.Fatal(err)
		}
		assertGone(t, srv, st, "aborted-small")
	})
	t.Run("CancelWithoutAbort", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		u, _ := st.Create(ctx, "cancelled")
		if _, err := u.Write(data); err != nil {
			t.Fatal(err)
		}
		cancel()
		// Nobody calls Abort: the upload aborts itself.
		deadline := time.Now().Add(10 * time.Second)
		for pendingUploads(t, srv, "cancelled") != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the multipart upload is still pending 10 s after the context was cancelled")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := u.Write(data); !errors.Is(err, context.Canceled) {
			t.Errorf("Write after cancel: %v, want context.Canceled", err)
		}
		if _, err := u.Commit(); !errors.Is(err, context.Canceled) {
			t.Errorf("Commit after cancel: %v, want context.Canceled", err)
		}
		assertGone(t, srv, st, "cancelled")
	})
	t.Run("CancelDuringWrite", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		u, _ := st.Create(ctx, "cancelled-mid")
		go func() { time.Sleep(30 * time.Millisecond); cancel() }()
		var err error
		for i := 0; err == nil && i < 200; i++ { // up to 2.4 GB: cancelled long before
			_, err = u.Write(data)
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Write: %v, want context.Canceled", err)
		}
		if err := u.Abort(); err != nil {
			t.Fatal(err)
		}
		assertGone(t, srv, st, "cancelled-mid")
	})
	t.Run("CommitCancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		u, _ := st.Create(ctx, "commit-cancelled")
		_, _ = u.Write(data)
		cancel()
		if _, err := u.Commit(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Commit: %v, want context.Canceled", err)
		}
		assertGone(t, srv, st, "commit-cancelled")
	})
}

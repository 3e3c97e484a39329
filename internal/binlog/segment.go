package binlog

import (
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// ManifestFormat is the version of the segment manifest layout written by this code.
const ManifestFormat = 1

// CompressionZstd is the only Compression written and read.
const CompressionZstd = "zstd"

// Object and manifest names inside an archive prefix:
//
//	<prefix>epoch-<EEEE>/<NNNNNNNNNN>.binlog.zst   the segment: zstd of a binlog file
//	<prefix>epoch-<EEEE>/<NNNNNNNNNN>.json         its manifest, written after it
const (
	objectSuffix   = ".binlog.zst"
	manifestSuffix = ".json"
)

// ErrGap is wrapped by the problems ListSegments reports when a segment does not start where
// the previous one ended: the archive cannot replay across it.
var ErrGap = errors.New("the archive has a gap")

// ErrCorrupt is wrapped by errors about a segment or manifest that does not match what was
// recorded (size, sha256, undecodable events) or cannot be read as a manifest.
var ErrCorrupt = errors.New("archive segment is corrupt")

// ErrOutsideArchive is wrapped when a requested position or time is not inside the archived
// range; the message names the range.
var ErrOutsideArchive = errors.New("outside the archived range")

// ArchiverVersion names this code in manifests: "dolphin <module version> go-mysql <version>".
var ArchiverVersion = archiverVersion()

func archiverVersion() string {
	v, lib := "(unknown)", "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
		for _, d := range bi.Deps {
			if d.Path == "github.com/go-mysql-org/go-mysql" {
				lib = d.Version
			}
		}
	}
	return "dolphin " + v + " go-mysql " + lib
}

// Manifest describes one committed segment. It is stored as JSON next to the segment object,
// after the object is committed: a segment without its manifest does not exist.
type Manifest struct {
	// Format is ManifestFormat when written.
	Format int `json:"format"`
	// Epoch and Number place the segment in the archive: numbers increase by one within an
	// epoch; a new epoch starts a new history (not written yet by this version).
	Epoch  int   `json:"epoch"`
	Number int64 `json:"number"`
	// Object is the segment's key relative to the archive prefix.
	Object string `json:"object"`
	// Start is the GTID position before the segment's first transaction, End the position
	// after its last. A segment continues the previous one when its Start equals that one's End.
	Start string `json:"start"`
	End   string `json:"end"`
	// FirstCommit and LastCommit are the commit times of the first and last transaction
	// (their last event's timestamp: whole seconds, UTC); MaxCommit is the latest commit time
	// of any of its transactions (timestamps are when a statement started, so they are not
	// strictly ordered).
	FirstCommit time.Time `json:"firstCommit"`
	LastCommit  time.Time `json:"lastCommit"`
	MaxCommit   time.Time `json:"maxCommit"`
	// Transactions is how many whole transactions the segment holds.
	Transactions int64 `json:"transactions"`
	// RawBytes is the size of the binlog file, StoredBytes of the stored (compressed) object,
	// SHA256 (hex) the digest of exactly the stored bytes.
	RawBytes    int64  `json:"rawBytes"`
	StoredBytes int64  `json:"storedBytes"`
	SHA256      string `json:"sha256"`
	// Compression of the object: "zstd".
	Compression string `json:"compression"`
	// Source is the server the events were read from.
	Source Source `json:"source"`
	// ArchiverVersion is the code that wrote the segment (ArchiverVersion).
	ArchiverVersion string `json:"archiverVersion"`
	// Written is when the manifest was written (the archiver's clock, UTC).
	Written time.Time `json:"written"`

	start, end Position
}

// Source identifies the server a segment was read from.
type Source struct {
	// Host and Port the archiver connected to.
	Host string `json:"host"`
	Port int    `json:"port"`
	// ServerID is the server_id in the header of the source's Format_description event: the
	// server whose binary log it is.
	ServerID uint32 `json:"serverId"`
	// ServerVersion from the Format_description event.
	ServerVersion string `json:"serverVersion"`
}

// StartPosition is Start parsed (the manifest was checked when read or written).
func (m *Manifest) StartPosition() Position { return m.start }

// EndPosition is End parsed.
func (m *Manifest) EndPosition() Position { return m.end }

// Name is "epoch-<E>/<N>" for messages.
func (m *Manifest) Name() string { return segmentName(m.Epoch, m.Number) }

// check refuses a manifest this code cannot use, and parses its positions.
func (m *Manifest) check() error {
	if m.Format < 1 || m.Format > ManifestFormat {
		return fmt.Errorf("format %d, this version reads 1 to %d", m.Format, ManifestFormat)
	}
	if m.Epoch < 1 || m.Number < 1 {
		return fmt.Errorf("epoch %d, number %d: both start at 1", m.Epoch, m.Number)
	}
	if want := objectKey(m.Epoch, m.Number); m.Object != want {
		return fmt.Errorf("object %q, want %q", m.Object, want)
	}
	if m.Compression != CompressionZstd {
		return fmt.Errorf("compression %q, want %q", m.Compression, CompressionZstd)
	}
	if m.Transactions < 1 || m.RawBytes <= 0 || m.StoredBytes <= 0 || len(m.SHA256) != 64 {
		return fmt.Errorf("transactions %d, raw bytes %d, stored bytes %d, sha256 %q", m.Transactions, m.RawBytes, m.StoredBytes, m.SHA256)
	}
	var err error
	if m.start, err = Parse(m.Start); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if m.end, err = Parse(m.End); err != nil {
		return fmt.Errorf("end: %w", err)
	}
	if !m.end.Covers(m.start) || m.end.Equal(m.start) {
		return fmt.Errorf("end %q does not come after start %q", m.End, m.Start)
	}
	return nil
}

// segmentName is "epoch-0001/0000000042".
func segmentName(epoch int, number int64) string {
	return fmt.Sprintf("epoch-%04d/%010d", epoch, number)
}

// objectKey and manifestKey are relative to the archive prefix.
func objectKey(epoch int, number int64) string   { return segmentName(epoch, number) + objectSuffix }
func manifestKey(epoch int, number int64) string { return segmentName(epoch, number) + manifestSuffix }

var manifestKeyRE = regexp.MustCompile(`^epoch-(\d{4,})/(\d{10,})\.json$`)

// parseManifestKey returns the epoch and number of a manifest key relative to the prefix.
func parseManifestKey(rel string) (int, int64, bool) {
	m := manifestKeyRE.FindStringSubmatch(rel)
	if m == nil {
		return 0, 0, false
	}
	e, err1 := strconv.Atoi(m[1])
	n, err2 := strconv.ParseInt(m[2], 10, 64)
	return e, n, err1 == nil && err2 == nil && e > 0 && n > 0
}

// normPrefix makes an archive prefix end in '/' unless it is empty.
func normPrefix(prefix string) string {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		return prefix + "/"
	}
	return prefix
}

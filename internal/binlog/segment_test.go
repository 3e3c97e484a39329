package binlog

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// fakeSegment is a manifest (and optionally an object) as the archiver would commit it; the
// object's bytes are not a binlog file, which ListSegments and planReplay do not read.
func fakeSegment(number int64, start, end string) *Manifest {
	data := []byte("segment " + end)
	sum := sha256.Sum256(data)
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC).Add(time.Duration(number) * time.Minute)
	m := &Manifest{
		Format: ManifestFormat, Epoch: 1, Number: number, Object: objectKey(1, number), Start: start, End: end,
		FirstCommit: t0, LastCommit: t0.Add(time.Second), MaxCommit: t0.Add(time.Second), Transactions: 1,
		RawBytes: 100, StoredBytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), Compression: CompressionZstd,
	}
	if err := m.check(); err != nil {
		panic(err)
	}
	return m
}

func putSegment(t *testing.T, store objectstore.Store, prefix string, m *Manifest, object, manifest bool) {
	t.Helper()
	if object {
		put(t, store, prefix+m.Object, "segment "+m.End)
	}
	if manifest {
		if err := writeManifest(t.Context(), store, prefix, m); err != nil {
			t.Fatal(err)
		}
	}
}

func put(t *testing.T, store objectstore.Store, key, data string) {
	t.Helper()
	up, err := store.Create(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := up.Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestManifestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Manifest)
		err    string
	}{
		{"valid", func(*Manifest) {}, ""},
		{"newer format", func(m *Manifest) { m.Format = ManifestFormat + 1 }, "format"},
		{"epoch 0", func(m *Manifest) { m.Epoch = 0 }, "start at 1"},
		{"object elsewhere", func(m *Manifest) { m.Object = "x.binlog.zst" }, "object"},
		{"no transactions", func(m *Manifest) { m.Transactions = 0 }, "transactions 0"},
		{"short sha256", func(m *Manifest) { m.SHA256 = "ab" }, "sha256"},
		{"bad end", func(m *Manifest) { m.End = "0-1" }, "end"},
		{"end before start", func(m *Manifest) { m.Start, m.End = "0-1-5", "0-1-4" }, "does not come after"},
		{"empty segment", func(m *Manifest) { m.Start, m.End = "0-1-5", "0-1-5" }, "does not come after"},
		{"other compression", func(m *Manifest) { m.Compression = "gzip" }, "compression"},
	} {
		m := *fakeSegment(1, "", "0-1-3")
		tc.change(&m)
		err := m.check()
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: check() = %v, want %q", tc.name, err, tc.err)
		}
	}
}

func TestListSegments(t *testing.T) {
	store, _ := newStore(t)
	const p = "ns/c/binlog/"
	putSegment(t, store, p, fakeSegment(1, "", "0-1-3"), true, true)
	putSegment(t, store, p, fakeSegment(2, "0-1-3", "0-1-7"), true, true)
	putSegment(t, store, p, fakeSegment(3, "0-1-8", "0-1-9"), true, true)    // a gap: 0-1-8 is missing
	putSegment(t, store, p, fakeSegment(4, "0-1-9", "0-1-10"), true, false)  // never committed: ignored
	putSegment(t, store, p, fakeSegment(10, "0-1-9", "0-1-12"), false, true) // its object lost
	put(t, store, p+"README", "not a segment")

	l, err := ListSegments(t.Context(), store, strings.TrimSuffix(p, "/"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range l.Segments {
		names = append(names, m.Name())
	}
	if got := strings.Join(names, " "); got != "epoch-0001/0000000001 epoch-0001/0000000002 epoch-0001/0000000003 epoch-0001/0000000010" {
		t.Errorf("segments %s", got)
	}
	if len(l.Problems) != 2 || !errors.Is(l.Problems[0], ErrGap) || !strings.Contains(l.Problems[0].Error(), `ends at "0-1-7"`) ||
		!errors.Is(l.Problems[1], ErrCorrupt) || !strings.Contains(l.Problems[1].Error(), "0000000010.binlog.zst is missing") {
		t.Errorf("problems %v", l.Problems)
	}
	if l.Err() == nil || !strings.Contains(l.Range(), `"" to "0-1-12"`) {
		t.Errorf("Err %v, Range %s", l.Err(), l.Range())
	}
	st, err := loadState(t.Context(), store, p, "0-1-1")
	if err != nil || st.next != 11 || st.pos.String() != "0-1-12" || st.epoch != 1 {
		t.Errorf("loadState = %+v, %v; want to continue after segment 10", st, err)
	}
	empty, _ := newStore(t)
	if st, err := loadState(t.Context(), empty, p, "0-1-1"); err != nil || st.next != 1 || st.pos.String() != "0-1-1" {
		t.Errorf("loadState of an empty archive = %+v, %v; want Start", st, err)
	}

	// A wrong-sized object, an unreadable manifest, a manifest under another name.
	put(t, store, p+objectKey(1, 2), "short")
	if l, _ := ListSegments(t.Context(), store, p); len(l.Problems) != 3 || !strings.Contains(l.Problems[0].Error(), "has 5 bytes") {
		t.Errorf("problems %v", l.Problems)
	}
	put(t, store, p+manifestKey(1, 11), "{not json")
	if _, err := ListSegments(t.Context(), store, p); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "0000000011.json") {
		t.Errorf("ListSegments with a broken manifest: %v", err)
	}
	if _, err := loadState(t.Context(), store, p, ""); !errors.Is(err, ErrCorrupt) {
		t.Errorf("loadState with a broken last manifest: %v", err)
	}
	store2, _ := newStore(t)
	m := fakeSegment(1, "", "0-1-3")
	putSegment(t, store2, p, m, true, false)
	b, _ := store.Open(t.Context(), p+manifestKey(1, 1))
	data := make([]byte, 4096)
	n, _ := b.Read(data)
	b.Close()
	put(t, store2, p+manifestKey(1, 5), string(data[:n]))
	if _, err := ListSegments(t.Context(), store2, p); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "describes segment epoch-0001/0000000001") {
		t.Errorf("ListSegments with a moved manifest: %v", err)
	}
}

func TestPlanReplay(t *testing.T) {
	chain := &Listing{Segments: []*Manifest{
		fakeSegment(1, "0-1-3", "0-1-10"),
		fakeSegment(2, "0-1-10", "0-1-20"),
		fakeSegment(3, "0-1-20", "0-1-30"),
	}}
	domains := &Listing{Segments: []*Manifest{
		fakeSegment(1, "0-1-3,1-1-4", "0-1-10,1-1-4"),
		fakeSegment(2, "0-1-10,1-1-4", "0-1-20,1-1-6"),
	}}
	gap := &Listing{Segments: []*Manifest{fakeSegment(1, "0-1-3", "0-1-10"), fakeSegment(2, "0-1-12", "0-1-20")}}
	for _, tc := range []struct {
		name     string
		l        *Listing
		from, to string
		toEnd    bool
		segs     string // numbers
		target   string
		stop     string
		err      string
	}{
		{name: "all", l: chain, from: "0-1-3", toEnd: true, segs: "1 2 3", target: "0-1-30", stop: "0-1-30"},
		{name: "from inside a segment", l: chain, from: "0-1-15", toEnd: true, segs: "2 3", target: "0-1-30", stop: "0-1-30"},
		{name: "from a segment's end", l: chain, from: "0-1-20", to: "0-1-25", segs: "3", target: "0-1-25", stop: "0-1-25"},
		{name: "to a segment's end", l: chain, from: "0-1-3", to: "0-1-20", segs: "1 2", target: "0-1-20", stop: "0-1-20"},
		{name: "to a segment's start", l: chain, from: "0-1-5", to: "0-1-10", segs: "1", target: "0-1-10", stop: "0-1-10"},
		{name: "nothing to do", l: chain, from: "0-1-30", toEnd: true, segs: "", target: "0-1-30"},
		{name: "to equals from", l: chain, from: "0-1-12", to: "0-1-12", segs: "", target: "0-1-12"},
		{name: "another domain stays", l: domains, from: "0-1-3,1-1-4", to: "0-1-8", segs: "1", target: "0-1-8,1-1-4", stop: "0-1-8"},
		{name: "one domain advances", l: domains, from: "0-1-10,1-1-4", to: "1-1-5", segs: "2", target: "0-1-10,1-1-5", stop: "1-1-5"},
		{name: "both domains to the end", l: domains, from: "0-1-5,1-1-4", toEnd: true, segs: "1 2", target: "0-1-20,1-1-6", stop: "0-1-20,1-1-6"},
		{name: "from a domain the archive lacks", l: chain, from: "0-1-3,1-1-4", toEnd: true, err: "not inside the archive"},
		{name: "from before the archive", l: chain, from: "0-1-2", toEnd: true, err: "not inside the archive"},
		{name: "from after the archive", l: chain, from: "0-1-31", toEnd: true, err: "not inside the archive"},
		{name: "to beyond the archive", l: chain, from: "0-1-3", to: "0-1-31", err: "beyond the archive"},
		{name: "to another domain", l: chain, from: "0-1-3", to: "2-1-1", err: "beyond the archive"},
		{name: "to before from", l: chain, from: "0-1-12", to: "0-1-11", err: "before From"},
		{name: "across a gap", l: gap, from: "0-1-3", toEnd: true, err: "a replay can reach \"0-1-10\" at most"},
		{name: "before a gap", l: gap, from: "0-1-3", to: "0-1-9", segs: "1", target: "0-1-9", stop: "0-1-9"},
		{name: "nothing archived", l: &Listing{}, from: "", toEnd: true, err: "nothing is archived"},
	} {
		p, err := planReplay(tc.l, MustParse(tc.from), MustParse(tc.to), tc.toEnd)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.err)
			}
			continue
		}
		var segs []string
		for _, m := range p.segments {
			segs = append(segs, strings.TrimLeft(m.Name()[len("epoch-0001/"):], "0"))
		}
		if err != nil || strings.Join(segs, " ") != tc.segs || p.target.String() != tc.target || p.stop.String() != tc.stop {
			t.Errorf("%s: segments %q, target %q, stop %q, %v; want %q, %q, %q", tc.name, segs, p.target, p.stop, err, tc.segs, tc.target, tc.stop)
		}
	}
}

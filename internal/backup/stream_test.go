package backup

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// These tests run Stream with the stand-in for mariadb-backup (take_test.go) and extract
// streams with RestoreStream and the real mbstream, without a server.

// mbstreamOf returns files as an mbstream (`mbstream -c`), uncompressed, written to a file.
func mbstreamOf(t *testing.T, files map[string][]byte) string {
	t.Helper()
	mbstream := needMBStream(t)
	src := t.TempDir()
	var names []string
	for name, b := range files {
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), b, 0o640); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	stream, err := exec.Command(mbstream, append([]string{"-c", "-C", src}, names...)...).Output()
	if err != nil {
		t.Fatalf("mbstream -c: %v", err)
	}
	p := filepath.Join(t.TempDir(), "stream.mbs")
	if err := os.WriteFile(p, stream, 0o640); err != nil {
		t.Fatal(err)
	}
	return p
}

// streamOf runs Stream with a fake tool that prints the mbstream of files, and returns what
// Stream wrote and its report.
func streamOf(t *testing.T, files map[string][]byte) ([]byte, *StreamReport) {
	t.Helper()
	tool := fakeBackupTool(t, t.TempDir(), "cat "+mbstreamOf(t, files))
	var out bytes.Buffer
	var progress int64
	rep, err := Stream(t.Context(), StreamOptions{Socket: filepath.Join(t.TempDir(), "no.sock"), User: "u", Password: "pw",
		DataDir: "/var/lib/mysql", Tool: tool, TmpDir: t.TempDir(), Progress: func(n int64) { progress = n },
		positionAt: fixedPosition("0-1-42,1-2-3"), serialApplyHook: noServerApplier}, &out)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if rep.Bytes != int64(out.Len()) || progress != rep.Bytes {
		t.Errorf("report says %d bytes, progress %d, %d were written", rep.Bytes, progress, out.Len())
	}
	return out.Bytes(), rep
}

func TestStreamAndRestoreStream(t *testing.T) {
	files := syntheticFiles()
	stream, rep := streamOf(t, files)
	if rep.GTIDPosition != "0-1-42,1-2-3" || rep.ReplicaGTIDPosition != "0-1-42" || rep.BinlogFile != "binlog.000007" ||
		rep.BinlogPosition != 99 || rep.ServerVersion != "10.11.14-MariaDB-fake" || rep.Tool != "fake-mariadb-backup 10.11.14-MariaDB" ||
		rep.RawBytes < 3<<20 || rep.Bytes >= rep.RawBytes || rep.StartTime.IsZero() || rep.EndTime.IsZero() {
		t.Errorf("report %+v", rep)
	}

	target := filepath.Join(t.TempDir(), "data")
	var read int64
	bi, err := RestoreStream(t.Context(), bytes.NewReader(stream), RestoreOptions{TargetDir: target, Tool: fakeTool(t, prepareOK),
		Progress: func(n int64) { read = n }})
	if err != nil {
		t.Fatal(err)
	}
	if bi != (BinlogInfo{File: "binlog.000001", Position: 172524, GTID: "0-1-3,1-2-7"}) || read != int64(len(stream)) {
		t.Errorf("RestoreStream = %+v after reading %d of %d bytes", bi, read, len(stream))
	}
	for name, want := range files {
		if got, err := os.ReadFile(filepath.Join(target, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v; want %d bytes", name, len(got), err, len(want))
		}
	}

	// MariaDB 11's name for the binlog info file.
	delete(files, "xtrabackup_binlog_info")
	files["mariadb_backup_binlog_info"] = []byte("binlog.000002\t44\t0-5-9\n")
	stream11, _ := streamOf(t, files)
	if bi, err := RestoreStream(t.Context(), bytes.NewReader(stream11), RestoreOptions{TargetDir: t.TempDir(), Tool: fakeTool(t, prepareOK)}); err != nil || bi.GTID != "0-5-9" {
		t.Errorf("RestoreStream of an 11.x stream = %+v, %v", bi, err)
	}
}

// failingWriter accepts n bytes, then fails.
type failingWriter struct{ n int }

var errWriter = errors.New("the peer went away")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return 0, errWriter
	}
	w.n -= len(p)
	return len(p), nil
}

func TestStreamWriterFails(t *testing.T) {
	// An endless tool: only being stopped ends it.
	tool := fakeBackupTool(t, t.TempDir(), "exec head -c 100000000000 /dev/urandom")
	_, err := Stream(t.Context(), StreamOptions{Socket: "/no.sock", User: "u", DataDir: "/d", Tool: tool, TmpDir: t.TempDir(), serialApplyHook: noServerApplier},
		&failingWriter{n: 1 << 20})
	if !errors.Is(err, errWriter) || !strings.Contains(err.Error(), "writing the stream") || !strings.Contains(err.Error(), "mariadb-backup was stopped") {
		t.Errorf("Stream into a failing writer: %v", err)
	}
	// A tool that fails before writing anything leaves the writer untouched.
	var out bytes.Buffer
	failing := fakeBackupTool(t, t.TempDir(), "echo 'Failed to connect to the server' >&2; exit 1")
	_, err = Stream(t.Context(), StreamOptions{Socket: "/no.sock", User: "u", DataDir: "/d", Tool: failing, TmpDir: t.TempDir(), serialApplyHook: noServerApplier}, &out)
	if err == nil || !strings.Contains(err.Error(), "Failed to connect") || out.Len() != 0 {
		t.Errorf("Stream with a failing tool: %v, %d bytes written", err, out.Len())
	}
	if _, err := Stream(t.Context(), StreamOptions{User: "u", DataDir: "/d"}, io.Discard); err == nil || !strings.Contains(err.Error(), "socket or host") {
		t.Errorf("Stream without a server: %v", err)
	}
}

// brokenReader returns r, then err instead of io.EOF.
type brokenReader struct {
	r   io.Reader
	err error
}

func (b *brokenReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		err = b.err
	}
	return n, err
}

func TestRestoreStreamFailures(t *testing.T) {
	stream, _ := streamOf(t, syntheticFiles())
	errPeer := errors.New("the clone stream failed: mariadb-backup died")
	damaged := bytes.Clone(stream)
	damaged[len(damaged)/2] ^= 0x5a
	for name, c := range map[string]struct {
		r    io.Reader
		want string
	}{
		"peer fails at the end": {&brokenReader{bytes.NewReader(stream), errPeer}, "reading the stream"},
		"peer fails midway":     {&brokenReader{bytes.NewReader(stream[:len(stream)/3]), errPeer}, "reading the stream"},
		"damaged":               {bytes.NewReader(damaged), "the stream is damaged"},
		"truncated":             {bytes.NewReader(stream[:len(stream)/2]), "the stream is damaged"},
		"empty":                 {bytes.NewReader(nil), "the stream is empty"},
		"trailing bytes":        {io.MultiReader(bytes.NewReader(stream), strings.NewReader("junk")), "decoding the stream"},
	} {
		t.Run(name, func(t *testing.T) {
			target := t.TempDir()
			_, err := RestoreStream(t.Context(), c.r, RestoreOptions{TargetDir: target, Tool: fakeTool(t, prepareOK)})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("RestoreStream: %v, want an error saying %q", err, c.want)
			}
			if strings.Contains(name, "peer") && !errors.Is(err, errPeer) {
				t.Errorf("the error does not wrap the reader's: %v", err)
			}
			t.Log(err)
			if ents := dirEntries(t, target); len(ents) != 0 {
				t.Errorf("the target holds %q after a failed stream", ents)
			}
		})
	}
}

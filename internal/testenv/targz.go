package testenv

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"testing"
)

// TarGzFile is one file of a .tar.gz archive.
type TarGzFile struct {
	Mode int64
	Data []byte
}

// ReadTarGz reads every regular file of a .tar.gz archive (a support bundle, a release
// archive), by name.
func ReadTarGz(t testing.TB, file string) map[string]TarGzFile {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]TarGzFile{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = TarGzFile{Mode: h.Mode, Data: b}
	}
}

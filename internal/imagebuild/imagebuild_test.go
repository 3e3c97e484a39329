package imagebuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func digestOf(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// TestDolphinImageIsReproducibleAndRunsAsNonRoot builds Dolphin's image twice from the same
// inputs (other work folders, another file time on the host) and checks one digest, then checks
// what a pod relies on: nonroot user, entrypoint, labels and the files' owners and modes.
func TestDolphinImageIsReproducibleAndRunsAsNonRoot(t *testing.T) {
	src := t.TempDir()
	bin := filepath.Join(src, "dolphin")
	op := filepath.Join(src, "dolphin-operator")
	if err := os.WriteFile(bin, []byte("#!binary dolphin"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(op, []byte("#!binary operator"), 0o700); err != nil {
		t.Fatal(err)
	}
	in := DolphinInputs{Dolphin: bin, Operator: op, Version: "v1.2.3", Revision: "abc", Created: time.Unix(1700000000, 0)}
	a, err := Dolphin(t.TempDir(), in)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(bin, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	b, err := Dolphin(t.TempDir(), in)
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, a) != digestOf(t, b) {
		t.Fatalf("same inputs, two digests: %s %s", digestOf(t, a), digestOf(t, b))
	}
	in.Created = in.Created.Add(time.Second)
	c, err := Dolphin(t.TempDir(), in)
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, a) == digestOf(t, c) {
		t.Fatal("another SOURCE_DATE_EPOCH gave the same digest")
	}

	cf, err := a.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || cf.Config.Entrypoint[0] != "/dolphin-operator" || cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Fatalf("config %+v", cf.Config)
	}
	if cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" || cf.Config.Labels["org.opencontainers.image.revision"] != "abc" ||
		cf.Config.Labels["org.opencontainers.image.created"] != "2023-11-14T22:13:20Z" {
		t.Fatalf("labels %v", cf.Config.Labels)
	}
	entries := layerEntries(t, a)
	for path, want := range map[string]string{
		"dolphin": "755 0:0", "dolphin-operator": "755 0:0", "tmp/": "1777 0:0", "home/nonroot/": "700 65532:65532",
	} {
		if got := entries[path]; got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

// layerEntries lists "mode uid:gid" per path of an image's only layer, checking every time is
// the image's creation time.
func layerEntries(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v", len(layers), err)
	}
	cf, _ := img.ConfigFile()
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(cf.Created.Time) {
			t.Errorf("%s has time %s, want %s", h.Name, h.ModTime, cf.Created.Time)
		}
		out[h.Name] = fmt.Sprintf("%o %d:%d", h.Mode, h.Uid, h.Gid)
	}
}

func TestWriteArchiveLoadsBackUnderEveryReference(t *testing.T) {
	l, err := Layer(t.TempDir(), []File{{Path: "/hello", Mode: 0o644, Body: []byte("hi")}}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image([]v1.Layer{l}, Config{Cmd: []string{"/hello"}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "a.tar")
	if err := WriteArchive(path, map[string]v1.Image{"docker.io/library/mariadb:10.11": img, "docker.io/library/mariadb:10.11.19": img}); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"docker.io/library/mariadb:10.11", "mariadb:10.11.19"} {
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tarball.ImageFromPath(path, &tag)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if digestOf(t, got) != digestOf(t, img) {
			t.Fatalf("%s: digest %s, want %s", ref, digestOf(t, got), digestOf(t, img))
		}
	}
	if _, err := os.Stat(path + ".tmp"); err == nil {
		t.Fatal("the temporary archive was left")
	}
}

func TestLayerRefusesRelativeOrUncleanPaths(t *testing.T) {
	for _, p := range []string{"etc/passwd", "/etc/../passwd", "/"} {
		if _, err := Layer(t.TempDir(), []File{{Path: p, Mode: 0o644}}, time.Unix(0, 0)); err == nil {
			t.Errorf("%q was accepted", p)
		}
	}
}

func TestPackageVersionReadsDpkgStatus(t *testing.T) {
	status := "Package: mariadb-client\nVersion: 1:10.11.19-0+deb12u1\n\nPackage: mariadb-server\nStatus: install ok installed\nVersion: 1:10.11.19-0+deb12u1\n\n"
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range map[string]string{"./etc/passwd": "root:x:0:0::/root:/bin/sh\n", "./var/lib/dpkg/status": status} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	got, err := PackageVersion(bytes.NewReader(buf.Bytes()), "mariadb-server")
	if err != nil || got != "10.11.19" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := PackageVersion(bytes.NewReader(buf.Bytes()), "mysql-server"); err == nil || !strings.Contains(err.Error(), "not installed") {
		t.Fatalf("a missing package: %v", err)
	}
}

// TestMariaDBRootFSArgsKeepTheOfficialLayout checks the mmdebstrap command line for what the
// pods rely on (uid 999 before the packages, the tools, an empty data directory) and that the
// security archive is among the sources.
func TestMariaDBRootFSArgsKeepTheOfficialLayout(t *testing.T) {
	args := strings.Join(MariaDBRootFSArgs(MariaDBSuite{Name: "trixie"}, "/out.tar"), "\n")
	for _, want := range []string{
		"--variant=minbase", "--include=mariadb-server,mariadb-client,mariadb-backup",
		"mysql:x:999:999:", "mysql:x:999:", "id -u mysql)\" = 999",
		"rm -rf \"$1\"/var/lib/mysql ", "deb http://deb.debian.org/debian-security trixie-security main",
		"deb http://deb.debian.org/debian trixie-updates main",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("mmdebstrap arguments lack %q:\n%s", want, args)
		}
	}
}

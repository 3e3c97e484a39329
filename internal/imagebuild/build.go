package imagebuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dolphin-operator/dolphin/internal/imagebuild/manifest"
)

// Image references of the images built here. The MariaDB images carry the official image's
// names, so that a MySQLCluster's default image (docker.io/library/mariadb:<version>) runs
// them on a node that has them and no registry (the local node never pulls).
const (
	DolphinRepository = "ghcr.io/dolphin-operator/dolphin"
	PauseReference    = "localhost/dolphin-pause:1"
	MariaDBRepository = "docker.io/library/mariadb"
)

// MariaDBEpoch is the file and creation time of the MariaDB images: fixed, so that the same
// Debian packages give the same digest whenever they are built.
var MariaDBEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Options says what Build makes and where.
type Options struct {
	// Dir is the cache folder of images (root file systems and archives), kept between runs.
	Dir string
	// Dolphin are the inputs of Dolphin's image; Tag is its tag (e.g. "dev").
	Dolphin DolphinInputs
	Tag     string
	// PauseBinary is the static sandbox program (hack/pause).
	PauseBinary string
	// Suites are the Debian releases whose MariaDB make images (bookworm, trixie).
	Suites []MariaDBSuite
	// Log receives progress and mmdebstrap's output.
	Log io.Writer
}

// The record of a build (package manifest).
type (
	// Built is one image of a build.
	Built = manifest.Built
	// Manifest is every image of a build.
	Manifest = manifest.Manifest
)

// ManifestPath is where Build records what it made.
func ManifestPath(dir string) string { return manifest.Path(dir) }

// Build makes Dolphin's image, the pause image and a MariaDB image per suite in o.Dir. A
// MariaDB root file system is reused while the mmdebstrap command line that made it is the
// same (its key is the hash of that command line); Dolphin's image is rebuilt each time (a few
// seconds) and is the same digest for the same binaries and epoch.
func Build(ctx context.Context, o Options) (Manifest, error) {
	var m Manifest
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return m, fmt.Errorf("creating %s: %w", o.Dir, err)
	}
	work, err := os.MkdirTemp(o.Dir, ".work-")
	if err != nil {
		return m, fmt.Errorf("creating a work folder: %w", err)
	}
	defer os.RemoveAll(work)

	start := time.Now()
	img, err := Dolphin(work, o.Dolphin)
	if err != nil {
		return m, fmt.Errorf("dolphin image: %w", err)
	}
	if m.Dolphin, err = write(o.Dir, "dolphin", img, DolphinRepository+":"+o.Tag); err != nil {
		return m, err
	}
	fmt.Fprintf(o.Log, "images: %s %s (%.1fs)\n", m.Dolphin.References[0], m.Dolphin.Digest, time.Since(start).Seconds())

	start = time.Now()
	if img, err = Pause(work, o.PauseBinary, MariaDBEpoch); err != nil {
		return m, fmt.Errorf("pause image: %w", err)
	}
	if m.Pause, err = write(o.Dir, "pause", img, PauseReference); err != nil {
		return m, err
	}
	fmt.Fprintf(o.Log, "images: %s %s (%.1fs)\n", PauseReference, m.Pause.Digest, time.Since(start).Seconds())

	for _, s := range o.Suites {
		start = time.Now()
		b, err := buildMariaDB(ctx, o.Dir, s, o.Log)
		if err != nil {
			return m, fmt.Errorf("MariaDB image of %s: %w", s.Name, err)
		}
		m.MariaDB = append(m.MariaDB, b)
		fmt.Fprintf(o.Log, "images: %s %s (%.1fs)\n", strings.Join(b.References, ", "), b.Digest, time.Since(start).Seconds())
	}
	return m, manifest.Write(o.Dir, m)
}

// buildMariaDB makes (or reuses) the root file system of suite and the image from it.
func buildMariaDB(ctx context.Context, dir string, s MariaDBSuite, log io.Writer) (Built, error) {
	sum := sha256.Sum256([]byte(strings.Join(MariaDBRootFSArgs(s, "rootfs.tar"), "\x00") + "\x00" + MariaDBEpoch.String()))
	key := hex.EncodeToString(sum[:])[:16]
	rootfs := filepath.Join(dir, "mariadb-"+s.Name+"-"+key+".rootfs.tar")
	if _, err := os.Stat(rootfs); err != nil {
		fmt.Fprintf(log, "images: building the %s root file system with mmdebstrap (~2 min, once per key %s)\n", s.Name, key)
		tmp := rootfs + ".tmp"
		if err := MariaDBRootFS(ctx, s, tmp, MariaDBEpoch, log); err != nil {
			os.Remove(tmp)
			return Built{}, err
		}
		if err := renameFile(tmp, rootfs); err != nil {
			return Built{}, err
		}
		// Root file systems of this suite under other keys are from older command lines.
		old, _ := filepath.Glob(filepath.Join(dir, "mariadb-"+s.Name+"-*.rootfs.tar"))
		for _, o := range old {
			// Only this suite's: a key is 16 hex digits ("bookworm-backports-…" is another suite).
			k := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(o), "mariadb-"+s.Name+"-"), ".rootfs.tar")
			if o != rootfs && len(k) == 16 && !strings.Contains(k, "-") {
				os.Remove(o)
			}
		}
	}
	f, err := os.Open(rootfs)
	if err != nil {
		return Built{}, fmt.Errorf("opening %s: %w", rootfs, err)
	}
	version, err := PackageVersion(f, "mariadb-server")
	f.Close()
	if err != nil {
		return Built{}, err
	}
	img, err := MariaDB(rootfs, version, MariaDBEpoch)
	if err != nil {
		return Built{}, err
	}
	minor := version[:strings.LastIndex(version, ".")]
	return write(dir, "mariadb-"+version, img, MariaDBRepository+":"+version, MariaDBRepository+":"+minor)
}

// write writes img under refs to dir/<base>.tar unless an archive of the same digest is there.
func write(dir, base string, img v1.Image, refs ...string) (Built, error) {
	d, err := img.Digest()
	if err != nil {
		return Built{}, fmt.Errorf("computing the digest of %s: %w", refs[0], err)
	}
	b := Built{References: refs, Digest: d.String(), Archive: filepath.Join(dir, base+".tar")}
	stamp := b.Archive + ".digest"
	if old, err := os.ReadFile(stamp); err == nil && string(old) == b.Digest+" "+strings.Join(refs, " ") {
		if _, err := os.Stat(b.Archive); err == nil {
			return b, nil
		}
	}
	images := make(map[string]v1.Image, len(refs))
	for _, r := range refs {
		images[r] = img
	}
	if err := WriteArchive(b.Archive, images); err != nil {
		return Built{}, err
	}
	if err := os.WriteFile(stamp, []byte(b.Digest+" "+strings.Join(refs, " ")), 0o644); err != nil {
		return Built{}, fmt.Errorf("writing %s: %w", stamp, err)
	}
	return b, nil
}

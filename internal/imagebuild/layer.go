// Package imagebuild builds Dolphin's container images without Docker: layers are tar files
// written here with fixed owners, modes and times, assembled into images with
// go-containerregistry and written as Docker archives that `ctr images import` loads. The same
// inputs give the same digest (docs/design/0046-images-built-here.md).
package imagebuild

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one entry of a layer built by Layer.
type File struct {
	// Path is the absolute path in the image ("/dolphin").
	Path string
	// Mode is the permission bits (0o755); a directory has Dir set.
	Mode int64
	// UID and GID own the entry.
	UID, GID int
	// Dir makes the entry a directory (Body and Source are ignored).
	Dir bool
	// Body is the content of a small file.
	Body []byte
	// Source, when set, is a host file whose content is copied (large binaries).
	Source string
}

// Layer writes files as an uncompressed tar in dir (sorted by path, parents before children,
// every time set to epoch, no user or group names) and returns it as a gzip-compressed layer.
// The same files and epoch give the same digest on any machine.
func Layer(dir string, files []File, epoch time.Time) (v1.Layer, error) {
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	f, err := os.CreateTemp(dir, "layer-*.tar")
	if err != nil {
		return nil, fmt.Errorf("creating a layer file: %w", err)
	}
	name := f.Name()
	if err := writeTar(f, sorted, epoch); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("writing %s: %w", name, err)
	}
	l, err := tarball.LayerFromFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading the layer %s: %w", name, err)
	}
	return l, nil
}

func writeTar(w io.Writer, files []File, epoch time.Time) error {
	tw := tar.NewWriter(w)
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return fmt.Errorf("layer entry %q: the path must be absolute and clean", f.Path)
		}
		h := &tar.Header{
			Name: strings.TrimPrefix(f.Path, "/"), Mode: f.Mode, Uid: f.UID, Gid: f.GID,
			ModTime: epoch, Format: tar.FormatPAX,
		}
		var body io.Reader
		var closer io.Closer // the source file, closed once copied
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Source != "":
			src, err := os.Open(f.Source)
			if err != nil {
				return fmt.Errorf("layer entry %s: %w", f.Path, err)
			}
			fi, err := src.Stat()
			if err != nil {
				src.Close()
				return fmt.Errorf("layer entry %s: %w", f.Path, err)
			}
			h.Typeflag, h.Size, body = tar.TypeReg, fi.Size(), src
			closer = src
		default:
			h.Typeflag, h.Size, body = tar.TypeReg, int64(len(f.Body)), strings.NewReader(string(f.Body))
		}
		if err := writeEntry(tw, h, body); err != nil {
			if closer != nil {
				closer.Close()
			}
			return fmt.Errorf("layer entry %s: %w", f.Path, err)
		}
		if closer != nil {
			closer.Close()
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("closing the layer: %w", err)
	}
	return nil
}

func renameFile(from, to string) error {
	if err := os.Rename(from, to); err != nil {
		return fmt.Errorf("renaming %s: %w", from, err)
	}
	return nil
}

// writeEntry writes one header and its body (nil for a directory).
func writeEntry(tw *tar.Writer, h *tar.Header, body io.Reader) error {
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if body == nil {
		return nil
	}
	n, err := io.Copy(tw, body)
	if err != nil {
		return err
	}
	if n != h.Size {
		return fmt.Errorf("the file changed while it was read (%d bytes, %d expected)", n, h.Size)
	}
	return nil
}

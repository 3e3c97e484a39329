package imagebuild

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Config is what an image runs and says about itself.
type Config struct {
	// User is "uid:gid" (numeric, so that runAsNonRoot can check it).
	User string
	// Entrypoint and Cmd are the default command.
	Entrypoint, Cmd []string
	// Env are NAME=value entries; PATH should be among them.
	Env []string
	// WorkingDir is the default working directory.
	WorkingDir string
	// Labels are the OCI annotations of the image (org.opencontainers.image.*).
	Labels map[string]string
	// Created is the image's creation time: SOURCE_DATE_EPOCH, so that the digest does not
	// change with the time of the build.
	Created time.Time
}

// Image stacks layers into an amd64/linux image with cfg.
func Image(layers []v1.Layer, cfg Config) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, fmt.Errorf("stacking layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the image configuration: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: cfg.Created.UTC()}
	cf.Config.User = cfg.User
	cf.Config.Entrypoint = cfg.Entrypoint
	cf.Config.Cmd = cfg.Cmd
	cf.Config.Env = cfg.Env
	cf.Config.WorkingDir = cfg.WorkingDir
	cf.Config.Labels = maps.Clone(cfg.Labels)
	// The history says which layer is what, with the same fixed time.
	cf.History = nil
	for range layers {
		cf.History = append(cf.History, v1.History{Created: cf.Created, CreatedBy: "dolphin imagebuild"})
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the image configuration: %w", err)
	}
	return img, nil
}

// WriteArchive writes images under their references as one Docker archive at path (what
// `ctr images import` and `docker load` read). The file is written next to path and renamed,
// so a reader never sees half an archive.
func WriteArchive(path string, images map[string]v1.Image) error {
	refs := make(map[name.Reference]v1.Image, len(images))
	for _, r := range slices.Sorted(maps.Keys(images)) {
		ref, err := name.ParseReference(r)
		if err != nil {
			return fmt.Errorf("image reference %q: %w", r, err)
		}
		refs[ref] = images[r]
	}
	tmp := path + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		return fmt.Errorf("writing the archive %s: %w", path, err)
	}
	if err := renameFile(tmp, path); err != nil {
		return err
	}
	return nil
}

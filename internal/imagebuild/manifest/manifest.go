// Package manifest is the record `make images` writes (images.json): which image archives it
// made and under which references. Apart from internal/imagebuild so that readers (`dolphin
// local up`, tests) do not link go-containerregistry.
package manifest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Built is one image written by make images.
type Built struct {
	// References name the image (all point at the same digest).
	References []string `json:"references"`
	// Digest is the image's manifest digest.
	Digest string `json:"digest"`
	// Archive is the Docker archive holding it.
	Archive string `json:"archive"`
}

// Manifest lists the images of one build.
type Manifest struct {
	Dolphin Built   `json:"dolphin"`
	Pause   Built   `json:"pause"`
	MariaDB []Built `json:"mariadb"`
}

// Path is where a build in dir records what it made.
func Path(dir string) string { return filepath.Join(dir, "images.json") }

// Read reads the record of the build in dir, checking that it names every image.
func Read(dir string) (Manifest, error) {
	var m Manifest
	data, err := os.ReadFile(Path(dir))
	if err != nil {
		return m, fmt.Errorf("no images in %s: build them with `make images` (root; ~2 min the first time): %w", dir, err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("parsing %s: %w", Path(dir), err)
	}
	if m.Dolphin.Archive == "" || m.Pause.Archive == "" || len(m.MariaDB) == 0 {
		return m, fmt.Errorf("%s lacks Dolphin's, the pause or a MariaDB image: run `make images`", Path(dir))
	}
	return m, nil
}

// Write records m in dir.
func Write(dir string, m Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the manifest: %w", err)
	}
	if err := os.WriteFile(Path(dir), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the manifest: %w", err)
	}
	return nil
}

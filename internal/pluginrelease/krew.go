// Package pluginrelease packages kubectl-dolphin for a release: an archive per platform and
// the krew manifest (plugins/dolphin.yaml) naming them with their SHA-256 sums, checked with
// the rules krew's own index validation applies (sigs.k8s.io/krew internal/index/validation,
// v0.4.3: krew's module cannot be imported here, it requires client-go v11.0.0+incompatible).
package pluginrelease

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Plugin is a krew plugin manifest (krew's index.Plugin, apiVersion
// krew.googlecontainertools.github.com/v1alpha2).
type Plugin struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PluginSpec `json:"spec"`
}

// PluginSpec is what krew shows and installs.
type PluginSpec struct {
	Version          string     `json:"version,omitempty"`
	ShortDescription string     `json:"shortDescription,omitempty"`
	Description      string     `json:"description,omitempty"`
	Caveats          string     `json:"caveats,omitempty"`
	Homepage         string     `json:"homepage,omitempty"`
	Platforms        []Platform `json:"platforms,omitempty"`
}

// Platform is one archive and the platforms it runs on.
type Platform struct {
	URI      string                `json:"uri,omitempty"`
	Sha256   string                `json:"sha256,omitempty"`
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	Files    []FileOperation       `json:"files"`
	Bin      string                `json:"bin"`
}

// FileOperation copies files out of the archive.
type FileOperation struct {
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// Archive is one built platform archive.
type Archive struct {
	OS, Arch, File, Sha256 string
}

// Platforms are the platforms a release builds the plugin for.
var Platforms = [][2]string{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}}

// BuildArchives cross-compiles kubectl-dolphin of the repository at root for each platform
// (version linked in) and writes kubectl-dolphin_<version>_<os>_<arch>.tar.gz into out.
func BuildArchives(ctx context.Context, root, version, out string, platforms [][2]string) ([]Archive, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	var archives []Archive
	for _, p := range platforms {
		goos, arch := p[0], p[1]
		tmp, err := os.MkdirTemp("", "kubectl-dolphin-build-")
		if err != nil {
			return nil, err
		}
		bin := filepath.Join(tmp, "kubectl-dolphin")
		build := exec.CommandContext(ctx, "go", "build", "-trimpath",
			"-ldflags", "-s -w -X github.com/dolphin-operator/dolphin/internal/plugin.Version="+version,
			"-o", bin, "./cmd/kubectl-dolphin")
		build.Dir = root
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+arch)
		if b, err := build.CombinedOutput(); err != nil {
			os.RemoveAll(tmp)
			return nil, fmt.Errorf("building kubectl-dolphin for %s/%s: %w: %s", goos, arch, err, b)
		}
		file := filepath.Join(out, fmt.Sprintf("kubectl-dolphin_%s_%s_%s.tar.gz", version, goos, arch))
		sum, err := writeArchive(file, bin)
		os.RemoveAll(tmp)
		if err != nil {
			return nil, err
		}
		archives = append(archives, Archive{OS: goos, Arch: arch, File: file, Sha256: sum})
	}
	return archives, nil
}

// writeArchive writes a tar.gz holding bin as kubectl-dolphin and returns its SHA-256.
func writeArchive(file, bin string) (string, error) {
	f, err := os.Create(file)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	gz := gzip.NewWriter(io.MultiWriter(f, h))
	tw := tar.NewWriter(gz)
	err = func() error {
		src, err := os.Open(bin)
		if err != nil {
			return err
		}
		defer src.Close()
		fi, err := src.Stat()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: "kubectl-dolphin", Mode: 0o755, Size: fi.Size()}); err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		return err
	}()
	err = errors.Join(err, tw.Close(), gz.Close(), f.Close())
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", file, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Manifest is the krew manifest of a release whose archives are downloadable under urlBase.
func Manifest(version, urlBase string, archives []Archive) *Plugin {
	p := &Plugin{
		TypeMeta:   metav1.TypeMeta{APIVersion: "krew.googlecontainertools.github.com/v1alpha2", Kind: "Plugin"},
		ObjectMeta: metav1.ObjectMeta{Name: "dolphin"},
		Spec: PluginSpec{
			Version:          version,
			Homepage:         "https://github.com/dolphin-operator/dolphin",
			ShortDescription: "Operate MariaDB clusters of the Dolphin operator",
			Description: "Shows a Dolphin MySQLCluster at a glance (topology, lag, GTID positions, semi-sync,\n" +
				"backups, recoverability), requests switchovers, gives credentials and a mariadb shell,\n" +
				"takes backups, writes restore manifests and support bundles.",
			Caveats: "connect runs the mariadb client, which must be installed.\n" +
				"Use the plugin of the operator's release: kubectl dolphin version warns when they differ.",
		},
	}
	for _, a := range archives {
		p.Spec.Platforms = append(p.Spec.Platforms, Platform{
			URI:      strings.TrimSuffix(urlBase, "/") + "/" + filepath.Base(a.File),
			Sha256:   a.Sha256,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"os": a.OS, "arch": a.Arch}},
			Files:    []FileOperation{{From: "kubectl-dolphin", To: "."}},
			Bin:      "kubectl-dolphin",
		})
	}
	return p
}

var (
	safePluginName = regexp.MustCompile(`^[\w-]+$`)
	validSHA256    = regexp.MustCompile(`^[a-f0-9]{64}$`)
	// semver is krew's blang/semver with a leading v, as the index requires.
	semver = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
)

// Validate applies krew's index validation to p.
func Validate(p *Plugin) error {
	switch {
	case p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2":
		return fmt.Errorf("apiVersion %q is not krew's v1alpha2", p.APIVersion)
	case p.Kind != "Plugin":
		return fmt.Errorf("kind %q, want Plugin", p.Kind)
	case !safePluginName.MatchString(p.Name):
		return fmt.Errorf("plugin name %q must match %s", p.Name, safePluginName)
	case p.Spec.ShortDescription == "" || strings.ContainsAny(p.Spec.ShortDescription, "\r\n"):
		return fmt.Errorf("a short description of one line is required")
	case len(p.Spec.Platforms) == 0:
		return fmt.Errorf("no platform")
	case !semver.MatchString(p.Spec.Version):
		return fmt.Errorf("version %q is no semantic version with a leading v", p.Spec.Version)
	}
	for _, pl := range p.Spec.Platforms {
		switch {
		case pl.URI == "":
			return fmt.Errorf("a platform without uri")
		case !validSHA256.MatchString(pl.Sha256):
			return fmt.Errorf("%s: sha256 %q is not valid", pl.URI, pl.Sha256)
		case pl.Bin == "":
			return fmt.Errorf("%s: no bin", pl.URI)
		case pl.Files != nil && len(pl.Files) == 0:
			return fmt.Errorf("%s: files must be unset or non-empty", pl.URI)
		case pl.Selector == nil || (len(pl.Selector.MatchLabels) == 0 && len(pl.Selector.MatchExpressions) == 0):
			return fmt.Errorf("%s: a selector is required", pl.URI)
		}
		for _, f := range pl.Files {
			if f.From == "" || f.To == "" {
				return fmt.Errorf("%s: a file operation needs from and to", pl.URI)
			}
		}
		for k := range pl.Selector.MatchLabels {
			if k != "os" && k != "arch" {
				return fmt.Errorf("%s: selector key %q is not supported (os, arch)", pl.URI, k)
			}
		}
		for _, e := range pl.Selector.MatchExpressions {
			if e.Key != "os" && e.Key != "arch" {
				return fmt.Errorf("%s: selector key %q is not supported (os, arch)", pl.URI, e.Key)
			}
		}
	}
	return nil
}

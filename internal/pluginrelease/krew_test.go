package pluginrelease

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// A release archive for this machine holds the plugin krew links (bin), its SHA-256 is the
// file's, the manifest naming it passes krew's validation and reads back as written, and the
// plugin installed from it the way krew does (unpack, link bin) runs and says its version.
func TestReleaseArchiveInstallsAsKrewDoes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kubectl-dolphin")
	}
	out := t.TempDir()
	archives, err := BuildArchives(context.Background(), filepath.Join("..", ".."), "v0.0.1-test", out, [][2]string{{runtime.GOOS, runtime.GOARCH}})
	if err != nil {
		t.Fatal(err)
	}
	a := archives[0]
	b, err := os.ReadFile(a.File)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != a.Sha256 {
		t.Fatalf("sha256 %s is not the archive's", a.Sha256)
	}
	m := Manifest("v0.0.1-test", "https://example.com/rel/", archives)
	if err := Validate(m); err != nil {
		t.Fatal(err)
	}
	y, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back Plugin
	if err := yaml.UnmarshalStrict(y, &back); err != nil || back.Spec.Platforms[0].URI != "https://example.com/rel/"+filepath.Base(a.File) {
		t.Fatalf("the manifest does not read back: %v\n%s", err, y)
	}

	// Install as krew does: unpack, apply files, link bin.
	dir := t.TempDir()
	untar(t, a.File, dir)
	pl := m.Spec.Platforms[0]
	bin := filepath.Join(dir, pl.Bin)
	fi, err := os.Stat(bin)
	if err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("bin %s of the archive: %v, mode %v", pl.Bin, err, fi)
	}
	got, err := exec.Command(bin, "version", "--kubeconfig", "/nonexistent").CombinedOutput()
	if !strings.Contains(string(got), "kubectl-dolphin v0.0.1-test") {
		t.Errorf("the installed plugin says %q (%v), want its version", got, err)
	}
}

// untar unpacks a .tar.gz into dir, modes kept (as krew does).
func untar(t *testing.T, file, dir string) {
	t.Helper()
	for name, f := range testenv.ReadTarGz(t, file) {
		if err := os.WriteFile(filepath.Join(dir, name), f.Data, os.FileMode(f.Mode)); err != nil {
			t.Fatal(err)
		}
	}
}

// Validate refuses what krew's index refuses.
func TestValidateRefusesWhatKrewRefuses(t *testing.T) {
	good := func() *Plugin {
		return Manifest("v1.2.3", "https://example.com", []Archive{{OS: "linux", Arch: "amd64", File: "x.tar.gz", Sha256: strings.Repeat("a", 64)}})
	}
	if err := Validate(good()); err != nil {
		t.Fatal(err)
	}
	for what, spoil := range map[string]func(*Plugin){
		"a version without v":         func(p *Plugin) { p.Spec.Version = "1.2.3" },
		"a two-line description":      func(p *Plugin) { p.Spec.ShortDescription = "a\nb" },
		"a short sha256":              func(p *Plugin) { p.Spec.Platforms[0].Sha256 = "abc" },
		"an upper-case sha256":        func(p *Plugin) { p.Spec.Platforms[0].Sha256 = strings.Repeat("A", 64) },
		"no bin":                      func(p *Plugin) { p.Spec.Platforms[0].Bin = "" },
		"a selector on another label": func(p *Plugin) { p.Spec.Platforms[0].Selector.MatchLabels["distro"] = "debian" },
		"no selector":                 func(p *Plugin) { p.Spec.Platforms[0].Selector = nil },
		"empty files":                 func(p *Plugin) { p.Spec.Platforms[0].Files = []FileOperation{} },
		"a name with a dot":           func(p *Plugin) { p.Name = "dol.phin" },
		"no platform":                 func(p *Plugin) { p.Spec.Platforms = nil },
		"another apiVersion":          func(p *Plugin) { p.APIVersion = "krew.googlecontainertools.github.com/v1alpha1" },
	} {
		p := good()
		spoil(p)
		if err := Validate(p); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
}

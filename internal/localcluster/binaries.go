package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// Versions of the control plane that hack/control-plane.sh builds.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.7.3"
)

// ControlPlaneBinaries are the programs Start runs; all must be in the binary folder.
var ControlPlaneBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// CacheDir is Dolphin's cache folder, as hack/control-plane.sh computes it:
// ${DOLPHIN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dolphin}.
func CacheDir() string {
	if d := os.Getenv("DOLPHIN_CACHE_DIR"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "dolphin")
}

// DefaultBinDir is where hack/control-plane.sh puts the binaries (`hack/control-plane.sh --print`).
func DefaultBinDir() string {
	return filepath.Join(CacheDir(), "k8s", KubernetesVersion+"-etcd-"+EtcdVersion)
}

// FindBinDir returns the folder with the control-plane binaries: explicit when set, else
// KUBEBUILDER_ASSETS when it holds all of them (as `make test` sets it), else DefaultBinDir.
// It fails with a message saying how to build them when the folder is incomplete.
func FindBinDir(explicit string) (string, error) {
	if explicit != "" {
		return checkBinDir(explicit)
	}
	if env := os.Getenv("KUBEBUILDER_ASSETS"); env != "" {
		if dir, err := checkBinDir(env); err == nil {
			return dir, nil
		}
	}
	return checkBinDir(DefaultBinDir())
}

// checkBinDir returns dir as an absolute path when it holds every control-plane binary.
func checkBinDir(dir string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("no control-plane binary folder given: build it with hack/control-plane.sh (prints %s)", DefaultBinDir())
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", dir, err)
	}
	for _, b := range ControlPlaneBinaries {
		fi, err := os.Stat(filepath.Join(abs, b))
		if err != nil {
			return "", fmt.Errorf("control-plane binary missing (build them with hack/control-plane.sh): %w", err)
		}
		if fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not executable", filepath.Join(abs, b))
		}
	}
	return abs, nil
}

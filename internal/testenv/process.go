package testenv

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dolphin-operator/dolphin/internal/freeport"
)

// FreeAddr returns a loopback address with a port for a process the test starts later:
// free now, outside the ephemeral range the client connections of other tests take their
// local ports from, and reserved against other callers for a while (package freeport).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ports, err := freeport.Pick(1)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
}

// AdminKubeconfig writes a kubeconfig of a system:masters user of env and returns its path,
// for a process under test (an operator binary, `dolphin local`'s CRD installer) to connect with.
func AdminKubeconfig(t testing.TB, env *envtest.Environment) string {
	t.Helper()
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

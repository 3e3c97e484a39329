package realnode

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestShareMountPoint checks that a folder becomes a shared mount point of its own, once
// (a second call stacks no second mount), and that a namespace-like mount made under it
// afterwards can be unmounted and its file removed — what failed with EBUSY when
// `ip netns add` bind-mounted /run/netns over containerd's mounts.
func TestShareMountPoint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts need root")
	}
	dir := filepath.Join(t.TempDir(), "netns")
	t.Cleanup(func() { _ = unmountUnder(dir) })
	for range 2 {
		if err := shareMountPoint(dir); err != nil {
			t.Fatal(err)
		}
	}
	points, err := mountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 1 {
		t.Fatalf("mount points at %s: %v, want exactly one", dir, points)
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	shared := false
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) > 6 && f[4] == dir {
			shared = strings.Contains(line, " shared:")
		}
	}
	if !shared {
		t.Fatalf("%s is not a shared mount point", dir)
	}
	// A file bind-mounted under it, as containerd mounts a network namespace, and removed
	// as it removes one.
	ns := filepath.Join(dir, "cni-test")
	if err := os.WriteFile(ns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("/proc/self/ns/net", ns, "none", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Unmount(ns, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(ns); err != nil {
		t.Fatalf("removing the unmounted namespace file: %v", err)
	}
}

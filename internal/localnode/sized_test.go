package localnode

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A sized volume is a real file system of the claim's size: it fills up (ENOSPC) at that
// size, grows online, and leaves nothing behind when removed.
func TestServerSizedVolumeFillsGrowsAndGoes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sized volumes are loop mounts: run as root")
	}
	for _, tool := range []string{"mkfs.ext4", "resize2fs", "losetup", "findmnt"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir := filepath.Join(t.TempDir(), "volumes", "claim-1")
	const mib = 1 << 20
	if err := mountSized(dir, 32*mib); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	if err := mountSized(dir, 32*mib); err != nil { // idempotent
		t.Fatalf("mounting again: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Fatalf("a fresh volume must be empty (a server's data directory): %v %v", entries, err)
	}
	free := func() int64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * st.Bsize
	}
	if f := free(); f > 32*mib || f < 16*mib {
		t.Fatalf("free space %d, want a file system of about 32 MiB", f)
	}
	if err := writeUntilFull(filepath.Join(dir, "fill")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the volume: %v, want ENOSPC", err)
	}
	if err := os.Remove(filepath.Join(dir, "fill")); err != nil {
		t.Fatal(err)
	}
	if hasCapability(t, capSysResource) {
		before := free()
		if err := growSized(dir, 64*mib); err != nil {
			t.Fatal(err)
		}
		if after := free(); after < before+24*mib {
			t.Fatalf("free space %d after growing to 64 MiB, was %d", after, before)
		}
	} else if err := growSized(dir, 64*mib); err == nil {
		t.Fatal("growing a mounted ext4 without CAP_SYS_RESOURCE succeeded; the test's premise is wrong")
	} else {
		t.Logf("online growth not checked: this process lacks CAP_SYS_RESOURCE (%v)", err)
	}
	if err := UnmountVolumes(filepath.Dir(filepath.Dir(dir))); err != nil {
		t.Fatal(err)
	}
	if ok, err := isMountPoint(dir); err != nil || ok {
		t.Fatalf("still mounted after UnmountVolumes: %v %v", ok, err)
	}
	if err := mountSized(dir, 64*mib); err != nil { // as after a restart of the host
		t.Fatal(err)
	}
	if err := removeSized(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, sizedImage(dir)} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s left behind: %v", p, err)
		}
	}
}

func writeUntilFull(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
}

// capSysResource is CAP_SYS_RESOURCE's bit (linux/capability.h), which online growth of ext4
// needs.
const capSysResource = 24

// hasCapability reports whether this process has capability bit c in its effective set.
func hasCapability(t *testing.T, c uint) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n&(1<<c) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

package localnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// shimEnv names the environment variable that turns this binary into the
// container shim: when set (to a launch spec file), the package's init joins
// the pod's network namespace, prepares the container's mount namespace,
// drops to the container's user and execs the container's process. It never
// returns to the program's main.
const shimEnv = "DOLPHIN_LOCALNODE_SHIM"

// launchSpec is everything the shim needs; the node writes it as JSON.
type launchSpec struct {
	// NetNS is the network namespace file to join ("" = stay in the host's).
	NetNS string `json:"netns"`
	// Hostname is set in the new UTS namespace.
	Hostname string  `json:"hostname"`
	Mounts   []mount `json:"mounts"`
	Dir      string  `json:"dir"`
	// UID and GID are -1 to keep root.
	UID    int64    `json:"uid"`
	GID    int64    `json:"gid"`
	Groups []uint32 `json:"groups"`
	Path   string   `json:"path"`
	Args   []string `json:"args"`
	Env    []string `json:"env"`
}

// mount is one bind mount of a host path at a container path.
type mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly"`
}

func init() {
	spec := os.Getenv(shimEnv)
	if spec == "" {
		return
	}
	// Namespaces joined with setns belong to the thread: stay on this one
	// until exec.
	runtime.LockOSThread()
	err := shim(spec)
	fmt.Fprintf(os.Stderr, "dolphin local node: starting container: %v\n", err)
	os.Exit(127)
}

// shim runs in the child, started with new mount and UTS namespaces. It only
// returns on error.
func shim(specFile string) error {
	b, err := os.ReadFile(specFile)
	if err != nil {
		return err
	}
	var s launchSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("reading %s: %w", specFile, err)
	}
	if s.NetNS != "" {
		fd, err := unix.Open(s.NetNS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening network namespace %s: %w", s.NetNS, err)
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("joining network namespace %s: %w", s.NetNS, err)
		}
		_ = unix.Close(fd)
	}
	if s.Hostname != "" {
		if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
			return fmt.Errorf("sethostname: %w", err)
		}
	}
	// Nothing mounted here may leak to the host, nor host mounts change ours.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	// Open the program now, as root and before any mount: it may live under a folder a mount
	// covers (the node's dolphin binary under /tmp, and the pod's /tmp emptyDir) or that the
	// container's user may not traverse (a test's 0700 temporary folder), where an image's
	// program would be neither. It runs through its descriptor, which is left open (not
	// close-on-exec) so that a script's interpreter can open it too; execute permission on the
	// file itself is still checked for the container's user.
	fd, err := unix.Open(s.Path, unix.O_PATH, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", s.Path, err)
	}
	s.Path = fmt.Sprintf("/proc/self/fd/%d", fd)
	// Hold every source open before mounting anything: a mount may cover another's source
	// (a pod's /tmp emptyDir over a node folder under /tmp), which would then vanish.
	for i, m := range s.Mounts {
		fd, err := unix.Open(m.Source, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("volume source: %w", &os.PathError{Op: "open", Path: m.Source, Err: err})
		}
		s.Mounts[i].Source = fmt.Sprintf("/proc/self/fd/%d", fd)
	}
	for _, m := range s.Mounts {
		if err := bindMount(m); err != nil {
			return err
		}
	}
	if s.Dir != "" {
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			return fmt.Errorf("working directory: %w", err)
		}
		if err := unix.Chdir(s.Dir); err != nil {
			return fmt.Errorf("working directory: %w", err)
		}
	}
	if s.GID >= 0 || s.UID >= 0 {
		groups := make([]int, len(s.Groups))
		for i, g := range s.Groups {
			groups[i] = int(g)
		}
		if err := syscall.Setgroups(groups); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
	}
	if s.GID >= 0 {
		if err := syscall.Setgid(int(s.GID)); err != nil {
			return fmt.Errorf("setgid %d: %w", s.GID, err)
		}
	}
	if s.UID >= 0 {
		if err := syscall.Setuid(int(s.UID)); err != nil {
			return fmt.Errorf("setuid %d: %w", s.UID, err)
		}
	}
	if err := syscall.Exec(s.Path, s.Args, s.Env); err != nil {
		return fmt.Errorf("exec %s: %w", s.Path, err)
	}
	return nil
}

// bindMount binds m.Source at m.Target, creating the target (a directory, or
// an empty file for a file source) when missing, and makes it read-only if
// asked.
func bindMount(m mount) error {
	fi, err := os.Stat(m.Source)
	if err != nil {
		return fmt.Errorf("volume source: %w", err)
	}
	if err := ensureMountPoint(m.Target, fi.IsDir()); err != nil {
		return err
	}
	if err := unix.Mount(m.Source, m.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind mount %s at %s: %w", m.Source, m.Target, err)
	}
	if m.ReadOnly {
		if err := unix.Mount("", m.Target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("remount %s read-only: %w", m.Target, err)
		}
	}
	return nil
}

// ensureMountPoint creates target when missing. It is created on the host's
// file system (the container shares the host's root), and recorded in a
// marker so the node can remove it later; see mountPoints.
func ensureMountPoint(target string, dir bool) error {
	if _, err := os.Lstat(target); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("mount point: %w", err)
	}
	if dir {
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("mount point: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	return f.Close()
}

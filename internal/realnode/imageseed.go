package realnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dolphin-operator/dolphin/internal/localcluster"
	"github.com/dolphin-operator/dolphin/internal/nosync"
)

// An image seed is a containerd root into which a set of image archives was imported once
// (content and unpacked overlayfs snapshots, ~15–20 s for Dolphin's four archives on a
// 2-core machine, half of it unpacking); a new node's root is made from it with hard links
// in about a second instead of importing again (docs/design/0068). Only files containerd
// never changes in place are linked: content blobs (addressed by digest) and the files of
// committed snapshots (overlayfs lower layers: a container's writes go to its own upper
// folder). Everything else — the metadata databases above all — is copied.

// SeedsDir is where image seeds are kept: the user's cache, one folder per set of archives.
func SeedsDir() string { return filepath.Join(localcluster.CacheDir(), "containerd-seeds") }

// keptSeeds is how many seeds (the most recently made) survive the making of a new one: the
// images of the working tree, and of another build (the upgrade test's).
const keptSeeds = 3

// seedKey names the seed of archives for this containerd: each archive by the digest that
// make images records beside it (ARCHIVE.digest), else by its size and modification time.
func seedKey(archives []string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "containerd %s\n", ContainerdVersion)
	for _, a := range archives {
		if d, err := os.ReadFile(a + ".digest"); err == nil {
			fmt.Fprintf(h, "%s %s\n", filepath.Base(a), strings.TrimSpace(string(d)))
			continue
		}
		st, err := os.Stat(a)
		if err != nil {
			return "", fmt.Errorf("image archive %s: %w", a, err)
		}
		fmt.Fprintf(h, "%s %d %d\n", filepath.Base(a), st.Size(), st.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// seedImages fills the empty containerd root of a node that is not running yet from the seed
// of archives, making the seed first when there is none. It reports false (and the root as it
// was) when it could not: the caller imports the archives as before. The root is filled in a
// folder beside it and renamed into place once whole: a root is never left holding the seed's
// own metadata databases (a containerd started on them would change the seed).
func (n *Node) seedImages(ctx context.Context, archives []string) (bool, error) {
	root := n.layout.ContainerdRoot()
	if entries, err := os.ReadDir(root); err != nil || len(entries) > 0 {
		return false, nil // a node started before keeps what its containerd holds
	}
	seeds := SeedsDir()
	if err := os.MkdirAll(seeds, 0o700); err != nil {
		return false, fmt.Errorf("creating %s: %w", seeds, err)
	}
	if same, err := sameFilesystem(seeds, root); err != nil || !same {
		return false, errors.Join(err, fmt.Errorf("%s and %s are on different filesystems: no hard links between them", seeds, root))
	}
	key, err := seedKey(archives)
	if err != nil {
		return false, err
	}
	seed := filepath.Join(seeds, key)
	if _, err := os.Stat(filepath.Join(seed, "root")); err != nil {
		if err := makeSeed(ctx, n.opts.BinDir, archives, seed); err != nil {
			return false, err
		}
	}
	// Used now: pruning keeps the seeds used last.
	now := time.Now()
	_ = os.Chtimes(seed, now, now)
	filling := root + ".seeding"
	if err := os.RemoveAll(filling); err != nil { // a fill that was interrupted
		return false, fmt.Errorf("removing %s: %w", filling, err)
	}
	if err := os.Mkdir(filling, 0o700); err != nil {
		return false, fmt.Errorf("creating %s: %w", filling, err)
	}
	if err := linkSeed(filepath.Join(seed, "root"), filling); err != nil {
		return false, errors.Join(err, os.RemoveAll(filling))
	}
	if err := os.Remove(root); err != nil {
		return false, errors.Join(fmt.Errorf("replacing %s: %w", root, err), os.RemoveAll(filling))
	}
	if err := os.Rename(filling, root); err != nil {
		return false, errors.Join(fmt.Errorf("replacing %s: %w", root, err), os.MkdirAll(root, 0o700))
	}
	return true, nil
}

// sameFilesystem reports whether a and b are on one filesystem (hard links work between them).
func sameFilesystem(a, b string) (bool, error) {
	var sa, sb syscall.Stat_t
	if err := syscall.Stat(a, &sa); err != nil {
		return false, fmt.Errorf("%s: %w", a, err)
	}
	if err := syscall.Stat(b, &sb); err != nil {
		return false, fmt.Errorf("%s: %w", b, err)
	}
	return sa.Dev == sb.Dev, nil
}

// makeSeed imports archives into a containerd of its own whose root becomes seed/root: made
// in a temporary folder beside it and renamed into place, so that a seed is whole or absent
// (two makers at once: the second's is dropped). Older seeds beyond keptSeeds are removed.
func makeSeed(ctx context.Context, binDir string, archives []string, seed string) error {
	if err := os.MkdirAll(filepath.Dir(seed), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(seed), err)
	}
	removeStaleMakings(filepath.Dir(seed))
	tmp, err := os.MkdirTemp(filepath.Dir(seed), ".making-")
	if err != nil {
		return fmt.Errorf("preparing an image seed: %w", err)
	}
	defer os.RemoveAll(tmp)
	// Sockets need a short path; the state holds nothing worth keeping.
	state, err := os.MkdirTemp("", "dolphin-seed-")
	if err != nil {
		return fmt.Errorf("preparing an image seed: %w", err)
	}
	defer os.RemoveAll(state)
	socket := filepath.Join(state, "containerd.sock")
	config := filepath.Join(state, "containerd.toml")
	if err := os.WriteFile(config, []byte(seedContainerdConfig(filepath.Join(tmp, "root"), filepath.Join(state, "state"), socket)), 0o600); err != nil {
		return fmt.Errorf("preparing an image seed: %w", err)
	}
	logf, err := os.Create(filepath.Join(tmp, "containerd.log"))
	if err != nil {
		return fmt.Errorf("preparing an image seed: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(binDir, "containerd"), "--config", config)
	cmd.Stdout, cmd.Stderr = logf, logf
	// It dies with its maker (a killed `dolphin local up`, a test binary timed out).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting containerd for an image seed: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			return nil
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("containerd for an image seed did not stop within 30s")
		}
	}
	defer stop() //nolint:errcheck // the error path's cleanup; the normal path checks it below
	if err := waitForContainerd(ctx, binDir, socket, exited); err != nil {
		log, _ := os.ReadFile(logf.Name())
		return fmt.Errorf("%w\n%s", err, lastLines(string(log), 10))
	}
	for _, a := range archives {
		if err := importArchive(ctx, binDir, socket, a); err != nil {
			return err
		}
	}
	if err := stop(); err != nil {
		return err
	}
	// On disk before it is named: a seed cut short by a power loss would be used forever.
	if err := nosync.SyncFilesystem(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, seed); err != nil {
		if _, serr := os.Stat(filepath.Join(seed, "root")); serr == nil {
			return nil // made meanwhile by another
		}
		return fmt.Errorf("keeping the image seed: %w", err)
	}
	// Best effort: a seed that could not be removed only takes room.
	_ = pruneSeeds(filepath.Dir(seed), keptSeeds)
	return nil
}

// staleMaking is how old a seed being made must be to count as abandoned (its maker killed).
const staleMaking = time.Hour

// removeStaleMakings removes the folders of seeds whose making (or removal) was abandoned.
func removeStaleMakings(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && e.IsDir() && (strings.HasPrefix(e.Name(), ".making-") || strings.HasPrefix(e.Name(), ".removing-")) && time.Since(info.ModTime()) > staleMaking {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// seedContainerdConfig is a containerd without the CRI (nothing runs in it): only its
// content store, the overlayfs snapshotter (the node's) and the import's services.
func seedContainerdConfig(root, state, socket string) string {
	return fmt.Sprintf(`version = 3
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images", "io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins.'io.containerd.internal.v1.opt']
  path = %q
`, root, state, socket, socket+".ttrpc", filepath.Join(state, "opt"))
}

// waitForContainerd waits until the containerd at socket answers (30 s at most).
func waitForContainerd(ctx context.Context, binDir, socket string, exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := exec.CommandContext(ctx, filepath.Join(binDir, "ctr"), "--address", socket, "version").Run()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("containerd for an image seed exited")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd for an image seed did not answer within 30s: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// importArchive loads a Docker archive into the k8s.io namespace (the kubelet's) of the
// containerd at socket, unpacked for overlayfs.
func importArchive(ctx context.Context, binDir, socket, archive string) error {
	abs, err := filepath.Abs(archive)
	if err != nil {
		return fmt.Errorf("image archive %s: %w", archive, err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "ctr"), "--address", socket,
		"--namespace", "k8s.io", "images", "import", abs)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("importing %s into containerd: %w: %s", archive, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// linkSeed makes root (empty) a copy of the seed's root: cp -a --link (hard links, folders
// made again with their owners, modes and extended attributes — overlayfs marks opaque
// folders with one), then every file that is neither a content blob nor in a committed
// snapshot replaced by a copy of its own.
func linkSeed(seedRoot, root string) error {
	// --preserve=xattr named: with -a alone a failure to copy them is silent.
	if out, err := exec.Command("cp", "-a", "--preserve=xattr", "--link", seedRoot+"/.", root+"/").CombinedOutput(); err != nil {
		return fmt.Errorf("linking the image seed %s into %s: %w: %s", seedRoot, root, err, strings.TrimSpace(string(out)))
	}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() && (rel == "io.containerd.content.v1.content/blobs" || rel == "io.containerd.snapshotter.v1.overlayfs/snapshots") {
			return fs.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return unlinkCopy(path)
	})
}

// unlinkCopy replaces the hard link path with a copy of its content (mode kept).
func unlinkCopy(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := path + ".copy"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", path, err)
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// emptyDir removes everything in dir (kept).
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

// pruneSeeds removes the seeds of dir but the keep most recently made or used (and any being
// made). Each is renamed away before it is removed, so that a process linking from it at
// that moment fails (its paths are gone) rather than link part of it; that node imports.
func pruneSeeds(dir string, keep int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	type seed struct {
		name string
		at   time.Time
	}
	var seeds []seed
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		seeds = append(seeds, seed{e.Name(), info.ModTime()})
	}
	slices.SortFunc(seeds, func(a, b seed) int { return b.at.Compare(a.at) })
	var errs []error
	for _, s := range seeds[min(keep, len(seeds)):] {
		gone := filepath.Join(dir, ".removing-"+s.name)
		if err := os.Rename(filepath.Join(dir, s.name), gone); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, os.RemoveAll(gone))
	}
	return errors.Join(errs...)
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

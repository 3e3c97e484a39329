package realnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestImageSeedLinksWhatNeverChanges makes the image seed of the pause archive with a real
// containerd, fills two new nodes' roots from it (the seed made once), and checks what each
// root shares with the seed — content blobs and snapshot files as hard links, the metadata
// databases as copies of their own — and that a containerd started on a filled root lists
// the image; a root that already holds something is left alone.
func TestImageSeedLinksWhatNeverChanges(t *testing.T) {
	_, nodeBin, images := nodeInputs(t)
	if os.Geteuid() != 0 {
		t.Skip("containerd's overlayfs snapshotter needs root")
	}
	t.Setenv("DOLPHIN_CACHE_DIR", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	archives := []string{images.Pause.Archive}
	newNode := func() *Node {
		n := &Node{opts: Options{BinDir: nodeBin}, layout: NewLayout(t.TempDir())}
		if err := os.MkdirAll(n.layout.ContainerdRoot(), 0o700); err != nil {
			t.Fatal(err)
		}
		return n
	}

	first := newNode()
	began := time.Now()
	if ok, err := first.seedImages(ctx, archives); !ok || err != nil {
		t.Fatalf("seedImages on a new node: %v, %v", ok, err)
	}
	t.Logf("seed made and linked in %v", time.Since(began).Round(time.Millisecond))
	key, err := seedKey(archives)
	if err != nil {
		t.Fatal(err)
	}
	seedRoot := filepath.Join(SeedsDir(), key, "root")
	made, err := os.Stat(filepath.Join(SeedsDir(), key, "containerd.log"))
	if err != nil {
		t.Fatalf("the seed's containerd log: %v", err)
	}

	seedBefore := treeDigest(t, seedRoot)

	second := newNode()
	began = time.Now()
	if ok, err := second.seedImages(ctx, archives); !ok || err != nil {
		t.Fatalf("seedImages on a second node: %v, %v", ok, err)
	}
	t.Logf("linked from the seed in %v", time.Since(began).Round(time.Millisecond))
	if again, err := os.Stat(filepath.Join(SeedsDir(), key, "containerd.log")); err != nil || !again.ModTime().Equal(made.ModTime()) {
		t.Errorf("the seed was made again for the second node (%v)", err)
	}

	root := second.layout.ContainerdRoot()
	linked, copied := 0, 0
	err = filepath.WalkDir(seedRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(seedRoot, path)
		same := sameFile(t, path, filepath.Join(root, rel))
		shared := strings.HasPrefix(rel, "io.containerd.content.v1.content/blobs/") || strings.HasPrefix(rel, "io.containerd.snapshotter.v1.overlayfs/snapshots/")
		switch {
		case shared && !same:
			t.Errorf("%s: a copy, want a hard link to the seed's", rel)
		case !shared && same:
			t.Errorf("%s: a hard link to the seed's, want a copy (containerd writes it)", rel)
		case shared:
			linked++
		default:
			copied++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if linked == 0 || copied == 0 {
		t.Fatalf("%d files linked, %d copied: want both (blobs and snapshots; the metadata databases)", linked, copied)
	}
	t.Logf("%d files linked, %d copied", linked, copied)

	// The filled root works: a containerd of its own lists the image.
	state, err := os.MkdirTemp("", "dolphin-seedtest-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(state)
	socket := filepath.Join(state, "containerd.sock")
	config := filepath.Join(state, "containerd.toml")
	if err := os.WriteFile(config, []byte(seedContainerdConfig(root, filepath.Join(state, "state"), socket)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(nodeBin, "containerd"), "--config", config)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}()
	if err := waitForContainerd(ctx, nodeBin, socket, exited); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(nodeBin, "ctr"), "--address", socket, "--namespace", "k8s.io", "images", "ls", "-q").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images ls: %v: %s", err, out)
	}
	if got := strings.Fields(string(out)); !slices.Contains(got, images.Pause.References[0]) {
		t.Errorf("images on the filled root: %v, want %s", got, images.Pause.References[0])
	}

	// What that containerd does to its root never reaches the seed: the image removed and
	// its content collected (unlinked) there, the seed holds every file as it was.
	if out, err := exec.Command(filepath.Join(nodeBin, "ctr"), "--address", socket, "--namespace", "k8s.io", "images", "rm", "--sync", images.Pause.References[0]).CombinedOutput(); err != nil {
		t.Fatalf("ctr images rm: %v: %s", err, out)
	}
	if blobs, _ := os.ReadDir(filepath.Join(root, "io.containerd.content.v1.content/blobs/sha256")); len(blobs) != 0 {
		t.Logf("%d blobs left in the node's root after the removal", len(blobs))
	}
	if after := treeDigest(t, seedRoot); after != seedBefore {
		t.Errorf("the seed changed while a containerd used a root made from it")
	}

	// A root that holds something (a node started before) keeps it.
	if ok, err := second.seedImages(ctx, archives); ok || err != nil {
		t.Errorf("seedImages on a root already filled: %v, %v; want it left alone", ok, err)
	}
}

// sameFile reports whether a and b are the same file (hard links), failing the test when b
// is missing.
func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	sa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := os.Stat(b)
	if err != nil {
		t.Fatalf("%s: %v (not in the node's root)", b, err)
	}
	return os.SameFile(sa, sb)
}

// TestPruneSeedsKeepsTheNewest: the seeds beyond the newest keep go; one being made (a dot
// folder) stays.
func TestPruneSeedsKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	for i, name := range []string{"a", "b", "c", "d", "e", ".making-1"} {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-time.Duration(i) * time.Hour) // a newest, e oldest
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := pruneSeeds(dir, 3); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{".making-1", "a", "b", "c"}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}

// treeDigest is a digest of every file under dir: its path, mode, size and content.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(h, "%s %v %d\n", rel, info.Mode(), info.Size())
		if d.Type().IsRegular() {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(h, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

package localnode

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
)

func TestExpandArgs(t *testing.T) {
	env := map[string]string{"A": "x", "B": "y"}
	got := expandArgs([]string{"$(A)-$(B)", "$$(A)", "$(C)", "plain"}, env)
	want := []string{"x-y", "$(A)", "$(C)", "plain"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("expandArgs[%d] = %q, want %q", i, got[i], want[i])
		}
	}
}

func TestFieldValue(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"app": "db"}},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status:     corev1.PodStatus{PodIP: "10.244.0.7"},
	}
	for path, want := range map[string]string{
		"metadata.name": "p", "metadata.namespace": "ns", "spec.nodeName": "n1",
		"status.podIP": "10.244.0.7", "metadata.labels['app']": "db", "metadata.labels": `app="db"`,
	} {
		if got, err := fieldValue(pod, path); err != nil || got != want {
			t.Errorf("fieldValue(%s) = %q, %v; want %q", path, got, err, want)
		}
	}
	if _, err := fieldValue(pod, "spec.unknown"); err == nil {
		t.Error("unknown field path: want an error")
	}
}

func TestResolveBinary(t *testing.T) {
	if _, err := resolveBinary(&corev1.Container{Name: "c", Image: "mariadb:11"}, "/x/dolphin"); err == nil {
		t.Error("no command: want an error")
	}
	got, err := resolveBinary(&corev1.Container{Name: "c", Image: "ghcr.io/dolphin-operator/dolphin:v1",
		Command: []string{"/dolphin", "agent"}}, "/x/dolphin")
	if err != nil || got != "/x/dolphin" {
		t.Errorf("dolphin image: %q, %v", got, err)
	}
	got, err = resolveBinary(&corev1.Container{Name: "c", Image: "busybox", Command: []string{"sh"}}, "")
	if err != nil || !filepath.IsAbs(got) {
		t.Errorf("sh from PATH: %q, %v", got, err)
	}
}

func TestWriteFilesModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "v")
	data := map[string][]byte{"a": []byte("1"), "b": []byte("2")}
	if err := writeFiles(dir, data, []corev1.KeyToPath{{Key: "a", Path: "sub/a.txt", Mode: ptr.To[int32](0o600)}},
		ptr.To[int32](0o440)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "sub/a.txt"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("item mode: %v, %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b")); err == nil {
		t.Error("items given: key b must not be written")
	}
	if err := writeFiles(dir, data, nil, ptr.To[int32](0o440)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "b")); err != nil || fi.Mode().Perm() != 0o440 {
		t.Fatalf("default mode: %v, %v", fi, err)
	}
}

func TestAllocate(t *testing.T) {
	n, err := newNetwork("t0", "10.1.2.0/29")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := range 5 { // .2 to .6; .0 network, .1 gateway, .7 broadcast
		a, err := n.allocate(string(rune('a' + i)))
		if err != nil || seen[a.String()] {
			t.Fatalf("allocate %d: %v, %v", i, a, err)
		}
		seen[a.String()] = true
	}
	if _, err := n.allocate("full"); err == nil {
		t.Error("range full: want an error")
	}
	n.release("a")
	if a, err := n.allocate("again"); err != nil || a.String() != "10.1.2.2" {
		t.Errorf("after release in a full range: %v, %v; want the freed 10.1.2.2", a, err)
	}

	// With room, an address just freed is not handed out again at once (neighbours may still
	// cache the old pod's MAC for it): allocation goes round robin.
	n, err = newNetwork("t0", "10.1.3.0/24")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := n.allocate("old")
	n.release("old")
	b, err := n.allocate("new")
	if err != nil || b == a {
		t.Errorf("re-allocated %v (%v) right after releasing it", b, err)
	}
	for i := range 300 { // wraps around the /24 and still finds free addresses
		u := fmt.Sprint("p", i)
		if _, err := n.allocate(u); err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		n.release(u)
	}
}

// TestGetPodHidesAPodBeingDeleted: virtual-kubelet finds pods by name and compares only
// specs, labels and annotations, so while an old pod is torn down a new pod of the same name
// (a StatefulSet re-creating it) would pass for it and never start. GetPod must not return a
// pod being deleted; its status stays readable.
func TestGetPodHidesAPodBeingDeleted(t *testing.T) {
	netw, err := newNetwork("dltest0", "10.244.99.0/24") // pure bookkeeping: no device is made
	if err != nil {
		t.Fatal(err)
	}
	p := newProvider(Options{Dir: t.TempDir()}, nil, netw)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", UID: "old"}}
	r := newPodRunner(p, pod)
	p.pods[r.key] = r
	if got, err := p.GetPod(t.Context(), "ns", "db-0"); err != nil || got == nil || got.UID != "old" {
		t.Fatalf("running pod: GetPod = %v, %v", got, err)
	}
	r.mu.Lock()
	r.deleting = true
	r.mu.Unlock()
	if got, err := p.GetPod(t.Context(), "ns", "db-0"); !errdefs.IsNotFound(err) || got != nil {
		t.Errorf("pod being deleted: GetPod = %v, %v; want not found", got, err)
	}
	if st, err := p.GetPodStatus(t.Context(), "ns", "db-0"); err != nil || st == nil {
		t.Errorf("pod being deleted: GetPodStatus = %v, %v; want its status", st, err)
	}
}

// writeFiles replaces a volume's files atomically (a ..data symlink swap, as the kubelet does):
// changed keys change, removed keys go, older payloads are removed, the folder stays the same
// (bind mounts of it keep working).
func TestWriteFilesUpdatesAtomically(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A file of an older layout is replaced.
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("old layout"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "error: " + err.Error()
		}
		return string(b)
	}
	if err := writeFiles(dir, map[string][]byte{"a": []byte("1"), "b": []byte("2")}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if read("a") != "1" || read("b") != "2" {
		t.Fatalf("first write: a=%q b=%q", read("a"), read("b"))
	}
	if err := writeFiles(dir, map[string][]byte{"a": []byte("3"), "c": []byte("4")}, nil, ptr.To[int32](0o440)); err != nil {
		t.Fatal(err)
	}
	if read("a") != "3" || read("c") != "4" {
		t.Errorf("update: a=%q c=%q", read("a"), read("c"))
	}
	if _, err := os.Lstat(filepath.Join(dir, "b")); !os.IsNotExist(err) {
		t.Errorf("removed key b still there: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "a")); err != nil || fi.Mode().Perm() != 0o440 {
		t.Errorf("mode after update: %v, %v", fi, err)
	}
	entries, _ := os.ReadDir(dir)
	payloads := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") && e.Name() != "..data" {
			payloads++
		}
	}
	if payloads != 1 {
		t.Errorf("%d payload folders left, want 1: %v", payloads, entries)
	}
	after, err := os.Stat(dir)
	if err != nil || !os.SameFile(before, after) {
		t.Error("the volume folder was replaced: a bind mount of it would see the old files")
	}
}

// A pod's runner whose name a newer pod took sends no status any more: virtual-kubelet keeps
// statuses by name, and the old pod's last one (sent when its runner ends, after the new pod
// was registered) became the new pod's and was never corrected (a re-created database pod
// without an IP in its API object for minutes).
func TestReplacedPodSendsNoStatus(t *testing.T) {
	netw, err := newNetwork("dltest1", "10.244.98.0/24") // pure bookkeeping: no device is made
	if err != nil {
		t.Fatal(err)
	}
	p := newProvider(Options{Dir: t.TempDir()}, nil, netw)
	var sent []types.UID
	p.NotifyPods(t.Context(), func(pod *corev1.Pod) { sent = append(sent, pod.UID) })
	old := newPodRunner(p, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", UID: "old"}})
	p.pods[old.key] = old
	old.notify()
	replacement := newPodRunner(p, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", UID: "new"}})
	p.pods[replacement.key] = replacement
	old.notify() // the old runner's last status, after the replacement took the name
	replacement.notify()
	delete(p.pods, old.key)
	gone := newPodRunner(p, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-1", UID: "gone"}})
	gone.notify() // forgotten already, and no other pod has the name: still sent
	deleted := newPodRunner(p, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-2", UID: "deleted"}})
	deleted.deleting = true
	deleted.notify() // deleted and torn down (forgotten): nothing waits for its status
	if want := []types.UID{"old", "new", "gone"}; !slices.Equal(sent, want) {
		t.Errorf("statuses sent for %v, want %v", sent, want)
	}
}

// A pod stopped while it waits for an earlier pod of its name ends only after that one: the
// next pod of the name waits only for the newest runner, so it must not start beside a pod
// still stopping (the same folder and data directory).
func TestStoppedWaitingPodEndsAfterTheEarlierOne(t *testing.T) {
	netw, err := newNetwork("dltest2", "10.244.97.0/24") // pure bookkeeping: no device is made
	if err != nil {
		t.Fatal(err)
	}
	p := newProvider(Options{Dir: t.TempDir()}, nil, netw)
	earlier := newPodRunner(p, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", UID: "a"}})
	waiting := newPodRunner(p, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", UID: "b"}})
	p.pods[waiting.key] = waiting
	go waiting.run(earlier)
	waiting.terminate(0, false)
	select {
	case <-waiting.done:
		t.Fatal("the stopped pod ended while the earlier pod of its name still ran")
	case <-time.After(200 * time.Millisecond):
	}
	close(earlier.done)
	select {
	case <-waiting.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stopped pod did not end after the earlier one")
	}
	if p.runner("ns", "db-0") != nil {
		t.Error("the stopped pod is still registered")
	}
}

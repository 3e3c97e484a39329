package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/conversion"

	dolphinv1alpha1 "github.com/dolphin-operator/dolphin/api/v1alpha1"
	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// previousRelease is the git ref of the build an upgrade starts from: the newest tag v*, or,
// before the first tag, the commit in hack/previous-release (the last build that passed CI).
func previousRelease(t *testing.T) string {
	t.Helper()
	if out, err := exec.Command("git", "-C", repoRoot(), "describe", "--tags", "--abbrev=0", "--match", "v*", "HEAD").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	b, err := os.ReadFile(filepath.Join(repoRoot(), "hack", "previous-release"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// checkoutPrevious puts the previous release's source tree into a temporary git worktree.
func checkoutPrevious(t *testing.T) (dir, ref string) {
	t.Helper()
	ref = previousRelease(t)
	if err := exec.Command("git", "-C", repoRoot(), "rev-parse", "--verify", "--quiet", ref+"^{commit}").Run(); err != nil {
		if out, _ := exec.Command("git", "-C", repoRoot(), "rev-parse", "--is-shallow-repository").Output(); strings.TrimSpace(string(out)) == "true" {
			t.Skipf("the previous release %s is not in this shallow clone: the upgrade test needs the history (clone without --depth)", ref)
		}
		t.Fatalf("the previous release %s is not in the repository (hack/previous-release or a tag v*)", ref)
	}
	dir = filepath.Join(t.TempDir(), "previous")
	if out, err := exec.Command("git", "-C", repoRoot(), "worktree", "add", "--detach", dir, ref).CombinedOutput(); err != nil {
		t.Fatalf("git worktree add %s: %v\n%s", ref, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("git", "-C", repoRoot(), "worktree", "remove", "--force", dir).Run() })
	return dir, ref
}

// podState is what an operator upgrade must not change about one instance.
type podState struct {
	UID       string
	Restarts  int32
	StartedAt string
	PID       int
}

func (s *stack) podStates(cluster string, n int) map[string]podState {
	s.t.Helper()
	out := map[string]podState{}
	for i := range n {
		name := fmt.Sprintf("%s-%d", cluster, i)
		var p corev1.Pod
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &p); err != nil {
			s.t.Fatal(err)
		}
		st := podState{UID: string(p.UID), PID: s.serverPID(name)}
		for _, cs := range p.Status.ContainerStatuses {
			st.Restarts += cs.RestartCount
			if cs.State.Running != nil {
				st.StartedAt += cs.Name + "@" + cs.State.Running.StartedAt.UTC().Format(time.RFC3339) + " "
			}
		}
		out[name] = st
	}
	return out
}

// templateOf is the StatefulSet's pod template as JSON, and its generation.
func (s *stack) templateOf(key client.ObjectKey) (string, int64) {
	s.t.Helper()
	var sts appsv1.StatefulSet
	if err := s.c.Get(s.ctx, key, &sts); err != nil {
		s.t.Fatal(err)
	}
	b, err := json.Marshal(sts.Spec.Template)
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b), sts.Generation
}

// v1alpha1Client reads and writes Dolphin's objects as v1alpha1 for the test's v1beta1
// helpers (converting with the API package's own conversion), while the previous release
// runs: its CRDs serve v1alpha1 only.
type v1alpha1Client struct{ client.Client }

// spoke is the v1alpha1 object of a v1beta1 Dolphin object (nil for any other object).
func (c v1alpha1Client) spoke(obj client.Object) (conversion.Hub, conversion.Convertible, error) {
	hub, ok := obj.(conversion.Hub)
	if !ok {
		return nil, nil, nil
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return nil, nil, err
	}
	o, err := c.Scheme().New(dolphinv1alpha1.GroupVersion.WithKind(gvk.Kind))
	if err != nil {
		return nil, nil, err
	}
	return hub, o.(conversion.Convertible), nil
}

func (c v1alpha1Client) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	hub, old, err := c.spoke(obj)
	if err != nil || old == nil {
		return errors.Join(err, c.Client.Get(ctx, key, obj, opts...))
	}
	if err := c.Client.Get(ctx, key, old.(client.Object), opts...); err != nil {
		return err
	}
	return old.ConvertTo(hub)
}

func (c v1alpha1Client) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	hub, old, err := c.spoke(obj)
	if err != nil || old == nil {
		return errors.Join(err, c.Client.Create(ctx, obj, opts...))
	}
	if err := old.ConvertFrom(hub); err != nil {
		return err
	}
	if err := c.Client.Create(ctx, old.(client.Object), opts...); err != nil {
		return err
	}
	return old.ConvertTo(hub)
}

func (c v1alpha1Client) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	hub, old, err := c.spoke(obj)
	if err != nil || old == nil {
		return errors.Join(err, c.Client.Patch(ctx, obj, patch, opts...))
	}
	data, err := patch.Data(obj) // the test patches metadata only: the same JSON in both versions
	if err != nil {
		return err
	}
	if err := old.ConvertFrom(hub); err != nil {
		return err
	}
	if err := c.Client.Patch(ctx, old.(client.Object), client.RawPatch(patch.Type(), data), opts...); err != nil {
		return err
	}
	return old.ConvertTo(hub)
}

// storedVersions is status.storedVersions of the CRD named name.
func (s *stack) storedVersions(name string) []string {
	s.t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := s.c.Get(s.ctx, client.ObjectKey{Name: name}, &crd); err != nil {
		s.t.Fatal(err)
	}
	return crd.Status.StoredVersions
}

// TestLocalOperatorUpgrade installs the previous release's build on `dolphin local`, creates a
// 3-instance cluster and an application writer, asks for a switchover and replaces the
// operator with this build while it runs (CRDs first, as an upgrade does): no database pod is
// restarted or replaced (pod UIDs, container start times, server PIDs), the StatefulSet's pod
// template is unchanged, the cluster ends healthy with the switchover done, and the writer
// loses nothing.
func TestLocalOperatorUpgrade(t *testing.T) {
	prevDir, ref := checkoutPrevious(t)
	// The process node: the previous release's `dolphin local` has no real node, and its
	// operator runs as a host process, replaced here by this build's.
	s := upStackOn(t, prevDir, nodeProcess)
	t.Logf("stack up with the previous release %s", ref)
	current := s.c
	if before := s.storedVersions("mysqlclusters.mysql.dolphin.dev"); !slices.Contains(before, "v1beta1") {
		s.c = v1alpha1Client{current} // a release before v1beta1: its objects are v1alpha1
	}
	const name = "upg"
	_, key := s.healthyAppCluster(name)
	w := s.startSteadyAppWriter(name)
	before := s.podStates(name, 3)
	tmpl, gen := s.templateOf(key)

	// A switchover asked of the old operator; the upgrade happens as soon as it took it.
	primary := s.currentPrimary(key)
	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[controller.SwitchoverAnnotation] = "auto"
	})
	testenv.Eventually(t, 30*time.Second, "the old operator took the switchover request", func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		if _, ok := c.Annotations[controller.SwitchoverAnnotation]; ok {
			return fmt.Errorf("annotation still there")
		}
		return nil
	})

	// The upgrade: this build's binary in place of the old one (renamed over it, so running
	// processes keep theirs: the local node and the pods' containers are not upgraded, as a
	// kubelet is not), the old operator stopped, `local up` applies this build's CRDs and
	// starts this build's operator.
	newBin := filepath.Join(t.TempDir(), "dolphin")
	build := exec.Command("go", "build", "-o", newBin, "./cmd/dolphin")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building this dolphin: %v\n%s", err, out)
	}
	op := s.process("operator")
	if err := exec.Command("kill", "-9", strconv.Itoa(op.PID)).Run(); err != nil {
		t.Fatal(err)
	}
	upgraded := time.Now()
	if err := os.Rename(newBin, s.bin); err != nil {
		t.Fatal(err)
	}
	s.upAgain()
	if s.process("operator").PID == op.PID {
		t.Fatal("the operator was not replaced")
	}
	t.Logf("operator replaced by this build in %.1fs", time.Since(upgraded).Seconds())
	s.c = current

	// Objects the previous release stored are rewritten in v1beta1 by the new operator, and
	// still read as v1alpha1 through its conversion webhook.
	testenv.Eventually(t, 120*time.Second, "stored objects migrated to v1beta1", func() error {
		for _, crd := range []string{"mysqlclusters.mysql.dolphin.dev", "mysqlusers.mysql.dolphin.dev", "mysqlbackups.mysql.dolphin.dev", "mysqldatabases.mysql.dolphin.dev"} {
			if got := s.storedVersions(crd); !slices.Equal(got, []string{"v1beta1"}) {
				return fmt.Errorf("%s storedVersions %v", crd, got)
			}
		}
		return nil
	})
	var asAlpha dolphinv1alpha1.MySQLCluster
	if err := s.c.Get(s.ctx, key, &asAlpha); err != nil || asAlpha.Spec.Replicas != 3 {
		t.Fatalf("the cluster read as v1alpha1 after the upgrade: replicas=%d, %v; want 3", asAlpha.Spec.Replicas, err)
	}

	testenv.Eventually(t, 90*time.Second, "healthy after the upgrade, the switchover done", func() error {
		if err := s.healthy(key); err != nil {
			return err
		}
		if p := s.currentPrimary(key); p == primary || p == "" {
			return fmt.Errorf("primary still %q", p)
		}
		return nil
	})
	time.Sleep(5 * time.Second) // let the new operator reconcile everything once more
	w.finish()
	acked, failed := w.ackedIDs()

	after := s.podStates(name, 3)
	for pod, b := range before {
		if a := after[pod]; a != b {
			t.Errorf("%s changed across the upgrade:\n before %+v\n after  %+v", pod, b, a)
		}
	}
	if tmpl2, gen2 := s.templateOf(key); tmpl2 != tmpl || gen2 != gen {
		t.Errorf("the StatefulSet changed across the upgrade (generation %d -> %d):\n before %s\n after  %s", gen, gen2, tmpl, tmpl2)
	}
	s.waitAllInstances(key, 3, len(acked))
	for i := range 3 {
		if lost := lostOn(t, s.sqlDB(s.podAddr(fmt.Sprintf("%s-%d", name, i))), acked); lost > 0 {
			t.Errorf("%s-%d lacks %d acknowledged writes", name, i, lost)
		}
	}
	gap := w.takeGap()
	// The switchover's pause is the only one a client may see (measured 0.66–0.9 s); an
	// operator upgrade itself must not stop writes.
	if gap > 5*time.Second {
		t.Errorf("the writer paused %s across the upgrade and switchover (want at most 5 s)", gap.Round(time.Millisecond))
	}
	t.Logf("upgrade %s -> this build: no pod restarted, template unchanged, switchover %s -> %s; writer %d acknowledged, %d failed, 0 lost, longest pause %s",
		ref, primary, s.currentPrimary(key), len(acked), failed, gap.Round(time.Millisecond))
}

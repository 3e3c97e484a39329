package e2e

import (
	"bytes"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestRealNodeClusterFailsOverInTheClientsView runs Dolphin as a user installs it, on a real
// node: the operator's Deployment from the image built here (webhooks served from its pods,
// called by the API server through their Service), a 3-instance cluster in containers of the
// MariaDB image built from Debian's packages, in a namespace where the real admission plugin
// enforces the restricted Pod Security Standard. An application account writes through the
// primary Service's ClusterIP (kube-proxy), every acknowledged write recorded; the primary's
// server is killed (the kubelet restarts its container at once: Dolphin may keep it as primary
// or fail over), then hung (SIGSTOP: Dolphin must fail over); each time the writes must resume
// and no acknowledged write may be lost. The longest write gap of each fault is logged, with
// the operator's account of a round slower than 3 s (figures come from benchmarks, not from
// this test). kubectl logs and exec reach the instances.
func TestRealNodeClusterFailsOverInTheClientsView(t *testing.T) {
	s := upStackOn(t, repoRoot(), nodeReal)
	var ns corev1.Namespace
	if err := s.c.Get(s.ctx, client.ObjectKey{Name: s.ns}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	if err := s.c.Update(s.ctx, &ns); err != nil {
		t.Fatal(err)
	}

	// A weak password is refused by the webhook the operator's pods serve.
	weak := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "weak"}, StringData: map[string]string{"password": "password1"}}
	if err := s.c.Create(s.ctx, weak); err != nil {
		t.Fatal(err)
	}
	err := s.c.Create(s.ctx, &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "weak"},
		Spec: dolphinv1.MySQLUserSpec{Cluster: "rn", Name: "weak", PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: "weak"}}})
	if err == nil || !strings.Contains(err.Error(), "denied the request") {
		t.Fatalf("a weak password through the in-cluster webhook: %v", err)
	}

	applied := time.Now()
	_, key := s.healthyAppCluster("rn")
	t.Logf("3 instances Ready and the table created %.1fs after the cluster was applied", time.Since(applied).Seconds())

	cs := kubernetes.NewForConfigOrDie(s.cfg)
	logs, err := cs.CoreV1().Pods(s.ns).GetLogs("rn-0", &corev1.PodLogOptions{Container: "mysqld"}).DoRaw(s.ctx)
	if err != nil || !bytes.Contains(logs, []byte("ready for connections")) {
		t.Fatalf("kubectl logs rn-0 -c mysqld: %v\n%s", err, tail(string(logs), 10))
	}
	if out, err := s.execIn(cs, "rn-1", "mysqld", "id", "-u"); err != nil || strings.TrimSpace(out) != "999" {
		t.Fatalf("kubectl exec rn-1 -c mysqld -- id -u: %q, %v", out, err)
	}

	w := s.startSteadyAppWriter("rn")
	for _, fault := range []struct {
		name   string
		signal syscall.Signal
	}{{"killed", syscall.SIGKILL}, {"hung", syscall.SIGSTOP}} {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			t.Fatal(err)
		}
		old := c.Status.CurrentPrimary
		pid := s.serverPID(old)
		w.takeGap()
		at := time.Now()
		if err := syscall.Kill(pid, fault.signal); err != nil {
			t.Fatal(err)
		}
		// The kubelet restarts a killed server's container at once; whether Dolphin fails over
		// or the restarted server keeps the primary role, writes must resume.
		testenv.Eventually(t, 60*time.Second, "writes resume", func() error {
			if err := s.c.Get(s.ctx, key, &c); err != nil {
				return err
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if !w.lastSent.After(at) {
				return fmt.Errorf("no write acknowledged since the fault (primary %s, phase %s: %v)", c.Status.CurrentPrimary, c.Status.Phase, w.lastErr)
			}
			return nil
		})
		gap := w.takeGap()
		t.Logf("realnode: %s primary %s → %s, longest write gap %.2fs", fault.name, old, c.Status.CurrentPrimary, gap.Seconds())
		if gap > 3*time.Second { // a slow round is explained by the operator's own account of it
			s.logOperatorSince(cs, at.Add(-time.Second))
		}
		if fault.signal == syscall.SIGSTOP {
			testenv.Eventually(t, 30*time.Second, "the hung primary replaced", func() error {
				if err := s.c.Get(s.ctx, key, &c); err != nil {
					return err
				}
				if c.Status.CurrentPrimary == old {
					return fmt.Errorf("%s is still the primary", old)
				}
				return nil
			})
			_ = syscall.Kill(pid, syscall.SIGCONT) // if it still exists, the old server resumes as what Dolphin made it
			// A hung primary that resumes before Dolphin deleted its pod (2 s after the
			// primary Service moved, docs/design/0050) is fenced, which commits the tail that
			// waited for an acknowledgement: it is errant and held for a person's approval
			// before it is re-cloned (a copy of that tail is kept first). Approved here as a
			// user would, and said: whether it happens depends on when the test resumes it
			// (docs/design/0051, "what is left").
			s.approveHeldFormerPrimary(key)
		}
		s.waitHealthy(key)
	}
	w.finish()
	acked, failed := w.ackedIDs()
	final := s.sqlDBAs(appUser, appPassword, s.serviceAddr("rn-primary"))
	lost := lostOn(t, final, acked)
	t.Logf("realnode: %d writes acknowledged, %d failed, lost_acked_writes=%d", len(acked), failed, lost)
	if lost > 0 {
		t.Fatalf("%d acknowledged writes lost", lost)
	}
}

// execIn runs a command in a container through the API server and the kubelet (kubectl exec).
func (s *stack) execIn(cs *kubernetes.Clientset, pod, container string, cmd ...string) (string, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(s.ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(s.cfg, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(s.ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return stdout.String(), nil
}

// logOperatorSince logs what the operator's pods logged since a moment (kubectl logs
// --since-time), to explain a slow round.
func (s *stack) logOperatorSince(cs *kubernetes.Clientset, since time.Time) {
	pods, err := cs.CoreV1().Pods("dolphin-system").List(s.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=dolphin-operator"})
	if err != nil {
		s.t.Logf("listing the operator's pods: %v", err)
		return
	}
	st := metav1.NewTime(since)
	for _, p := range pods.Items {
		b, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &st, Timestamps: true}).DoRaw(s.ctx)
		if err != nil {
			s.t.Logf("logs of %s: %v", p.Name, err)
			continue
		}
		if len(bytes.TrimSpace(b)) > 0 {
			s.t.Logf("--- %s since %s\n%s", p.Name, since.Format("15:04:05.000"), tail(string(b), 80))
		}
	}
}

// approveHeldFormerPrimary waits up to 60 s for the cluster to be healthy, approving the
// re-clone of a former primary Dolphin holds as errant (logged) the way the chaos suite does.
func (s *stack) approveHeldFormerPrimary(key client.ObjectKey) {
	s.t.Helper()
	approved := ""
	_ = testenv.Poll(60*time.Second, func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		if held := heldFormerPrimary(&c); held != "" && held != approved {
			s.t.Logf("%s resumed before its pod was deleted and is held as an errant former primary; approving its re-clone (a copy is kept first)", held)
			s.patchCluster(key, func(c *dolphinv1.MySQLCluster) {
				if c.Annotations == nil {
					c.Annotations = map[string]string{}
				}
				c.Annotations[controller.RecloneApprovedAnnotation] = held
			})
			approved = held
		}
		return s.chaosHealthy(key)
	})
}

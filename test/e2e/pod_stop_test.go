package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// evictionPauseLimit bounds the write pause of an evicted primary in the application's view:
// a switchover's (the fence, the promotion, kube-proxy moving the Service), far below a
// failover's (the server gone before anyone switched over: 6.6 s measured before
// docs/design/0051).
const evictionPauseLimit = 3 * time.Second

// TestEvictPrimarySwitchesOver evicts the primary's pod through the Eviction API, as
// `kubectl drain` does, under an application writer through the primary Service: the pod's
// preStop hold keeps its server up while Dolphin switches over, so the cluster records a
// planned promotion, the writer's longest pause is a switchover's, the old pod stops well
// before its hold would run out (Dolphin released it), and every acknowledged write is on
// every instance.
func TestEvictPrimarySwitchesOver(t *testing.T) {
	s := upStack(t)
	const name = "evict"
	_, key := s.healthyAppCluster(name)
	s.waitAllInstances(key, 3, 0)
	w := s.startSteadyAppWriter(name)
	old := s.currentPrimary(key)
	var pod corev1.Pod
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: old}, &pod); err != nil {
		t.Fatal(err)
	}
	evicted := time.Now()
	if err := s.c.SubResource("eviction").Create(s.ctx, &pod, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: old}}); err != nil {
		t.Fatalf("evicting the primary's pod %s: %v", old, err)
	}
	var promotion *dolphinv1.PromotionRecord
	testenv.Eventually(t, 60*time.Second, "a promotion away from "+old, func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		if p := c.Status.Topology.LastPromotion; p != nil && p.From == old && p.Time.After(evicted.Add(-time.Second)) {
			promotion = p
			return nil
		}
		return fmt.Errorf("primary still %s", c.Status.CurrentPrimary)
	})
	var gone time.Duration
	testenv.Eventually(t, 90*time.Second, "the evicted pod "+old+" replaced", func() error {
		var p corev1.Pod
		err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: old}, &p)
		if apierrors.IsNotFound(err) || (err == nil && p.UID != pod.UID) {
			if gone == 0 {
				gone = time.Since(evicted)
			}
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	s.waitHealthy(key)
	pause := w.takeGap()
	w.finish()
	t.Logf("evicted %s: %s -> %s planned=%v (%s, took %s); writer's longest pause %s; old pod gone after %s",
		old, promotion.From, promotion.To, promotion.Planned, promotion.Reason, promotion.Duration.Duration, pause.Round(time.Millisecond), gone.Round(100*time.Millisecond))
	if !promotion.Planned {
		t.Errorf("the evicted primary was failed over (%s), not switched over", promotion.Reason)
	}
	if pause > evictionPauseLimit {
		t.Errorf("the writer's longest pause %s exceeds %s", pause.Round(time.Millisecond), evictionPauseLimit)
	}
	// Released by Dolphin, not by the hold running out (25 s) — with the pod's own stop and
	// the StatefulSet's re-creation on a busy machine.
	if gone >= 20*time.Second {
		t.Errorf("the evicted pod took %s to go: its hold ran out instead of being released", gone.Round(100*time.Millisecond))
	}
	acked, failed := s.wantEveryAckedWrite(key, name, w)
	t.Logf("evict: %d writes acknowledged, %d failed, 0 lost", len(acked), failed)
}

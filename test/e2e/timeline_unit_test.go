package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dolphin-operator/dolphin/internal/resources"
)

// TestPrimaryTimeline checks what the timeline counts: only another pod labeled primary, and
// only a ready endpoint that is not the old primary's address, after the round was armed.
func TestPrimaryTimeline(t *testing.T) {
	pod := func(name, role string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{resources.RoleLabel: role}}}
	}
	slice := func(addr string, ready bool) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}}}
	}
	tl := &primaryTimeline{}
	tl.pod(pod("db-1", "primary")) // before any round: ignored
	if got := tl.String(); got != "primary Service unmoved" {
		t.Fatalf("before arm: %q", got)
	}
	tl.arm("db-0", []string{"10.0.0.1"}, time.Now())
	tl.pod(pod("db-0", "primary"))     // the old primary still labeled
	tl.pod(pod("db-2", "replica"))     // not primary
	tl.slice(slice("10.0.0.1", true))  // the old primary's address
	tl.slice(slice("10.0.0.3", false)) // not ready
	if got := tl.String(); got != "primary Service unmoved" {
		t.Fatalf("nothing moved yet, got %q", got)
	}
	tl.pod(pod("db-1", "primary"))
	if got := tl.String(); !strings.HasPrefix(got, "label +") || !strings.HasSuffix(got, "endpoint -") {
		t.Fatalf("labeled only: %q", got)
	}
	tl.slice(slice("10.0.0.2", true))
	if got := tl.String(); !strings.Contains(got, "endpoint +") {
		t.Fatalf("endpoint moved: %q", got)
	}
	tl.arm("db-1", []string{"10.0.0.2"}, time.Now())
	if got := tl.String(); got != "primary Service unmoved" {
		t.Fatalf("a new round starts empty, got %q", got)
	}
}

// TestSysbenchLimit checks the chaos rounds' bound on sysbench: 30 s (plus a designed stall)
// unless Dolphin's own recovery, seen by the checker, took longer.
func TestSysbenchLimit(t *testing.T) {
	for _, c := range []struct {
		kind        string
		checkerBack time.Duration
		want        time.Duration
	}{
		{"kill9", 2 * time.Second, 30 * time.Second},
		{"replicas-lost-then-primary", 38 * time.Second, 30*time.Second + replicasLostFor},
		{"pod-delete-during-failover", 7 * time.Second, 30 * time.Second},
		{"pod-delete-during-failover", 24800 * time.Millisecond, 34800 * time.Millisecond},
	} {
		if got := sysbenchLimit(c.kind, c.checkerBack); got != c.want {
			t.Errorf("sysbenchLimit(%s, %v) = %v, want %v", c.kind, c.checkerBack, got, c.want)
		}
	}
}

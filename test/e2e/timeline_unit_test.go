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

// TestDescribeConntrack checks the stale-read witness's reading of the connection-tracking
// table: entries towards the Service counted per endpoint and state, the session's in full.
func TestDescribeConntrack(t *testing.T) {
	table := strings.Join([]string{
		"ipv4     2 tcp      6 117 TIME_WAIT src=192.0.2.2 dst=10.96.0.36 sport=40000 dport=3306 src=10.244.78.4 dst=192.0.2.2 sport=3306 dport=40000 [ASSURED] mark=0 zone=0 use=2",
		"ipv4     2 tcp      6 86399 ESTABLISHED src=192.0.2.2 dst=10.96.0.36 sport=40002 dport=3306 src=10.244.78.5 dst=192.0.2.2 sport=3306 dport=40002 [ASSURED] mark=0 zone=0 use=2",
		"ipv4     2 tcp      6 86399 ESTABLISHED src=192.0.2.2 dst=10.96.0.36 sport=40004 dport=3306 src=10.244.78.5 dst=192.0.2.2 sport=3306 dport=40004 [ASSURED] mark=0 zone=0 use=2",
		"ipv4     2 tcp      6 86399 ESTABLISHED src=192.0.2.2 dst=10.96.0.99 sport=40006 dport=3306 src=10.244.78.6 dst=192.0.2.2 sport=3306 dport=40006 [ASSURED] mark=0 zone=0 use=2",
		"ipv4     2 tcp      6 86399 ESTABLISHED src=192.0.2.2 dst=10.96.0.36 sport=40008 dport=80 src=10.244.78.6 dst=192.0.2.2 sport=80 dport=40008 [ASSURED] mark=0 zone=0 use=2",
	}, "\n")
	got := describeConntrack(table, "10.96.0.36:3306", "192.0.2.2:40002")
	want := "  10.244.78.4 TIME_WAIT: 1\n  10.244.78.5 ESTABLISHED: 2\n" +
		"  session's: ipv4 2 tcp 6 86399 ESTABLISHED src=192.0.2.2 dst=10.96.0.36 sport=40002 dport=3306 src=10.244.78.5 dst=192.0.2.2 sport=3306 dport=40002 [ASSURED] mark=0 zone=0 use=2\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestPrimaryTimelineHistory checks that every change of the primary Service's selector and
// ready endpoints is recorded once, and History returns those of a window.
func TestPrimaryTimelineHistory(t *testing.T) {
	tl := &primaryTimeline{}
	svc := func(pod string) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{Selector: map[string]string{"statefulset.kubernetes.io/pod-name": pod}}}
	}
	slice := func(addrs ...string) *discoveryv1.EndpointSlice {
		sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "db-primary-x"}}
		for _, a := range addrs {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		return sl
	}
	start := time.Now()
	tl.service(svc("db-0"))
	tl.service(svc("db-0")) // unchanged: not recorded again
	tl.slice(slice("10.0.0.1"))
	tl.service(svc("db-1"))
	tl.slice(slice())
	tl.slice(slice("10.0.0.2"))
	got := tl.History(start, time.Now())
	lines := strings.Split(strings.TrimSpace(got), "\n")
	want := []string{"selector db-0", "endpoints db-primary-x [10.0.0.1]", "selector db-1", "endpoints db-primary-x []", "endpoints db-primary-x [10.0.0.2]"}
	if len(lines) != len(want) {
		t.Fatalf("history:\n%s\nwant %v", got, want)
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], " "+w) {
			t.Errorf("line %d %q, want … %s", i, lines[i], w)
		}
	}
	if h := tl.History(time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)); h != "" {
		t.Errorf("a window without changes: %q", h)
	}
}

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestLaggingReplicaLeavesReadService holds a replica's applier behind (FLUSH TABLES WITH
// READ LOCK on it) under an application writer, with spec.replicaService.maxLagSeconds 5: the
// replica loses its role label — so the replicas Service stops sending reads there — with
// status and an event saying why, and comes back once unlocked and caught up.
func TestLaggingReplicaLeavesReadService(t *testing.T) {
	s := upStack(t)
	const name = "lag"
	_, key := s.healthyAppCluster(name)
	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) { c.Spec.ReplicaService.MaxLagSeconds = ptr.To[int32](5) })
	w := s.startSteadyAppWriter(name)
	defer w.finish()
	primary := s.currentPrimary(key)
	replica := name + "-1"
	if primary == replica {
		replica = name + "-2"
	}
	role := func() string {
		var p corev1.Pod
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: replica}, &p); err != nil {
			return "?" + err.Error()
		}
		return p.Labels[resources.RoleLabel]
	}
	unpublished := func() string {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil || c.Status.Topology == nil {
			return ""
		}
		for _, in := range c.Status.Topology.Instances {
			if in.Name == replica {
				return in.Unpublished
			}
		}
		return ""
	}
	if r := role(); r != "replica" {
		t.Fatalf("%s starts with role %q, want replica", replica, r)
	}
	conn, err := s.sqlDB(s.podAddr(replica)).Conn(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(s.ctx, "FLUSH TABLES WITH READ LOCK"); err != nil {
		t.Fatal(err)
	}
	locked := time.Now()
	testenv.Eventually(t, 90*time.Second, replica+" out of the replicas Service", func() error {
		if r := role(); r != "" {
			return fmt.Errorf("role %q, unpublished %q", r, unpublished())
		}
		return nil
	})
	out := time.Since(locked)
	testenv.Eventually(t, 30*time.Second, "status saying why", func() error {
		if u := unpublished(); u == "" {
			return fmt.Errorf("status.topology.instances[%s].unpublished empty", replica)
		}
		return nil
	})
	t.Logf("%s held behind: out of the replicas Service after %s (%s)", replica, out.Round(100*time.Millisecond), unpublished())
	if out < 5*time.Second {
		t.Errorf("%s left after %s, before it could be 5 s behind", replica, out)
	}
	s.waitEvent("ReplicaUnpublished", replica)
	if _, err := conn.ExecContext(context.Background(), "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, replica+" back in the replicas Service", func() error {
		if r := role(); r != "replica" || unpublished() != "" {
			return fmt.Errorf("role %q, unpublished %q", r, unpublished())
		}
		return nil
	})
	s.waitEvent("ReplicaPublished", replica)
}

// waitEvent waits until an event with reason whose note names part exists (events are
// recorded asynchronously).
func (s *stack) waitEvent(reason, part string) {
	s.t.Helper()
	testenv.Eventually(s.t, 30*time.Second, "a "+reason+" event about "+part, func() error {
		var list eventsv1.EventList
		if err := s.c.List(s.ctx, &list, client.InNamespace(s.ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == reason && strings.Contains(e.Note, part) {
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
}

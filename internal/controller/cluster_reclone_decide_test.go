package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

func TestDecideReclone(t *testing.T) {
	healthy := func(name string) dolphinv1.InstanceTopology {
		return dolphinv1.InstanceTopology{Name: name, Reachable: true, Replicating: true, ReplicationLagSeconds: ptr.To(int64(0)), GTIDExecuted: "0-1-10"}
	}
	cluster := func(errant []string, instances ...dolphinv1.InstanceTopology) *dolphinv1.MySQLCluster {
		return &dolphinv1.MySQLCluster{Status: dolphinv1.MySQLClusterStatus{Topology: &dolphinv1.TopologyStatus{
			Primary: "db-0", ErrantInstances: errant,
			Instances: append([]dolphinv1.InstanceTopology{{Name: "db-0", Reachable: true, GTIDExecuted: "0-1-10"}}, instances...)}}}
	}
	errant := dolphinv1.InstanceTopology{Name: "db-2", Reachable: true, GTIDExecuted: "0-1002-12"}
	purged := dolphinv1.InstanceTopology{Name: "db-2", Reachable: true, Error: "Got fatal error 1236 from master when reading data from binary log"}
	pods := []corev1.Pod{sourcePod("db-0", true, true), sourcePod("db-1", true, true), sourcePod("db-2", true, true)}
	seeding := sourcePod("db-3", false, false)
	seeding.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: resources.ContainerSeed, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	manual := cluster([]string{"db-2"}, healthy("db-1"), errant)
	manual.Annotations = map[string]string{RecloneAnnotation: "manual"}
	formerPrimary := cluster([]string{"db-2"}, healthy("db-1"), errant)
	formerPrimary.Status.Topology.ReplacedPrimaries = []string{"db-2"}
	approved := formerPrimary.DeepCopy()
	approved.Annotations = map[string]string{RecloneApprovedAnnotation: "db-2"}
	approvedOther := formerPrimary.DeepCopy()
	approvedOther.Annotations = map[string]string{RecloneApprovedAnnotation: "db-1"}
	purgedFormerPrimary := cluster(nil, healthy("db-1"), purged)
	purgedFormerPrimary.Status.Topology.ReplacedPrimaries = []string{"db-2"}
	failing := cluster([]string{"db-2"}, healthy("db-1"), errant)
	failing.Status.Topology.FailoverInProgress = &dolphinv1.FailoverProgress{From: "db-0"}
	for _, tc := range []struct {
		name     string
		c        *dolphinv1.MySQLCluster
		pods     []corev1.Pod
		want     string
		wantPart string
	}{
		{"errant replica", cluster([]string{"db-2"}, healthy("db-1"), errant), pods, "db-2", "0-1002-12 beyond the primary's 0-1-10"},
		{"purged binlogs", cluster(nil, healthy("db-1"), purged), pods, "db-2", "error 1236"},
		{"healthy cluster", cluster(nil, healthy("db-1"), healthy("db-2")), pods, "", ""},
		{"manual policy", manual, pods, "", ""},
		{"an errant former primary waits for consent", formerPrimary, pods, "", ""},
		{"an errant former primary with consent", approved, pods, "db-2", "0-1002-12 beyond the primary's 0-1-10"},
		{"consent for another instance", approvedOther, pods, "", ""},
		{"a former primary meeting error 1236 waits for consent too", purgedFormerPrimary, pods, "", ""},
		{"during a failover", failing, pods, "", ""},
		{"while another is seeded", cluster([]string{"db-2"}, healthy("db-1"), errant), append(pods, seeding), "", ""},
		{"the primary only as source", cluster([]string{"db-2"}, errant), []corev1.Pod{sourcePod("db-0", true, true), sourcePod("db-2", true, true)}, "db-2", ""},
		{"no source", cluster([]string{"db-2"}, errant), []corev1.Pod{sourcePod("db-0", false, true), sourcePod("db-2", true, true)}, "", ""},
		{"mysql is never cloned", func() *dolphinv1.MySQLCluster {
			c := cluster([]string{"db-2"}, healthy("db-1"), errant)
			c.Spec.Engine.Flavor = dolphinv1.FlavorMySQL
			return c
		}(), pods, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := decideReclone(tc.c, tc.pods)
			if tc.want == "" {
				if ok {
					t.Fatalf("re-clone %+v, want none", p)
				}
				return
			}
			if !ok || p.Instance != tc.want || !strings.Contains(p.Discarded+" "+p.Reason, tc.wantPart) {
				t.Fatalf("plan %+v (%v), want %s with %q", p, ok, tc.want, tc.wantPart)
			}
		})
	}
}

package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

func sourcePod(name string, dbReady, agentReady bool) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{PodIP: "10.0.0.1",
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: resources.ContainerMySQLD, Ready: dbReady}, {Name: resources.ContainerAgent, Ready: agentReady}}}}
}

func TestChooseBackupSource(t *testing.T) {
	replica := func(name string, lag int64) dolphinv1.InstanceTopology {
		return dolphinv1.InstanceTopology{Name: name, Reachable: true, Replicating: true, ReplicationLagSeconds: ptr.To(lag)}
	}
	cluster := func(errant []string, instances ...dolphinv1.InstanceTopology) *dolphinv1.MySQLCluster {
		return &dolphinv1.MySQLCluster{Status: dolphinv1.MySQLClusterStatus{Topology: &dolphinv1.TopologyStatus{
			Primary: "db-0", ErrantInstances: errant,
			Instances: append([]dolphinv1.InstanceTopology{{Name: "db-0", Reachable: true}}, instances...)}}}
	}
	allPods := []corev1.Pod{sourcePod("db-0", true, true), sourcePod("db-1", true, true), sourcePod("db-2", true, true)}
	for _, tc := range []struct {
		name    string
		c       *dolphinv1.MySQLCluster
		pods    []corev1.Pod
		target  dolphinv1.BackupTarget
		want    string
		role    dolphinv1.InstanceRole
		wantErr string
	}{
		{"least lagging replica", cluster(nil, replica("db-1", 5), replica("db-2", 0)), allPods, dolphinv1.BackupTargetPreferReplica, "db-2", dolphinv1.RoleReplica, ""},
		{"ties by name", cluster(nil, replica("db-2", 0), replica("db-1", 0)), allPods, "", "db-1", dolphinv1.RoleReplica, ""},
		{"errant replica skipped", cluster([]string{"db-2"}, replica("db-1", 10), replica("db-2", 0)), allPods, "", "db-1", dolphinv1.RoleReplica, ""},
		{"lagging too far: primary", cluster(nil, replica("db-1", 301)), allPods, "", "db-0", dolphinv1.RolePrimary, ""},
		{"agent not ready: primary", cluster(nil, replica("db-1", 0)),
			[]corev1.Pod{sourcePod("db-0", true, true), sourcePod("db-1", true, false)}, "", "db-0", dolphinv1.RolePrimary, ""},
		{"not replicating: primary", cluster(nil, dolphinv1.InstanceTopology{Name: "db-1", Reachable: true, ReplicationLagSeconds: ptr.To(int64(0))}), allPods, "", "db-0", dolphinv1.RolePrimary, ""},
		{"target primary", cluster(nil, replica("db-1", 0)), allPods, dolphinv1.BackupTargetPrimary, "db-0", dolphinv1.RolePrimary, ""},
		{"primary's agent not ready", cluster(nil), []corev1.Pod{sourcePod("db-0", true, false)}, "", "", "", "agent container is not ready"},
		{"no topology", &dolphinv1.MySQLCluster{}, allPods, "", "", "", "no established primary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := chooseBackupSource(tc.c, tc.pods, tc.target)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Pod.Name != tc.want || got.Role != tc.role {
				t.Fatalf("source = %s (%s), want %s (%s)", got.Pod.Name, got.Role, tc.want, tc.role)
			}
		})
	}
}

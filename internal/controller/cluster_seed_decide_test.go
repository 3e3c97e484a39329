package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

func TestDecideSeed(t *testing.T) {
	replica := func(name string) dolphinv1.InstanceTopology {
		return dolphinv1.InstanceTopology{Name: name, Reachable: true, Replicating: true, ReplicationLagSeconds: ptr.To(int64(0))}
	}
	withData := func(c *dolphinv1.MySQLCluster) *dolphinv1.MySQLCluster {
		c.Status.Topology = &dolphinv1.TopologyStatus{Primary: "db-0", Instances: []dolphinv1.InstanceTopology{
			{Name: "db-0", Reachable: true}, replica("db-1"), {Name: "db-3"}}}
		return c
	}
	fresh := func() *dolphinv1.MySQLCluster { return &dolphinv1.MySQLCluster{} }
	restoredFresh := func(resolved bool) *dolphinv1.MySQLCluster {
		c := fresh()
		c.Spec.Bootstrap = &dolphinv1.BootstrapSpec{Backup: &dolphinv1.BackupReference{Name: "b"}}
		if resolved {
			c.Status.RestoredFrom = &dolphinv1.RestoreStatus{Path: "p/"}
		}
		return c
	}
	external := func(checked bool) *dolphinv1.MySQLCluster {
		c := fresh()
		c.Name = "db"
		c.Spec.Bootstrap = &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{Host: "old", AccountSecretName: "s"}}
		if checked {
			c.Status.Conditions = []metav1.Condition{{Type: dolphinv1.ConditionExternalSourceReady, Status: metav1.ConditionTrue}}
		}
		return c
	}
	physical := func(checked, resolved bool) *dolphinv1.MySQLCluster {
		c := external(checked)
		c.Spec.Bootstrap.External.PhysicalCopy = &dolphinv1.BackupLocation{Path: "old/b1/"}
		if resolved {
			c.Status.RestoredFrom = &dolphinv1.RestoreStatus{Path: "old/b1/"}
		}
		return c
	}
	mysql := withData(fresh())
	mysql.Spec.Engine.Flavor = dolphinv1.FlavorMySQL
	pods := []corev1.Pod{sourcePod("db-0", true, true), sourcePod("db-1", true, true), sourcePod("db-3", false, false)}
	newPod := &pods[2]
	for _, tc := range []struct {
		name    string
		c       *dolphinv1.MySQLCluster
		pods    []corev1.Pod
		mode    string
		source  string
		waitFor string
	}{
		{"new cluster", fresh(), pods, SeedEmpty, "", ""},
		{"new restored cluster", restoredFresh(true), pods, SeedBackup, "", ""},
		{"restored, location not resolved", restoredFresh(false), pods, "", "", "not resolved"},
		{"scale-up clones a replica", withData(fresh()), pods, SeedClone, "db-1", ""},
		{"only the primary can serve", withData(fresh()), []corev1.Pod{sourcePod("db-0", true, true), sourcePod("db-1", true, false), pods[2]}, SeedClone, "db-0", ""},
		{"nobody can serve", withData(fresh()), []corev1.Pod{sourcePod("db-0", false, true), pods[2]}, "", "", "no peer to clone db-3 from"},
		{"mysql starts empty", mysql, pods, SeedEmpty, "", ""},
		{"external, not checked", external(false), pods, "", "", "checks have not passed"},
		{"external: the others clone the first", external(true), pods, SeedClone, "db-0", ""},
		{"external: the first does not serve yet", external(true), []corev1.Pod{sourcePod("db-0", false, true), pods[2]}, "", "", "db-0 copies the external server first"},
		{"external: with data, a normal clone", withData(external(true)), pods, SeedClone, "db-1", ""},
		{"physical copy, not checked", physical(false, true), pods, "", "", "checks have not passed"},
		{"physical copy, backup not resolved", physical(true, false), pods, "", "", "physicalCopy is not resolved"},
		{"physical copy: every instance restores it", physical(true, true), pods, SeedBackup, "", ""},
		{"physical copy: the first too", physical(true, true), []corev1.Pod{sourcePod("db-0", false, false), pods[2]}, SeedBackup, "", ""},
		{"physical copy: with data, a normal clone", withData(physical(true, true)), pods, SeedClone, "db-1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, wait := decideSeed(tc.c, tc.pods, newPod)
			if tc.waitFor != "" {
				if !strings.Contains(wait, tc.waitFor) {
					t.Fatalf("wait %q, want it to contain %q (plan %+v)", wait, tc.waitFor, plan)
				}
				return
			}
			if wait != "" || plan.Mode != tc.mode {
				t.Fatalf("plan %+v wait %q, want mode %s", plan, wait, tc.mode)
			}
			if tc.source != "" && (plan.Source == nil || plan.Source.Name != tc.source) {
				t.Fatalf("source %v, want %s", plan.Source, tc.source)
			}
			if plan.Source != nil && plan.Source.Name == newPod.Name {
				t.Fatal("an instance is never cloned from itself")
			}
		})
	}
}

// TestDecideExternalSeedFirstInstance: the first instance of a cluster bootstrapped from an
// external server copies it, once its checks passed.
func TestDecideExternalSeedFirstInstance(t *testing.T) {
	c := &dolphinv1.MySQLCluster{}
	c.Name = "db"
	c.Spec.Bootstrap = &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{Host: "old", AccountSecretName: "s"}}
	first := sourcePod("db-0", false, false)
	if _, wait := decideSeed(c, []corev1.Pod{first}, &first); !strings.Contains(wait, "checks have not passed") {
		t.Errorf("unchecked: wait %q", wait)
	}
	c.Status.Conditions = []metav1.Condition{{Type: dolphinv1.ConditionExternalSourceReady, Status: metav1.ConditionTrue}}
	if plan, wait := decideSeed(c, []corev1.Pod{first}, &first); wait != "" || plan.Mode != SeedExternal {
		t.Errorf("checked: plan %+v wait %q, want %s", plan, wait, SeedExternal)
	}
}

// TestPhysicalCopyMismatch: a backup is the copy of a server only at a position the server
// reached; the server may be further (what the cluster then replicates in).
func TestPhysicalCopyMismatch(t *testing.T) {
	for _, tc := range []struct {
		source, backup, want string
	}{
		{"0-1-100", "0-1-100", ""},
		{"0-1-250", "0-1-100", ""},
		{"0-1-250,1-7-3", "0-1-100", ""},
		{"0-1-250,1-7-3", "1-7-3,0-1-100", ""},
		{"0-1-99", "0-1-100", "never reached"},
		{"0-1-250", "0-1-100,2-5-1", "never reached"},
		{"0-1-250", "", ""},
		{"0-1-250", "garbage", "cannot read"},
		{"", "0-1-1", "never reached"},
	} {
		got := physicalCopyMismatch(tc.source, tc.backup)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("source %q backup %q: %q, want %q", tc.source, tc.backup, got, tc.want)
		}
	}
}

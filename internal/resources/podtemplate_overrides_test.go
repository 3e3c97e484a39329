package resources

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// With spec.resources and agentResources set, every container of an instance pod — init
// containers included — has requests equal to its limits: the pod is Guaranteed, and a quota
// that requires limits admits it. The pull secret and policy reach every container, the
// service account replaces Dolphin's, and the server gets the extra environment after its own.
func TestPodOverridesReachEveryContainer(t *testing.T) {
	sts, err := StatefulSet(production(), BuildOptions{AgentImage: "ghcr.io/dolphin-operator/dolphin:test"})
	if err != nil {
		t.Fatal(err)
	}
	var spec corev1.PodSpec
	if err := convert(sts.Spec.Template.Spec, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.ServiceAccountName != "ledger-db" || len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "registry-creds" {
		t.Fatalf("service account %q, pull secrets %v", spec.ServiceAccountName, spec.ImagePullSecrets)
	}
	all := append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...)
	if len(all) < 5 {
		t.Fatalf("%d containers: the test would prove little", len(all))
	}
	for _, ctr := range all {
		r := ctr.Resources
		if len(r.Limits) == 0 || !equality.Semantic.DeepEqual(r.Requests, r.Limits) {
			t.Errorf("container %s: requests %v, limits %v: not Guaranteed", ctr.Name, r.Requests, r.Limits)
		}
		if ctr.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("container %s: pull policy %q", ctr.Name, ctr.ImagePullPolicy)
		}
		if ctr.Name == ContainerMySQLD {
			var names []string
			for _, e := range ctr.Env {
				names = append(names, e.Name)
			}
			if got := strings.Join(names, ","); got != "POD_NAME,POD_NAMESPACE,POD_IP,TZ,LICENSE" {
				t.Errorf("server env %s", got)
			}
		}
	}

	c := production()
	c.Spec.PodTemplate.Env = append(c.Spec.PodTemplate.Env, corev1.EnvVar{Name: "POD_IP", Value: "1.2.3.4"})
	if _, err := StatefulSet(c, BuildOptions{AgentImage: "x"}); err == nil || !strings.Contains(err.Error(), "POD_IP is set by Dolphin") {
		t.Fatalf("a reserved name: %v", err)
	}
}

// The pods Dolphin runs beside the instances — the binlog archiver, a backup's verification —
// reach the same store and pull the same images: they take the pod template's service account
// and pull secrets when it names them, and keep their own default otherwise.
func TestSidePodsTakeTheClusterIdentity(t *testing.T) {
	for _, c := range []*dolphinv1.MySQLCluster{production(), minimal()} {
		want := c.Spec.PodTemplate.ServiceAccountName
		c.Spec.Backup = &dolphinv1.BackupSpec{ContinuousArchiving: &dolphinv1.ContinuousArchiving{}}
		archiver := BinlogArchiveDeployment(c, BinlogArchiveArgs{}, BuildOptions{AgentImage: "img"}).Spec.Template.Spec
		store := restored().Status.RestoredFrom.Store
		b := &dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "nightly", UID: "u1"},
			Status: dolphinv1.MySQLBackupStatus{Store: &store, Path: "p/"}}
		verify := VerifyPod(c, b, "", "", BuildOptions{AgentImage: "img"}).Spec
		for what, sa := range map[string]*string{"archiver": archiver.ServiceAccountName, "verification": verify.ServiceAccountName} {
			got := ""
			if sa != nil {
				got = *sa
			}
			if got != want {
				t.Errorf("%s of %s: service account %q, want %q", what, c.Name, got, want)
			}
		}
		if n := len(c.Spec.PodTemplate.ImagePullSecrets); len(archiver.ImagePullSecrets) != n || len(verify.ImagePullSecrets) != n {
			t.Errorf("%s: pull secrets %d and %d, want %d", c.Name, len(archiver.ImagePullSecrets), len(verify.ImagePullSecrets), n)
		}
	}
}

// Without innodb_buffer_pool_size in spec.mysqlConfig, a memory limit sizes the buffer pool:
// 60% of it in 128 MiB units, at least one. It reaches my.cnf, and changes no restart hash:
// a cluster that had a limit before this release is not restarted by the upgrade, and its
// servers take the size at their next restart (MariaDB 10.11.12+ cannot raise it above
// innodb_buffer_pool_size_max online, so it is no run-time setting either). A size the user
// sets wins.
func TestBufferPoolFromTheMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		limit int64
		want  int64
	}{{4 << 30, 2432 << 20}, {1 << 30, 512 << 20}, {256 << 20, 128 << 20}, {64 << 20, 128 << 20}} {
		if got := BufferPoolFor(tc.limit); got != tc.want {
			t.Errorf("BufferPoolFor(%d MiB) = %d MiB, want %d MiB", tc.limit>>20, got>>20, tc.want>>20)
		}
	}
	c := production() // memory limit 4Gi, no buffer pool set
	cm, err := ConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data[MyCnfKey], "innodb_buffer_pool_size=2550136832") || !strings.Contains(cm.Data[MyCnfKey], "60% of the server's memory limit (4Gi)") {
		t.Errorf("my.cnf lacks the derived buffer pool:\n%s", cm.Data[MyCnfKey])
	}
	if vars, err := DynamicVariables(c); err != nil || vars["innodb_buffer_pool_size"] != "" {
		t.Errorf("run-time innodb_buffer_pool_size %q (%v): raised online it could pass innodb_buffer_pool_size_max", vars["innodb_buffer_pool_size"], err)
	}
	if ConfigHash(c) != ConfigHash(minimal()) {
		t.Error("the derived buffer pool changed the restart hash: existing pods would restart")
	}
	c.Spec.MySQLConfig = map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "1G"}
	if cm, err := ConfigMap(c); err != nil || !strings.Contains(cm.Data[MyCnfKey], "innodb_buffer_pool_size=1G") {
		t.Errorf("the user's size is replaced (%v):\n%s", err, cm.Data[MyCnfKey])
	}
}

// spec.podTemplate.securityContext replaces Dolphin's user, groups and seccomp profile in
// every pod it runs for the cluster — instances, binlog archiver, backup verification — and
// each container takes the seccomp profile (a container's own would override the pod's),
// while every container stays non-root, without privilege escalation or capabilities. A
// cluster that sets none keeps user 999 and RuntimeDefault.
func TestPodSecurityContextReachesEveryPod(t *testing.T) {
	for _, c := range []*dolphinv1.MySQLCluster{production(), minimal()} {
		wantUID, wantSeccomp := int64(mysqlUID), corev1.SeccompProfileTypeRuntimeDefault
		if s := c.Spec.PodTemplate.SecurityContext; s != nil {
			wantUID, wantSeccomp = *s.RunAsUser, s.SeccompProfile.Type
		}
		c.Spec.Backup = &dolphinv1.BackupSpec{ContinuousArchiving: &dolphinv1.ContinuousArchiving{}}
		sts, err := StatefulSet(c, BuildOptions{AgentImage: "img"})
		if err != nil {
			t.Fatal(err)
		}
		store := restored().Status.RestoredFrom.Store
		b := &dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "nightly", UID: "u1"},
			Status: dolphinv1.MySQLBackupStatus{Store: &store, Path: "p/"}}
		pods := map[string]any{"instance": sts.Spec.Template.Spec,
			"archiver":     BinlogArchiveDeployment(c, BinlogArchiveArgs{}, BuildOptions{AgentImage: "img"}).Spec.Template.Spec,
			"verification": VerifyPod(c, b, "", "", BuildOptions{AgentImage: "img"}).Spec}
		for what, ac := range pods {
			var spec corev1.PodSpec
			if err := convert(ac, &spec); err != nil {
				t.Fatal(err)
			}
			psc := spec.SecurityContext
			if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != wantUID || psc.FSGroup == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != wantSeccomp {
				t.Errorf("%s pod of %s: security context %+v, want user %d and seccomp %s", what, c.Name, psc, wantUID, wantSeccomp)
				continue
			}
			if c.Spec.PodTemplate.SecurityContext != nil && (*psc.RunAsGroup != 0 || *psc.FSGroup != 1000650000 ||
				len(psc.SupplementalGroups) != 1 || psc.SELinuxOptions == nil || psc.SELinuxOptions.Level != "s0:c26,c5") {
				t.Errorf("%s pod of %s: groups or SELinux not taken: %+v", what, c.Name, psc)
			}
			for _, ctr := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
				sc := ctr.SecurityContext
				if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != wantSeccomp ||
					sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
					sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
					t.Errorf("%s pod of %s, container %s: security context %+v", what, c.Name, ctr.Name, sc)
				}
			}
		}
	}
}

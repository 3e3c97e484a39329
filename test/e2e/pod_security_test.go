package e2e

import (
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// TestClusterRunsAsThePlatformsUser (issue 32: a pod template production users can live
// with): a platform that assigns its own uid range (OpenShift's restricted SCC, a policy that
// forbids the images' 999) runs a cluster with spec.podTemplate.securityContext — user
// 1000650000, the root group (gid 0, as OpenShift's images expect), fsGroup 1000650000 — in a
// namespace that enforces the restricted Pod Security Standard. The instances initialise,
// replicate and serve an application writer as that user; the data files belong to it; the
// primary's server hangs, Dolphin fails over and the old primary's replacement pod rejoins
// over its files as the same user; no acknowledged write is lost.
func TestClusterRunsAsThePlatformsUser(t *testing.T) {
	s := upStack(t)
	if s.node != nodeReal {
		t.Skip("users and file owners are the real node's: the process node runs every server as the test's user")
	}
	var ns corev1.Namespace
	if err := s.c.Get(s.ctx, client.ObjectKey{Name: s.ns}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	if err := s.c.Update(s.ctx, &ns); err != nil {
		t.Fatal(err)
	}
	// The label is enforced: a pod the restricted standard forbids is refused (dry run).
	root := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "root"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x", SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}}}}}
	if err := s.c.Create(s.ctx, root, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Fatalf("a root pod in the restricted namespace: %v; want refused by Pod Security admission", err)
	}
	const name, uid = "platform", 1000650000
	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 3, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"},
			PodTemplate: dolphinv1.PodTemplateOverrides{SecurityContext: &dolphinv1.PodSecurity{
				RunAsUser: ptr.To[int64](uid), RunAsGroup: ptr.To[int64](0), FSGroup: ptr.To[int64](uid)}}}}
	if err := s.c.Create(s.ctx, cluster); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cluster)
	s.waitHealthy(key)
	s.primaryWithTable(name)

	cs := kubernetes.NewForConfigOrDie(s.cfg)
	s.wantPodsRunAs(cs, name, uid)
	t.Logf("%s: every server and agent runs as %d (group 0) and owns its data directory", name, uid)

	w := s.startSteadyAppWriter(name)
	s.failOverByCrash(key, "the primary hung")
	s.waitHealthy(key)
	s.wantPodsRunAs(cs, name, uid) // the old primary's replacement too
	w.finish()
	acked, failed := s.wantEveryAckedWrite(key, name, w)
	t.Logf("%s: %d writes acknowledged, %d failed, 0 lost on every instance after a failover and the old primary's rejoin", name, len(acked), failed)
}

// wantPodsRunAs checks that the server and agent of each of the cluster's three pods run as
// uid, with group 0, and that uid owns the server's data directory.
func (s *stack) wantPodsRunAs(cs *kubernetes.Clientset, name string, uid int) {
	s.t.Helper()
	want := strconv.Itoa(uid)
	for _, pod := range []string{name + "-0", name + "-1", name + "-2"} {
		for _, check := range []struct {
			container string
			cmd       []string
			want      string
		}{
			{"mysqld", []string{"id", "-u"}, want},
			{"mysqld", []string{"id", "-g"}, "0"},
			{"agent", []string{"id", "-u"}, want},
			{"mysqld", []string{"stat", "-c", "%u", "/var/lib/mysql/mysql"}, want},
		} {
			out, err := s.execIn(cs, pod, check.container, check.cmd...)
			if err != nil || strings.TrimSpace(out) != check.want {
				s.t.Fatalf("%s, container %s: %s gave %q (%v), want %s", pod, check.container, strings.Join(check.cmd, " "), out, err, check.want)
			}
		}
	}
}

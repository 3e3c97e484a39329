package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestLocalDay2 makes the weekly changes of a platform team on `dolphin local` under a writer
// that goes through the primary Service as an application account: it rotates each of the
// operator, replication and monitor passwords in the credentials Secret, then changes a
// setting the server takes at run time. Nothing restarts, the primary Service never loses
// its endpoint, and no acknowledged write is lost.
func TestLocalDay2(t *testing.T) {
	s := upStack(t)
	const name = "day2"
	cluster, key := s.healthyAppCluster(name)
	s.waitAllInstances(key, 3, 0)
	before := s.servers(name, 3)
	var sts appsv1.StatefulSet
	if err := s.c.Get(s.ctx, key, &sts); err != nil {
		t.Fatal(err)
	}
	hash := sts.Spec.Template.Annotations[resources.ConfigHashAnnotation]

	w := s.startSteadyAppWriter(name)
	eps := s.watchEndpoints(name + "-primary")

	gaps := map[string]time.Duration{}
	old := s.dbPass
	for _, k := range []string{resources.OperatorPasswordKey, resources.ReplicationPasswordKey, resources.MonitorPasswordKey} {
		gen := s.rotate(name, k)
		testenv.Eventually(t, 120*time.Second, "rotation of "+k+" applied", func() error {
			return s.credentialsApplied(key, gen)
		})
		gaps[k] = w.takeGap()
		t.Logf("rotated %s: longest write gap %s", k, gaps[k].Round(time.Millisecond))
	}
	// The new operator password works, the old one no longer does.
	if _, err := s.count(s.sqlDB(s.podAddr(name + "-0"))); err != nil {
		t.Errorf("the rotated operator password does not log in: %v", err)
	}
	oldDB, _ := sql.Open("mysql", fmt.Sprintf("dolphin:%s@tcp(%s)/?timeout=2s", old, s.podAddr(name+"-0")))
	if err := oldDB.Ping(); err == nil {
		t.Errorf("the old operator password still logs in")
	}
	oldDB.Close()

	// A setting the server takes at run time: no restart, the value on every instance.
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"mysqlConfig": map[string]string{"max_connections": "213"}}})
	if err := s.c.Patch(s.ctx, cluster, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "max_connections=213 on every instance", func() error {
		for i := range 3 {
			var v string
			if err := s.sqlDB(s.podAddr(fmt.Sprintf("%s-%d", name, i))).QueryRow("SHOW GLOBAL VARIABLES LIKE 'max_connections'").Scan(new(string), &v); err != nil {
				return err
			}
			if v != "213" {
				return fmt.Errorf("%s-%d: max_connections %s", name, i, v)
			}
		}
		return nil
	})
	gaps["dynamic"] = w.takeGap()
	t.Logf("max_connections applied at run time: longest write gap %s", gaps["dynamic"].Round(time.Millisecond))
	if err := s.c.Get(s.ctx, key, &sts); err != nil {
		t.Fatal(err)
	}
	if got := sts.Spec.Template.Annotations[resources.ConfigHashAnnotation]; got != hash {
		t.Errorf("a run-time setting changed the pod template's config hash (%s -> %s): it would restart every instance", hash, got)
	}

	w.finish()
	if after := s.servers(name, 3); !maps.Equal(before, after) {
		t.Errorf("servers restarted or replaced: before %v, after %v", before, after)
	}
	polls, empty := eps.counts()
	if polls == 0 {
		t.Fatal("the endpoint watch never polled")
	}
	if empty > 0 {
		t.Errorf("the primary Service had no ready endpoint in %d of %d polls", empty, polls)
	}
	acked, failed := s.wantEveryAckedWrite(key, name, w)
	t.Logf("day2: %d writes acknowledged, %d failed; endpoints never empty in %d polls; gaps %v", len(acked), failed, polls, gaps)
}

// waitHealthy waits until the cluster is Ready and its topology Healthy.
func (s *stack) waitHealthy(key client.ObjectKey) {
	s.t.Helper()
	testenv.Eventually(s.t, 180*time.Second, "cluster Ready and healthy", func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(c.Status.Conditions, "Ready") || c.Status.Topology == nil || c.Status.Topology.State != "Healthy" {
			return fmt.Errorf("phase %s topology %+v", c.Status.Phase, c.Status.Topology)
		}
		return nil
	})
}

// rotate puts a new password under key in the cluster's credentials Secret and returns the
// new credentials generation.
func (s *stack) rotate(cluster, key string) string {
	s.t.Helper()
	var secret corev1.Secret
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster + "-credentials"}, &secret); err != nil {
		s.t.Fatal(err)
	}
	patch := client.MergeFrom(secret.DeepCopy())
	secret.Data[key] = []byte(resources.NewPassword())
	if err := s.c.Patch(s.ctx, &secret, patch); err != nil {
		s.t.Fatal(err)
	}
	if key == resources.OperatorPasswordKey {
		// The test's own operator logins (s.sqlDB) use the new password from now on; they
		// work once the rotation is applied.
		s.dbPass = string(secret.Data[key])
	}
	return resources.CredentialsGeneration(secret.Data)
}

// credentialsApplied says why the cluster is not yet on credentials generation gen.
func (s *stack) credentialsApplied(key client.ObjectKey, gen string) error {
	var c dolphinv1.MySQLCluster
	if err := s.c.Get(s.ctx, key, &c); err != nil {
		return err
	}
	t := c.Status.Topology
	if t == nil || t.CredentialsGeneration != gen {
		return fmt.Errorf("engine not on %s yet", gen)
	}
	for _, in := range t.Instances {
		if in.CredentialsGeneration != gen || (in.Name != t.Primary && in.ReplicationCredentialsGeneration != gen) {
			return fmt.Errorf("%s at %s/%s", in.Name, in.CredentialsGeneration, in.ReplicationCredentialsGeneration)
		}
	}
	cond := meta.FindStatusCondition(c.Status.Conditions, controller.ConditionCredentialsApplied)
	if cond == nil || cond.Status != metav1.ConditionTrue || !meta.IsStatusConditionTrue(c.Status.Conditions, "Ready") {
		return fmt.Errorf("conditions %+v", c.Status.Conditions)
	}
	if slices.Contains(t.ErrantInstances, t.Primary) {
		return fmt.Errorf("errant")
	}
	return nil
}

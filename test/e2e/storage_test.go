package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestLocalStorageGrowth grows spec.storage.size of a running cluster on `dolphin local`
// (docs/design/0012): the claims (of the default class dolphin-local) grow to the new size,
// the StatefulSet is replaced with the larger claim template, and no mysqld restarts: same
// pods, same server processes, same revision, and the data is still there.
func TestLocalStorageGrowth(t *testing.T) {
	s := upStack(t)
	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "grow"},
		Spec: dolphinv1.MySQLClusterSpec{
			Instances:   2,
			Storage:     dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"},
		}}
	if err := s.c.Create(s.ctx, cluster); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cluster)
	testenv.Eventually(t, 180*time.Second, "cluster Ready", func() error {
		if err := s.c.Get(s.ctx, key, cluster); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(cluster.Status.Conditions, "Ready") {
			return fmt.Errorf("phase %s", cluster.Status.Phase)
		}
		return nil
	})
	primary := s.primaryWithTable("grow")
	if _, err := primary.Exec("INSERT INTO app.rows VALUES (1), (2), (3)"); err != nil {
		t.Fatal(err)
	}
	s.waitAllInstances(key, 2, 3)

	var old appsv1.StatefulSet
	if err := s.c.Get(s.ctx, key, &old); err != nil {
		t.Fatal(err)
	}
	type server struct {
		uid      types.UID
		pid      int
		restarts int32
	}
	before := map[string]server{}
	for _, name := range []string{"grow-0", "grow-1"} {
		var p corev1.Pod
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		before[name] = server{p.UID, s.serverPID(name), p.Status.ContainerStatuses[0].RestartCount}
		var pvc corev1.PersistentVolumeClaim
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: "data-" + name}, &pvc); err != nil {
			t.Fatal(err)
		}
		if class := pvc.Spec.StorageClassName; class == nil || *class != "dolphin-local" {
			t.Fatalf("%s has class %v: the local node's class should be the default", pvc.Name, class)
		}
	}

	patch := []byte(`{"spec":{"storage":{"size":"2Gi"}}}`)
	if err := s.c.Patch(s.ctx, cluster, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	grown := time.Now()
	testenv.Eventually(t, 120*time.Second, "volumes grown and the StatefulSet replaced", func() error {
		for name := range before {
			var pvc corev1.PersistentVolumeClaim
			if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: "data-" + name}, &pvc); err != nil {
				return err
			}
			req, capacity := pvc.Spec.Resources.Requests[corev1.ResourceStorage], pvc.Status.Capacity[corev1.ResourceStorage]
			if req.String() != "2Gi" || capacity.String() != "2Gi" {
				return fmt.Errorf("%s: request %s, capacity %s", pvc.Name, req.String(), capacity.String())
			}
		}
		var sts appsv1.StatefulSet
		if err := s.c.Get(s.ctx, key, &sts); err != nil {
			return err
		}
		if sts.UID == old.UID {
			return fmt.Errorf("StatefulSet not replaced yet")
		}
		if q := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "2Gi" {
			return fmt.Errorf("claim template %s", q.String())
		}
		st := sts.Status
		if st.ObservedGeneration != sts.Generation || st.CurrentRevision != old.Status.CurrentRevision ||
			st.UpdateRevision != old.Status.CurrentRevision || st.ReadyReplicas != 2 {
			return fmt.Errorf("new StatefulSet status %+v, want revision %s with 2 ready", st, old.Status.CurrentRevision)
		}
		if err := s.c.Get(s.ctx, key, cluster); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(cluster.Status.Conditions, "Ready") || len(cluster.Status.Instances) != 2 {
			return fmt.Errorf("cluster phase %s, instances %+v", cluster.Status.Phase, cluster.Status.Instances)
		}
		for _, in := range cluster.Status.Instances {
			if in.VolumeCapacity == nil || in.VolumeCapacity.String() != "2Gi" {
				return fmt.Errorf("%s: volumeCapacity %v", in.Name, in.VolumeCapacity)
			}
		}
		return nil
	})
	t.Logf("spec.storage.size 1Gi -> 2Gi applied in %.1fs", time.Since(grown).Seconds())

	for name, b := range before {
		var p corev1.Pod
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		if p.UID != b.uid || s.serverPID(name) != b.pid || p.Status.ContainerStatuses[0].RestartCount != b.restarts {
			t.Errorf("%s restarted: uid %s pid %d restarts %d, was %s %d %d", name, p.UID, s.serverPID(name),
				p.Status.ContainerStatuses[0].RestartCount, b.uid, b.pid, b.restarts)
		}
	}
	var evs eventsv1.EventList
	if err := s.c.List(s.ctx, &evs, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	for _, reason := range []string{"VolumesExpanding", "StatefulSetReplaced"} {
		if !slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool { return e.Reason == reason && e.Regarding.Name == "grow" }) {
			t.Errorf("no %s event on the cluster", reason)
		}
	}
	if _, err := primary.Exec("INSERT INTO app.rows VALUES (4)"); err != nil {
		t.Errorf("writing after the growth: %v", err)
	}
	s.waitAllInstances(key, 2, 4)
}

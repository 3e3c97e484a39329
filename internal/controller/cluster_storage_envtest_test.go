package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// envtest runs no controller manager: these tests stand in for the StatefulSet controller
// (claims and pods), the PV controller and resizer (claim phase and capacity) and the
// garbage collector (orphaning). cluster_storage_kcm_envtest_test.go runs the real ones.

// newStorageClass creates a StorageClass (cluster-scoped: named after the test namespace).
func newStorageClass(t *testing.T, c client.Client, name string, expand *bool) string {
	t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "example.com/test", AllowVolumeExpansion: expand}
	if err := c.Create(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), sc) })
	return name
}

// reconcileRecording runs one reconcile with an event recorder and returns the result, the
// error and the reasons of the events emitted.
func reconcileRecording(t *testing.T, c client.Client, key types.NamespacedName) (ctrl.Result, error, []string) {
	t.Helper()
	rec := events.NewFakeRecorder(1000)
	r := &MySQLClusterReconciler{Client: c, Scheme: envScheme, Recorder: rec}
	res, err := r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), ctrl.Request{NamespacedName: key})
	var reasons []string
	for {
		select {
		case e := <-rec.Events:
			reasons = append(reasons, strings.Fields(e)[1])
			t.Logf("event: %s", e)
		default:
			return res, err, reasons
		}
	}
}

// standInStatefulSetController creates, as the StatefulSet controller would, a bound data
// claim (capacity = request, as the PV controller sets it) and a pod for each replica, and
// marks the StatefulSet rolled out at revision rev. It returns the pods' UIDs by name.
func standInStatefulSetController(t *testing.T, c client.Client, key types.NamespacedName, rev string) map[string]types.UID {
	t.Helper()
	ctx := context.Background()
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, key, &sts); err != nil {
		t.Fatal(err)
	}
	tmpl := sts.Spec.VolumeClaimTemplates[0]
	uids := map[string]types.UID{}
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	for i := range int(*sts.Spec.Replicas) {
		pod := fmt.Sprintf("%s-%d", sts.Name, i)
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: tmpl.Name + "-" + pod, Labels: tmpl.Labels},
			Spec:       *tmpl.Spec.DeepCopy(),
		}
		if err := c.Create(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
			AccessModes: pvc.Spec.AccessModes, Capacity: pvc.Spec.Resources.Requests}
		if err := c.Status().Update(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{appsv1.ControllerRevisionHashLabelKey: rev, appsv1.StatefulSetPodNameLabel: pod}
		for k, v := range sts.Spec.Template.Labels {
			labels[k] = v
		}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: pod, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "mysqld", Image: "mariadb"}}},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		uids[pod] = p.UID
	}
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: *sts.Spec.Replicas,
		UpdatedReplicas: *sts.Spec.Replicas, CurrentReplicas: *sts.Spec.Replicas, CurrentRevision: rev, UpdateRevision: rev}
	if err := c.Status().Update(ctx, &sts); err != nil {
		t.Fatal(err)
	}
	return uids
}

// standInGarbageCollector does what the garbage collector does for a StatefulSet deleted
// with orphan propagation: remove its owner references from pods and claims, then the
// orphan finalizer.
func standInGarbageCollector(t *testing.T, c client.Client, key types.NamespacedName) {
	t.Helper()
	ctx := context.Background()
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, key, &sts); err != nil {
		t.Fatal(err)
	}
	if sts.DeletionTimestamp == nil || !controllerutil.ContainsFinalizer(&sts, metav1.FinalizerOrphanDependents) {
		t.Fatalf("StatefulSet not deleted with orphan propagation: deletionTimestamp %v, finalizers %v", sts.DeletionTimestamp, sts.Finalizers)
	}
	var pods corev1.PodList
	var pvcs corev1.PersistentVolumeClaimList
	if err := c.List(ctx, &pods, client.InNamespace(key.Namespace)); err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, &pvcs, client.InNamespace(key.Namespace)); err != nil {
		t.Fatal(err)
	}
	var dependents []client.Object
	for i := range pods.Items {
		dependents = append(dependents, &pods.Items[i])
	}
	for i := range pvcs.Items {
		dependents = append(dependents, &pvcs.Items[i])
	}
	for _, o := range dependents {
		refs := slices.DeleteFunc(o.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == sts.UID })
		if len(refs) == len(o.GetOwnerReferences()) {
			continue
		}
		patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
		o.SetOwnerReferences(refs)
		if err := c.Patch(ctx, o, patch); err != nil {
			t.Fatal(err)
		}
	}
	patch := client.MergeFrom(sts.DeepCopy())
	controllerutil.RemoveFinalizer(&sts, metav1.FinalizerOrphanDependents)
	if err := c.Patch(ctx, &sts, patch); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, &sts); !apierrors.IsNotFound(err) {
		t.Fatalf("StatefulSet still there after orphaning: %v", err)
	}
}

// claimSizes returns the storage request of each claim in the namespace, by name.
func claimSizes(t *testing.T, c client.Client, ns string) map[string]string {
	t.Helper()
	var list corev1.PersistentVolumeClaimList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, pvc := range list.Items {
		q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		out[pvc.Name] = q.String()
	}
	return out
}

func setStorageSize(t *testing.T, c client.Client, key types.NamespacedName, size string, edit func(*dolphinv1.MySQLCluster)) {
	t.Helper()
	cl := getCluster(t, c, key)
	cl.Spec.Storage.Size = ptr.To(resource.MustParse(size))
	if edit != nil {
		edit(cl)
	}
	if err := c.Update(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
}

func TestEnvtestStorageGrowthReplacesStatefulSet(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	ns := newNamespace(t)
	class := newStorageClass(t, c, ns+"-expandable", ptr.To(true))
	key := createCluster(t, c, ns, "grow", dolphinv1.MySQLClusterSpec{Instances: 3,
		Storage: dolphinv1.StorageSpec{Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: &class}})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	var old appsv1.StatefulSet
	if err := c.Get(ctx, key, &old); err != nil {
		t.Fatal(err)
	}
	uids := standInStatefulSetController(t, c, key, "grow-6d4f8b7c9")

	setStorageSize(t, c, key, "2Gi", nil)
	if _, err, reasons := reconcileRecording(t, c, key); err != nil {
		t.Fatalf("reconcile after growing spec.storage.size: %v", err)
	} else if !slices.Contains(reasons, "VolumesExpanding") || !slices.Contains(reasons, "StatefulSetReplaced") {
		t.Errorf("events %v, want VolumesExpanding and StatefulSetReplaced", reasons)
	}
	want := map[string]string{"data-grow-0": "2Gi", "data-grow-1": "2Gi", "data-grow-2": "2Gi"}
	if got := claimSizes(t, c, ns); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("claim requests %v, want %v", got, want)
	}
	st := getCluster(t, c, key).Status
	for _, in := range st.Instances {
		if in.VolumeCapacity == nil || in.VolumeCapacity.String() != "1Gi" {
			t.Errorf("%s: volumeCapacity %v while the volumes still expand, want 1Gi", in.Name, in.VolumeCapacity)
		}
	}
	if len(st.Instances) != 3 {
		t.Errorf("instances %+v", st.Instances)
	}

	// While the old StatefulSet is going, reconciles wait for it (no apply on it, no error).
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatalf("reconcile while the StatefulSet is deleted: %v", err)
	}
	standInGarbageCollector(t, c, key)
	if _, err, reasons := reconcileRecording(t, c, key); err != nil {
		t.Fatalf("reconcile re-creating the StatefulSet: %v", err)
	} else if !slices.Contains(reasons, "CreatedStatefulSet") {
		t.Errorf("events %v, want CreatedStatefulSet", reasons)
	}
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, key, &sts); err != nil {
		t.Fatal(err)
	}
	if sts.UID == old.UID {
		t.Fatal("the StatefulSet was not replaced")
	}
	if q, _ := claimTemplateSize(&sts); q.String() != "2Gi" {
		t.Errorf("claim template %s, want 2Gi", q.String())
	}
	// The revision hash is computed from spec.template alone (the StatefulSet controller's
	// ControllerRevision holds only the template), so an identical template means the new
	// StatefulSet's updateRevision equals the pods' revision: none restarts.
	// cluster_storage_kcm_envtest_test.go checks the revisions with the real controller.
	if !equality.Semantic.DeepEqual(sts.Spec.Template, old.Spec.Template) {
		t.Errorf("pod template changed: the re-created StatefulSet would roll the pods\nold %+v\nnew %+v", old.Spec.Template, sts.Spec.Template)
	}
	for pod, uid := range uids {
		var p corev1.Pod
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod}, &p); err != nil || p.UID != uid {
			t.Errorf("pod %s: uid %s (err %v), want the original %s", pod, p.UID, err, uid)
		}
	}

	// The resizer reports the new capacity: the status follows; then nothing is left to do.
	for name := range want {
		var pvc corev1.PersistentVolumeClaim
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pvc); err != nil {
			t.Fatal(err)
		}
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
		if err := c.Status().Update(ctx, &pvc); err != nil {
			t.Fatal(err)
		}
	}
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	for _, in := range getCluster(t, c, key).Status.Instances {
		if in.VolumeCapacity == nil || in.VolumeCapacity.String() != "2Gi" {
			t.Errorf("%s: volumeCapacity %v, want 2Gi", in.Name, in.VolumeCapacity)
		}
	}
	var writes writeCounter
	if err := reconcileOnce(t, directClient(t, &writes), key); err != nil {
		t.Fatal(err)
	}
	if n := writes.n.Load(); n != 0 {
		t.Errorf("a reconcile after the growth made %d writes, want 0", n)
	}
}

func TestEnvtestStorageNotExpandableKeepsTheRestApplied(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	ns := newNamespace(t)
	class := newStorageClass(t, c, ns+"-fixed", nil)
	key := createCluster(t, c, ns, "fixed", dolphinv1.MySQLClusterSpec{Instances: 2,
		Storage: dolphinv1.StorageSpec{Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: &class}})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	var old appsv1.StatefulSet
	if err := c.Get(ctx, key, &old); err != nil {
		t.Fatal(err)
	}
	standInStatefulSetController(t, c, key, "fixed-5c7d9f")

	// Grow the volumes together with other changes; remove the budget, which the step after
	// the StatefulSet re-creates.
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.NamesFor(getCluster(t, c, key)).PodDisruptionBudget}}
	if err := c.Delete(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	setStorageSize(t, c, key, "2Gi", func(cl *dolphinv1.MySQLCluster) {
		cl.Spec.Instances = 3
		cl.Spec.MySQLConfig = map[string]dolphinv1.MySQLConfigValue{"max_connections": "321"}
	})
	res, err, reasons := reconcileRecording(t, c, key)
	if err != nil || res != (ctrl.Result{}) {
		t.Fatalf("reconcile: %v %+v; a user error must neither fail nor requeue (the fix triggers the next)", err, res)
	}
	if !slices.Contains(reasons, "StorageNotExpandable") {
		t.Errorf("events %v, want a StorageNotExpandable warning", reasons)
	}
	cl := getCluster(t, c, key)
	ready := meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != "StorageNotExpandable" ||
		!strings.Contains(ready.Message, `StorageClass "`+class+`"`) || !strings.Contains(ready.Message, "allowVolumeExpansion: true") {
		t.Errorf("Ready condition %+v, want False/StorageNotExpandable naming the class and the fix", ready)
	}
	if d := meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionDegraded); d == nil || d.Reason != "StorageNotExpandable" {
		t.Errorf("Degraded condition %+v", d)
	}
	// Everything else was applied: budget, config, replicas; the volumes and template stay.
	if err := c.Get(ctx, client.ObjectKeyFromObject(pdb), pdb); err != nil {
		t.Errorf("the budget was not re-applied: %v", err)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: resources.NamesFor(cl).ConfigMap}, &cm); err != nil ||
		!strings.Contains(cm.Data[resources.MyCnfKey], "max_connections=321") {
		t.Errorf("my.cnf not updated (%v)", err)
	}
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, key, &sts); err != nil {
		t.Fatal(err)
	}
	if sts.UID != old.UID || sts.DeletionTimestamp != nil || *sts.Spec.Replicas != 3 {
		t.Errorf("StatefulSet uid %s (was %s), deleting %v, replicas %d: want the same one, scaled to 3", sts.UID, old.UID, sts.DeletionTimestamp, *sts.Spec.Replicas)
	}
	if q, _ := claimTemplateSize(&sts); q.String() != "1Gi" {
		t.Errorf("claim template %s, want the live 1Gi", q.String())
	}
	if got := claimSizes(t, c, ns); got["data-fixed-0"] != "1Gi" || got["data-fixed-1"] != "1Gi" {
		t.Errorf("claims %v changed although their class cannot expand", got)
	}

	// No loop: another reconcile, a second later (condition times have second precision),
	// writes nothing, so it triggers no further reconcile.
	time.Sleep(1100 * time.Millisecond)
	var writes writeCounter
	if _, err := (&MySQLClusterReconciler{Client: directClient(t, &writes), Scheme: envScheme}).Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if n := writes.n.Load(); n != 0 {
		t.Errorf("a reconcile waiting for the user made %d writes, want 0", n)
	}

	// Fixing the class resumes the cluster: the class's watch maps to it, and it grows.
	var sc storagev1.StorageClass
	if err := c.Get(ctx, types.NamespacedName{Name: class}, &sc); err != nil {
		t.Fatal(err)
	}
	sc.AllowVolumeExpansion = ptr.To(true)
	if err := c.Update(ctx, &sc); err != nil {
		t.Fatal(err)
	}
	r := &MySQLClusterReconciler{Client: c, Scheme: envScheme}
	if reqs := r.storageClassToClusters(ctx, &sc); !slices.ContainsFunc(reqs, func(q ctrl.Request) bool { return q.NamespacedName == key }) {
		t.Errorf("the StorageClass change maps to %v, not to the waiting cluster", reqs)
	}
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	if got := claimSizes(t, c, ns); got["data-fixed-0"] != "2Gi" || got["data-fixed-1"] != "2Gi" {
		t.Errorf("claims %v after the class was fixed, want 2Gi", got)
	}
	if err := c.Get(ctx, key, &sts); err != nil || sts.DeletionTimestamp == nil {
		t.Errorf("StatefulSet not being replaced after the class was fixed (err %v)", err)
	}
}

// A user error in one step never stops protection (issue 32): with a storage growth its
// StorageClass cannot do, the cluster's scheduled backup for the slot that is due is still
// created, the schedule's next slot is still requeued, and the condition names the fix.
func TestEnvtestFailingStorageStepKeepsScheduledBackups(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	ns := newNamespace(t)
	class := newStorageClass(t, c, ns+"-fixed", nil)
	key := createCluster(t, c, ns, "fixed", dolphinv1.MySQLClusterSpec{Instances: 2,
		Storage: dolphinv1.StorageSpec{Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: &class},
		Backup: &dolphinv1.BackupSpec{Store: &dolphinv1.BackupStore{S3: &dolphinv1.S3Store{Endpoint: "http://127.0.0.1:1",
			Bucket: "backups", CredentialsSecret: "s3"}}, Schedule: &dolphinv1.BackupSchedule{Cron: "@hourly"}}})
	mustCreate(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data: map[string][]byte{S3AccessKeyIDKey: []byte("AKID"), S3SecretAccessKeyKey: []byte("sekrit")}})
	// The last scheduled backup was three hours ago: this hour's slot is due.
	slot := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	old := &dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: ns,
		Labels:      map[string]string{BackupScheduledLabel: "true", BackupClusterLabel: "fixed"},
		Annotations: map[string]string{BackupSlotAnnotation: slot.Format(time.RFC3339)}},
		Spec: dolphinv1.MySQLBackupSpec{Cluster: "fixed"}}
	mustCreate(t, c, old)
	done := metav1.NewTime(slot.Add(time.Minute))
	old.Status = dolphinv1.MySQLBackupStatus{Phase: dolphinv1.BackupSucceeded, CompletionTime: &done}
	if err := c.Status().Update(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	standInStatefulSetController(t, c, key, "fixed-5c7d9f")
	// This reconcile took the due slot; the storage growth below fails, and the slot after
	// it must still be scheduled.
	var list dolphinv1.MySQLBackupList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if b := &list.Items[i]; b.Name != "old" {
			if err := c.Delete(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
	}

	setStorageSize(t, c, key, "2Gi", nil)
	res, err, reasons := reconcileRecording(t, c, key)
	if err != nil {
		t.Fatalf("reconcile: %v; a user error must not fail it", err)
	}
	if !slices.Contains(reasons, "StorageNotExpandable") || !slices.Contains(reasons, "BackupScheduled") {
		t.Errorf("events %v, want StorageNotExpandable and BackupScheduled", reasons)
	}
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	want := time.Now().UTC().Truncate(time.Hour).Format(time.RFC3339)
	scheduled := 0
	for _, b := range list.Items {
		if b.Name != "old" && b.Annotations[BackupSlotAnnotation] == want {
			scheduled++
		}
	}
	if scheduled != 1 {
		t.Fatalf("%d backups for the slot %s after the failing storage step, want 1 (backups: %d)", scheduled, want, len(list.Items))
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Hour+time.Minute {
		t.Errorf("requeue after %s: the next slot (within the hour) must still be scheduled", res.RequeueAfter)
	}
	cl := getCluster(t, c, key)
	if d := meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionDegraded); d == nil || d.Reason != "StorageNotExpandable" ||
		!strings.Contains(d.Message, "allowVolumeExpansion: true") {
		t.Errorf("Degraded condition %+v, want StorageNotExpandable saying what to change", d)
	}
}

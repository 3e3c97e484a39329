package controller

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// claim builds a data claim: request and capacity ("" = none), class (nil = none), phase.
func claim(name, request, capacity string, class *string, phase corev1.PersistentVolumeClaimPhase) corev1.PersistentVolumeClaim {
	pvc := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: class, Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(request)}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: phase},
	}
	if capacity != "" {
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)}
	}
	return pvc
}

func TestDataTemplateNameMatchesTheStatefulSet(t *testing.T) {
	c := resources.Defaulted(&dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "n"}})
	sts, err := resources.StatefulSet(c, resources.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := *sts.Spec.VolumeClaimTemplates[0].Name; got != dataTemplate {
		t.Fatalf("claim template %q, cluster_storage.go assumes %q", got, dataTemplate)
	}
	if got := sts.Spec.VolumeClaimTemplates[0].Labels; !reflect.DeepEqual(got, resources.SelectorLabels(c)) {
		t.Fatalf("claim template labels %v: dataClaims lists claims by the selector labels", got)
	}
}

func TestClaimOrdinal(t *testing.T) {
	for name, want := range map[string]int{"data-db-0": 0, "data-db-12": 12} {
		if n, ok := claimOrdinal("db", name); !ok || n != want {
			t.Errorf("%s: %d %v, want %d", name, n, ok, want)
		}
	}
	for _, name := range []string{"data-db", "data-db-", "data-db-x", "data-db-01", "data-db-1-0", "data-dbx-0", "logs-db-0", "data-db--1"} {
		if n, ok := claimOrdinal("db", name); ok {
			t.Errorf("%s: ordinal %d, want none", name, n)
		}
	}
}

func TestPlanStorage(t *testing.T) {
	class := ptr.To("fast")
	gi := func(s string) resource.Quantity { return resource.MustParse(s) }
	deleting := claim("data-db-3", "1Gi", "1Gi", class, corev1.ClaimBound)
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	for _, tc := range []struct {
		name           string
		want, template string
		claims         []corev1.PersistentVolumeClaim
		plan           storagePlan
	}{
		{name: "nothing to do", want: "1Gi", template: "1Gi",
			claims: []corev1.PersistentVolumeClaim{claim("data-db-0", "1Gi", "1Gi", class, corev1.ClaimBound)}},
		{name: "grow bound claims and replace", want: "2Gi", template: "1Gi",
			claims: []corev1.PersistentVolumeClaim{
				claim("data-db-1", "1Gi", "1Gi", class, corev1.ClaimBound),
				claim("data-db-0", "1Gi", "1Gi", class, corev1.ClaimBound),
				claim("data-db-2", "1Gi", "", class, corev1.ClaimPending),
				deleting,
			},
			plan: storagePlan{Grow: []string{"data-db-0", "data-db-1"}, Unbound: []string{"data-db-2"}, ReplaceStatefulSet: true}},
		{name: "template already replaced, one claim left behind", want: "2Gi", template: "2Gi",
			claims: []corev1.PersistentVolumeClaim{
				claim("data-db-0", "2Gi", "1Gi", class, corev1.ClaimBound),
				claim("data-db-1", "1Gi", "1Gi", class, corev1.ClaimBound),
			},
			plan: storagePlan{Grow: []string{"data-db-1"}}},
		{name: "claims grown, template not yet", want: "2Gi", template: "1Gi",
			claims: []corev1.PersistentVolumeClaim{claim("data-db-0", "2Gi", "2Gi", class, corev1.ClaimBound)},
			plan:   storagePlan{ReplaceStatefulSet: true}},
		{name: "never shrinks", want: "1Gi", template: "2Gi",
			claims: []corev1.PersistentVolumeClaim{claim("data-db-0", "3Gi", "3Gi", class, corev1.ClaimBound)}},
		{name: "same size in other units", want: "1024Mi", template: "1Gi",
			claims: []corev1.PersistentVolumeClaim{claim("data-db-0", "1Gi", "1Gi", class, corev1.ClaimBound)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planStorage(gi(tc.want), gi(tc.template), tc.claims)
			if !reflect.DeepEqual(got, tc.plan) {
				t.Errorf("plan %+v, want %+v", got, tc.plan)
			}
			if got.empty() != (tc.plan.Grow == nil && tc.plan.Unbound == nil && !tc.plan.ReplaceStatefulSet) {
				t.Errorf("empty() = %v for %+v", got.empty(), got)
			}
		})
	}
}

func TestNotExpandable(t *testing.T) {
	from, want := resource.MustParse("1Gi"), resource.MustParse("2Gi")
	classes := map[string]*storagev1.StorageClass{
		"grows": {AllowVolumeExpansion: ptr.To(true)},
		"fixed": {},
		"off":   {AllowVolumeExpansion: ptr.To(false)},
		"gone":  nil,
	}
	claims := []corev1.PersistentVolumeClaim{
		claim("data-db-0", "1Gi", "1Gi", ptr.To("grows"), corev1.ClaimBound),
		claim("data-db-1", "1Gi", "1Gi", ptr.To("fixed"), corev1.ClaimBound),
		claim("data-db-2", "1Gi", "1Gi", ptr.To("off"), corev1.ClaimBound),
		claim("data-db-3", "1Gi", "1Gi", ptr.To("gone"), corev1.ClaimBound),
		claim("data-db-4", "1Gi", "1Gi", nil, corev1.ClaimBound),
		claim("data-db-5", "1Gi", "1Gi", ptr.To(""), corev1.ClaimBound),
	}
	if ue := notExpandable(claims, []string{"data-db-0"}, classes, from, want); ue != nil {
		t.Errorf("an expandable class reported: %v", ue)
	}
	if ue := notExpandable(claims, nil, classes, from, want); ue != nil {
		t.Errorf("no claim to grow reported: %v", ue)
	}
	ue := notExpandable(claims, []string{"data-db-0", "data-db-1", "data-db-2", "data-db-3", "data-db-4", "data-db-5"}, classes, from, want)
	if ue == nil {
		t.Fatal("classes that cannot expand not reported")
	}
	if ue.Reason != "StorageNotExpandable" {
		t.Errorf("reason %q", ue.Reason)
	}
	for _, s := range []string{
		"asks for 2Gi", "(1Gi now)",
		`StorageClass "fixed" of data-db-1 does not allow volume expansion: set allowVolumeExpansion: true`,
		`StorageClass "off" of data-db-2`,
		`StorageClass "gone" of data-db-3 does not allow volume expansion: it does not exist`,
		"data-db-4, data-db-5 have no StorageClass",
	} {
		if !strings.Contains(ue.Message, s) {
			t.Errorf("message lacks %q:\n%s", s, ue.Message)
		}
	}
	if strings.Contains(ue.Message, "data-db-0") {
		t.Errorf("message names the claim that can grow:\n%s", ue.Message)
	}

	// The legacy annotation decides the class, as in the API server's resize admission.
	legacy := claim("data-db-6", "1Gi", "1Gi", nil, corev1.ClaimBound)
	legacy.Annotations = map[string]string{corev1.BetaStorageClassAnnotation: "grows"}
	if ue := notExpandable([]corev1.PersistentVolumeClaim{legacy}, []string{"data-db-6"}, classes, from, want); ue != nil {
		t.Errorf("a claim of an expandable class by annotation reported: %v", ue)
	}
}

func TestVolumeProgress(t *testing.T) {
	want := resource.MustParse("2Gi")
	if done, msg := volumeProgress(nil, want); !done || msg != "" {
		t.Errorf("no claims: %v %q", done, msg)
	}
	grown := []corev1.PersistentVolumeClaim{
		claim("data-db-0", "2Gi", "2Gi", nil, corev1.ClaimBound),
		claim("data-db-1", "2Gi", "3Gi", nil, corev1.ClaimBound),
	}
	if done, msg := volumeProgress(grown, want); !done || msg != "" {
		t.Errorf("grown claims: %v %q", done, msg)
	}
	resizing := claim("data-db-2", "2Gi", "1Gi", nil, corev1.ClaimBound)
	resizing.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{
		Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue}}
	pending := append(grown, claim("data-db-3", "2Gi", "", nil, corev1.ClaimPending), resizing)
	done, msg := volumeProgress(pending, want)
	if done {
		t.Fatal("claims below the size reported done")
	}
	wantMsg := "expanding data volumes to 2Gi: data-db-2 (1Gi, file system resize pending), data-db-3 (no capacity yet); " +
		"the node grows a pending file system when the volume is next mounted (some drivers need a pod restart)"
	if msg != wantMsg {
		t.Errorf("message\n%q, want\n%q", msg, wantMsg)
	}
}

func TestVolumeCapacityOf(t *testing.T) {
	claims := []corev1.PersistentVolumeClaim{
		claim("data-db-0", "2Gi", "2Gi", nil, corev1.ClaimBound),
		claim("data-db-1", "2Gi", "", nil, corev1.ClaimPending),
	}
	if q := volumeCapacityOf(claims, "db-0"); q == nil || q.String() != "2Gi" {
		t.Errorf("db-0: %v", q)
	}
	for _, pod := range []string{"db-1", "db-2"} {
		if q := volumeCapacityOf(claims, pod); q != nil {
			t.Errorf("%s: %v, want nil", pod, q)
		}
	}
}

func TestClaimToCluster(t *testing.T) {
	c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "n"}}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "data-db-1", Labels: resources.SelectorLabels(c)}}
	reqs := claimToCluster(context.Background(), pvc)
	if len(reqs) != 1 || reqs[0].Namespace != "n" || reqs[0].Name != "db" {
		t.Errorf("requests %v", reqs)
	}
	pvc.Name = "scratch"
	if reqs := claimToCluster(context.Background(), pvc); len(reqs) != 0 {
		t.Errorf("another claim with the labels mapped: %v", reqs)
	}
	pvc.Name, pvc.Labels = "data-db-1", nil
	if reqs := claimToCluster(context.Background(), pvc); len(reqs) != 0 {
		t.Errorf("an unlabeled claim mapped: %v", reqs)
	}
}

// TestStorageNotExpandableStatusIsStable: while the cluster waits for the user to fix the
// StorageClass, every reconcile computes the same status (no condition moves its
// lastTransitionTime), so it writes nothing and its own status write triggers no further
// reconcile.
func TestStorageNotExpandableStatusIsStable(t *testing.T) {
	ue := notExpandable([]corev1.PersistentVolumeClaim{claim("data-db-0", "1Gi", "1Gi", ptr.To("fixed"), corev1.ClaimBound)},
		[]string{"data-db-0"}, map[string]*storagev1.StorageClass{"fixed": {}}, resource.MustParse("1Gi"), resource.MustParse("2Gi"))
	for _, sts := range []struct {
		name string
		sts  *appsv1.StatefulSet
	}{
		{"StatefulSet settled", &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{Replicas: 1, UpdatedReplicas: 1}}},
		{"StatefulSet rolling out", &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 2}}},
	} {
		t.Run(sts.name, func(t *testing.T) {
			o := observation{Generation: 2, Replicas: 1, StatefulSet: sts.sts, StepErr: ue}
			first := computeStatus(o, metav1.NewTime(time.Unix(1000, 0)))
			o.Previous = first
			second := computeStatus(o, metav1.NewTime(time.Unix(2000, 0)))
			for _, c := range second.Conditions {
				if was := meta.FindStatusCondition(first.Conditions, c.Type); was == nil || !was.LastTransitionTime.Equal(&c.LastTransitionTime) {
					t.Errorf("condition %s moved its lastTransitionTime on a reconcile that changed nothing (computeStatus sets it "+
						"twice, to different statuses): every reconcile writes the status", c.Type)
				}
			}
			if c := meta.FindStatusCondition(second.Conditions, dolphinv1.ConditionReady); c == nil || c.Reason != reasonStorageNotExpandable {
				t.Errorf("Ready %+v", c)
			}
		})
	}
}

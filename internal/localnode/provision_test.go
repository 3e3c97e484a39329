package localnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// startProvisioner starts envtest and only the node's provisioner (no pods, so no root),
// stopping both when the test ends.
func startProvisioner(t *testing.T) kubernetes.Interface {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a control plane; skipped under -short")
	}
	setAssets(t)
	env := testenv.StartForTest(t)
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runProvisioner(ctx, client, Options{NodeName: testNode, Dir: t.TempDir(), Log: testr.New(t)})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runProvisioner: %v", err)
		}
	})
	testenv.Eventually(t, 10*time.Second, "storage class created", func() error {
		_, err := client.StorageV1().StorageClasses().Get(ctx, StorageClass, metav1.GetOptions{})
		return err
	})
	return client
}

// setAssets points KUBEBUILDER_ASSETS at the control plane hack/control-plane.sh builds.
func setAssets(t *testing.T) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") != "" {
		return
	}
	out, err := exec.Command("../../hack/control-plane.sh", "--print").Output()
	if err != nil {
		t.Fatalf("finding the control-plane binaries: %v", err)
	}
	t.Setenv("KUBEBUILDER_ASSETS", strings.TrimSpace(string(out)))
}

// standInPVController marks a claim and its volume Bound with the volume's capacity, as
// the controller manager's PV controller does (envtest runs none).
func standInPVController(t *testing.T, client kubernetes.Interface, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	ctx := context.Background()
	var pvc *corev1.PersistentVolumeClaim
	testenv.Eventually(t, 10*time.Second, name+" provisioned", func() error {
		var err error
		if pvc, err = client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if pvc.Spec.VolumeName == "" {
			return fmt.Errorf("no volume yet")
		}
		return nil
	})
	pv, err := client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Status.Phase = corev1.VolumeBound
	if _, err := client.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: pv.Spec.AccessModes, Capacity: pv.Spec.Capacity}
	if pvc, err = client.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return pvc
}

func growClaim(client kubernetes.Interface, ns, name, size string) error {
	patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, size)
	_, err := client.CoreV1().PersistentVolumeClaims(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func newClaim(t *testing.T, client kubernetes.Interface, ns, name string, class *string) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestProvisionerExpandsClaims grows a claim that names no class: the default class
// dolphin-local is given to it at creation, the API server accepts the larger request
// because the class allows expansion, and the provisioner grows the PV and reports the
// claim's capacity. A claim explicitly without a class cannot grow (the API server's
// resize admission refuses it), which is why dolphin-local is the default class.
func TestProvisionerExpandsClaims(t *testing.T) {
	client := startProvisioner(t)
	ctx := context.Background()
	ns := "default"
	sc, err := client.StorageV1().StorageClasses().Get(ctx, StorageClass, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !ptr.Deref(sc.AllowVolumeExpansion, false) || sc.Annotations[defaultClassAnnotation] != "true" {
		t.Fatalf("storage class: allowVolumeExpansion %v, annotations %v; want expansion and default", sc.AllowVolumeExpansion, sc.Annotations)
	}

	newClaim(t, client, ns, "data-db-0", nil)
	pvc := standInPVController(t, client, ns, "data-db-0")
	if got := ptr.Deref(pvc.Spec.StorageClassName, ""); got != StorageClass {
		t.Fatalf("a claim without a class got class %q, want the default %q", got, StorageClass)
	}
	if err := growClaim(client, ns, pvc.Name, "2Gi"); err != nil {
		t.Fatalf("growing the claim: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "volume expanded", func() error {
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pvCap, claimCap := pv.Spec.Capacity[corev1.ResourceStorage], got.Status.Capacity[corev1.ResourceStorage]
		if pvCap.String() != "2Gi" || claimCap.String() != "2Gi" {
			return fmt.Errorf("PV capacity %s, claim capacity %s", pvCap.String(), claimCap.String())
		}
		return nil
	})

	// Explicitly no class: provisioned, but the API server refuses to grow it.
	newClaim(t, client, ns, "static", ptr.To(""))
	standInPVController(t, client, ns, "static")
	if err := growClaim(client, ns, "static", "2Gi"); !apierrors.IsForbidden(err) {
		t.Errorf("growing a claim without a class: %v, want Forbidden from the resize admission", err)
	}
}

// TestEnsureStorageClassUpdatesAnOlderClass: a class made by an older node gains volume
// expansion and becomes the default; another default class is left the default.
func TestEnsureStorageClassUpdatesAnOlderClass(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane; skipped under -short")
	}
	setAssets(t)
	env := testenv.StartForTest(t)
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	classes := client.StorageV1().StorageClasses()
	old := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: StorageClass}, Provisioner: provisionerName,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	if _, err := classes.Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second run changes nothing
		if err := ensureStorageClass(ctx, client); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := classes.Get(ctx, StorageClass, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !ptr.Deref(sc.AllowVolumeExpansion, false) || sc.Annotations[defaultClassAnnotation] != "true" {
		t.Errorf("updated class: allowVolumeExpansion %v, annotations %v", sc.AllowVolumeExpansion, sc.Annotations)
	}

	// Another class is the default: ours is created expandable but not default.
	if err := classes.Delete(ctx, StorageClass, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	other := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard",
		Annotations: map[string]string{defaultClassAnnotation: "true"}}, Provisioner: "example.com/other"}
	if _, err := classes.Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ensureStorageClass(ctx, client); err != nil {
		t.Fatal(err)
	}
	if sc, err = classes.Get(ctx, StorageClass, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if !ptr.Deref(sc.AllowVolumeExpansion, false) || sc.Annotations[defaultClassAnnotation] == "true" {
		t.Errorf("class next to another default: allowVolumeExpansion %v, annotations %v", sc.AllowVolumeExpansion, sc.Annotations)
	}
}

func TestNeedsExpansion(t *testing.T) {
	q := resource.MustParse
	for _, tc := range []struct {
		request, volume, reported string
		want                      string // "" = nothing to do
	}{
		{"1Gi", "1Gi", "1Gi", ""},
		{"2Gi", "1Gi", "1Gi", "2Gi"},
		{"2Gi", "2Gi", "1Gi", "2Gi"}, // the PV grew, the claim's report did not yet
		{"2Gi", "3Gi", "1Gi", "3Gi"}, // never report less than the volume holds
		{"1Gi", "2Gi", "2Gi", ""},    // never shrinks
		{"1024Mi", "1Gi", "1Gi", ""}, // same size in other units
	} {
		pvc := &corev1.PersistentVolumeClaim{
			Spec:   corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q(tc.request)}}},
			Status: corev1.PersistentVolumeClaimStatus{Capacity: corev1.ResourceList{corev1.ResourceStorage: q(tc.reported)}},
		}
		pv := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{Capacity: corev1.ResourceList{corev1.ResourceStorage: q(tc.volume)}}}
		size, ok := needsExpansion(pvc, pv)
		if got := map[bool]string{true: size.String(), false: ""}[ok]; got != tc.want {
			t.Errorf("request %s, volume %s, reported %s: %q, want %q", tc.request, tc.volume, tc.reported, got, tc.want)
		}
	}
}

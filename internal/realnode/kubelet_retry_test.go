package realnode

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// kubeletRetriesOnAnAnnotation checks, on a real kubelet, what the operator's pod-start step
// (internal/controller/cluster_pod_start.go) relies on. Two pods are bound to the node with a
// claim that is not Bound yet, so the kubelet's first sync of each fails ("PVC is not bound")
// and sets it aside for its pod-sync back-off (10–15 s). Then each claim is bound to a volume,
// and only the first pod gets KubeletRetryAnnotation. It must have its sandbox soon after; the
// other, left alone, only after the back-off: the premise (a set-aside pod waits 10 s or more
// after the race closed) and the remedy (an annotation change makes the kubelet sync at once).
func kubeletRetriesOnAnAnnotation(ctx context.Context, t *testing.T, cs kubernetes.Interface, image, dir string) {
	t.Helper()
	const ns = "default"
	// A retried pod's sandbox takes ~1–3 s after the annotation; one left to the back-off at
	// least ~9 s after its failure was seen (10 s less the time its event took to be seen).
	const between = 7 * time.Second
	names := []string{"retried", "left"}
	claimUIDs := map[string]types.UID{}
	t.Cleanup(func() {
		for _, name := range names {
			_ = cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			_ = cs.CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
			_ = cs.CoreV1().PersistentVolumes().Delete(context.Background(), "pv-"+name, metav1.DeleteOptions{})
		}
	})
	for _, name := range names {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(""), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}}},
		}
		created, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		claimUIDs[name] = created.UID
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				NodeName: "test-node", // past the scheduler, which would wait for the claim
				Containers: []corev1.Container{{Name: "c", Image: image, ImagePullPolicy: corev1.PullNever,
					Command: []string{"sleep", "3600"}, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
				TerminationGracePeriodSeconds: ptr.To[int64](0),
			},
		}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	failed := map[string]time.Time{}
	testenv.Eventually(t, 60*time.Second, "the kubelet's first sync of both pods failed on the claim", func() error {
		for _, name := range names {
			if _, ok := failed[name]; ok {
				continue
			}
			evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=FailedMount"})
			if err != nil {
				return err
			}
			if len(evs.Items) == 0 {
				return fmt.Errorf("no FailedMount event for %s yet", name)
			}
			failed[name] = time.Now()
			t.Logf("%s: %s", name, evs.Items[0].Message)
		}
		return nil
	})
	for _, name := range names {
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name},
			Spec: corev1.PersistentVolumeSpec{
				StorageClassName: "", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				// With the claim's UID the volume controller binds the claim at once, not at
				// its next periodic resync (15 s).
				ClaimRef: &corev1.ObjectReference{Namespace: ns, Name: name, UID: claimUIDs[name]},
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: filepath.Join(dir, "pv-"+name), Type: ptr.To(corev1.HostPathDirectoryOrCreate)}},
			},
		}
		if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "both claims Bound", func() error {
		for _, name := range names {
			pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if pvc.Status.Phase != corev1.ClaimBound {
				return fmt.Errorf("%s: %s", name, pvc.Status.Phase)
			}
		}
		return nil
	})
	patched := time.Now()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, resources.KubeletRetryAnnotation, patched.UTC().Format(time.RFC3339Nano))
	if _, err := cs.CoreV1().Pods(ns).Patch(ctx, "retried", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := map[string]time.Time{}
	testenv.Eventually(t, 60*time.Second, "both sandboxes ready", func() error {
		for _, name := range names {
			if _, ok := ready[name]; ok {
				continue
			}
			p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReadyToStartContainers && c.Status == corev1.ConditionTrue {
					ready[name] = time.Now()
				}
			}
			if _, ok := ready[name]; !ok {
				return fmt.Errorf("%s: sandbox not ready", name)
			}
		}
		return nil
	})
	retried, left := ready["retried"].Sub(patched), ready["left"].Sub(failed["left"])
	t.Logf("sandbox ready %.1fs after the annotation (%.1fs after its failure was seen); the pod left alone %.1fs after its failure was seen",
		retried.Seconds(), ready["retried"].Sub(failed["retried"]).Seconds(), left.Seconds())
	if retried >= between {
		t.Errorf("the annotated pod's sandbox was ready %.1fs after the annotation: the annotation did not make the kubelet sync at once", retried.Seconds())
	}
	if left < between {
		t.Errorf("the pod left alone had its sandbox %.1fs after its failure: no back-off seen, so this check proves nothing about the annotation", left.Seconds())
	}
}

package localnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

const (
	// StorageClass is the storage class the local node provisions (as well as
	// claims without a class). Run creates it when missing (not as default).
	StorageClass = "dolphin-local"
	// provisionerName is StorageClass's provisioner.
	provisionerName = "dolphin.dev/local-node"
	// provisionedBy annotates the PVs the node created, with the node's name.
	provisionedBy = "dolphin.dev/provisioned-by"
	// provisionResync retries anything a failed call left undone.
	provisionResync = 30 * time.Second
)

// runProvisioner gives every pending claim without a class (or of class
// StorageClass) a PV: a host folder Dir/volumes/<claim-uid>, bound to the
// claim both ways (PV claimRef and claim volumeName; the controller manager's
// PV controller then marks both Bound). When the claim is gone, its PV and
// folder are deleted. A hand-written loop: sig-storage-lib-external-provisioner
// would move k8s.io dependencies, and waits for the controller manager's
// provisioning annotation, which envtest does not run.
func runProvisioner(ctx context.Context, client kubernetes.Interface, opts Options) error {
	if err := ensureStorageClass(ctx, client); err != nil {
		return err
	}
	f := informers.NewSharedInformerFactory(client, provisionResync)
	claims := f.Core().V1().PersistentVolumeClaims()
	volumes := f.Core().V1().PersistentVolumes()
	pr := &provisioner{client: client, opts: opts, claims: claims.Informer().GetIndexer()}
	handler := func(fn func(context.Context, any)) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { fn(ctx, o) },
			UpdateFunc: func(_, o any) { fn(ctx, o) },
		}
	}
	if _, err := claims.Informer().AddEventHandler(handler(pr.syncClaim)); err != nil {
		return fmt.Errorf("localnode: provisioner: %w", err)
	}
	if _, err := volumes.Informer().AddEventHandler(handler(pr.syncVolume)); err != nil {
		return fmt.Errorf("localnode: provisioner: %w", err)
	}
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
	return nil
}

func ensureStorageClass(ctx context.Context, client kubernetes.Interface) error {
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClass},
		Provisioner:       provisionerName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}
	_, err := client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("localnode: creating storage class %s: %w", StorageClass, err)
	}
	return nil
}

type provisioner struct {
	client kubernetes.Interface
	opts   Options
	claims cache.Indexer
}

// syncClaim provisions a volume for a pending claim the node serves.
func (pr *provisioner) syncClaim(ctx context.Context, obj any) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil {
		return
	}
	if class := ptr.Deref(pvc.Spec.StorageClassName, ""); class != "" && class != StorageClass {
		return
	}
	if err := pr.provision(ctx, pvc); err != nil {
		pr.opts.Log.Error(err, "provisioning", "claim", pvc.Namespace+"/"+pvc.Name)
	}
}

func (pr *provisioner) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	dir := filepath.Join(volumesDir(pr.opts.Dir), string(pvc.UID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if size.IsZero() {
		size = resource.MustParse("1Gi")
	}
	modes := pvc.Spec.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "pvc-" + string(pvc.UID),
			Annotations: map[string]string{provisionedBy: pr.opts.NodeName},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   modes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain, // deleted by syncVolume
			StorageClassName:              ptr.Deref(pvc.Spec.StorageClassName, ""),
			VolumeMode:                    pvc.Spec.VolumeMode,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr.To(corev1.HostPathDirectory)},
			},
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{pr.opts.NodeName},
				}}}},
			}},
		},
	}
	if _, err := pr.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil &&
		!apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating PV: %w", err)
	}
	// Bind the claim to it (the PV controller does the same once it sees the
	// PV's claimRef; whoever is first wins, the other sees it done).
	patch := fmt.Sprintf(`{"spec":{"volumeName":%q}}`, pv.Name)
	_, err := pr.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name,
		types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
		return fmt.Errorf("binding claim: %w", err)
	}
	return nil
}

// syncVolume deletes a PV this node provisioned, and its folder, once its
// claim is gone.
func (pr *provisioner) syncVolume(ctx context.Context, obj any) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Annotations[provisionedBy] != pr.opts.NodeName || pv.Spec.ClaimRef == nil || pv.DeletionTimestamp != nil {
		return
	}
	ref := pv.Spec.ClaimRef
	item, exists, err := pr.claims.GetByKey(ref.Namespace + "/" + ref.Name)
	if err != nil {
		return
	}
	if exists && item.(*corev1.PersistentVolumeClaim).UID == ref.UID {
		return
	}
	// The informer may lag: confirm with the API server before deleting data.
	pvc, err := pr.client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err == nil && pvc.UID == ref.UID {
		return
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return
	}
	if err := pr.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{}); err != nil &&
		!apierrors.IsNotFound(err) {
		pr.opts.Log.Error(err, "deleting released volume", "pv", pv.Name)
		return
	}
	if pv.Spec.HostPath != nil && filepath.Dir(pv.Spec.HostPath.Path) == volumesDir(pr.opts.Dir) {
		if err := os.RemoveAll(pv.Spec.HostPath.Path); err != nil {
			pr.opts.Log.Error(err, "removing released volume's folder", "pv", pv.Name)
		}
	}
}

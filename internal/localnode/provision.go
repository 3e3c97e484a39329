package localnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

const (
	// StorageClass is the storage class the local node provisions (as well as
	// claims without a class). Run creates it when missing, with volume
	// expansion allowed, as the default class unless another class is default.
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
// PV controller then marks both Bound). When a bound claim's request grows
// past its PV's capacity, it expands the volume (see expand). When the claim
// is gone, its PV and folder are deleted. A hand-written loop:
// sig-storage-lib-external-provisioner would move k8s.io dependencies, and
// waits for the controller manager's provisioning annotation, which envtest
// does not run.
func runProvisioner(ctx context.Context, client kubernetes.Interface, opts Options) error {
	if err := ensureStorageClass(ctx, client); err != nil {
		return err
	}
	f := informers.NewSharedInformerFactory(client, provisionResync)
	claims := f.Core().V1().PersistentVolumeClaims()
	volumes := f.Core().V1().PersistentVolumes()
	pr := &provisioner{client: client, opts: opts, claims: claims.Informer().GetIndexer(),
		volumes: volumes.Informer().GetIndexer()}
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

// RunProvisioner runs the node's provisioner alone, beside a real kubelet (realnode): claims
// of StorageClass and SizedStorageClass get local volumes in opts.Dir/volumes. ready, when set,
// is called once the storage classes exist. Sized volumes whose file system is not mounted (the
// host restarted) are mounted again first. Blocks until ctx is done.
func RunProvisioner(ctx context.Context, opts Options, ready func()) error {
	if opts.NodeName == "" || opts.Dir == "" {
		return errors.New("localnode: provisioner: NodeName and Dir are required")
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	cfg := opts.RESTConfig
	if cfg == nil {
		var err error
		if cfg, err = clientcmd.BuildConfigFromFlags("", opts.Kubeconfig); err != nil {
			return fmt.Errorf("localnode: loading kubeconfig %s: %w", opts.Kubeconfig, err)
		}
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("localnode: building client: %w", err)
	}
	if err := os.MkdirAll(volumesDir(opts.Dir), 0o755); err != nil {
		return fmt.Errorf("localnode: %w", err)
	}
	if err := remountSized(ctx, client, opts); err != nil {
		return err
	}
	if err := ensureStorageClass(ctx, client); err != nil {
		return err
	}
	if ready != nil {
		ready()
	}
	return runProvisioner(ctx, client, opts)
}

// remountSized mounts again the file systems of the sized volumes this node provisioned
// (after a restart of the host their folders are empty mount points).
func remountSized(ctx context.Context, client kubernetes.Interface, opts Options) error {
	pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("localnode: listing volumes: %w", err)
	}
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		path := volumePath(pv)
		if pv.Annotations[provisionedBy] != opts.NodeName || pv.Annotations[sizedImageAnnotation] == "" || path == "" {
			continue
		}
		size := pv.Spec.Capacity[corev1.ResourceStorage]
		if err := mountSized(path, size.Value()); err != nil {
			return fmt.Errorf("localnode: mounting the sized volume %s: %w", pv.Name, err)
		}
	}
	return nil
}

// defaultClassAnnotation marks the cluster's default StorageClass: the API
// server's DefaultStorageClass admission gives it to claims that name none.
const defaultClassAnnotation = "storageclass.kubernetes.io/is-default-class"

// ensureStorageClass creates StorageClass, or brings an existing one up to
// date. It allows volume expansion: the API server lets a claim's request grow
// only when its class says so. It is the default class unless another class
// is, so that claims without a class (Dolphin's, unless
// spec.storage.storageClassName is set) get it and can grow: the API server
// never expands a claim without a class.
func ensureStorageClass(ctx context.Context, client kubernetes.Interface) error {
	classes, err := client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("localnode: listing storage classes: %w", err)
	}
	var ours *storagev1.StorageClass
	otherDefault := false
	for i := range classes.Items {
		sc := &classes.Items[i]
		if sc.Name == StorageClass {
			ours = sc
		} else if sc.Annotations[defaultClassAnnotation] == "true" {
			otherDefault = true
		}
	}
	if err := ensureSizedStorageClass(ctx, client); err != nil {
		return err
	}
	if ours == nil {
		sc := &storagev1.StorageClass{
			ObjectMeta:           metav1.ObjectMeta{Name: StorageClass},
			Provisioner:          provisionerName,
			ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimDelete),
			VolumeBindingMode:    ptr.To(storagev1.VolumeBindingImmediate),
			AllowVolumeExpansion: ptr.To(true),
		}
		if !otherDefault {
			sc.Annotations = map[string]string{defaultClassAnnotation: "true"}
		}
		_, err := client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
		switch {
		case err == nil:
			return nil
		case !apierrors.IsAlreadyExists(err):
			return fmt.Errorf("localnode: creating storage class %s: %w", StorageClass, err)
		}
		// Created meanwhile: bring that one up to date.
		if ours, err = client.StorageV1().StorageClasses().Get(ctx, StorageClass, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("localnode: reading storage class %s: %w", StorageClass, err)
		}
	}
	// A class from an older node: allow expansion, and become the default.
	if ptr.Deref(ours.AllowVolumeExpansion, false) && (otherDefault || ours.Annotations[defaultClassAnnotation] == "true") {
		return nil
	}
	patch := map[string]any{"allowVolumeExpansion": true}
	if !otherDefault {
		patch["metadata"] = map[string]any{"annotations": map[string]string{defaultClassAnnotation: "true"}}
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("localnode: encoding the storage class patch: %w", err)
	}
	if _, err := client.StorageV1().StorageClasses().Patch(ctx, StorageClass, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("localnode: updating storage class %s: %w", StorageClass, err)
	}
	return nil
}

// ours reports whether StorageClass class names this node's provisioner: a class a user made
// (another reclaim policy, no volume expansion) is served like the node's own.
func (pr *provisioner) ours(ctx context.Context, class string) bool {
	sc, err := pr.client.StorageV1().StorageClasses().Get(ctx, class, metav1.GetOptions{})
	return err == nil && sc.Provisioner == provisionerName
}

type provisioner struct {
	client  kubernetes.Interface
	opts    Options
	claims  cache.Indexer
	volumes cache.Indexer
}

// syncClaim provisions a volume for a pending claim the node serves, and
// expands the volume of a bound one whose request grew.
func (pr *provisioner) syncClaim(ctx context.Context, obj any) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || pvc.DeletionTimestamp != nil {
		return
	}
	if class := ptr.Deref(pvc.Spec.StorageClassName, ""); class != "" && class != StorageClass && class != SizedStorageClass && !pr.ours(ctx, class) {
		return
	}
	if pvc.Spec.VolumeName != "" {
		if err := pr.expand(ctx, pvc); err != nil {
			pr.opts.Log.Error(err, "expanding", "claim", pvc.Namespace+"/"+pvc.Name)
		}
		return
	}
	if err := pr.provision(ctx, pvc); err != nil {
		pr.opts.Log.Error(err, "provisioning", "claim", pvc.Namespace+"/"+pvc.Name)
	}
}

// expand grows the volume of a bound claim to its request, as a CSI driver's
// resizer and the kubelet would: the PV's capacity first, then the claim's
// status.capacity. The volume is a host folder, so there is nothing to resize
// on disk (its size is the host file system's). The controller manager's
// expand controller leaves hostPath volumes to an external resizer: this one.
func (pr *provisioner) expand(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Status.Phase != corev1.ClaimBound {
		return nil
	}
	item, exists, err := pr.volumes.GetByKey(pvc.Spec.VolumeName)
	if err != nil || !exists {
		return err // the informers' resync retries
	}
	pv := item.(*corev1.PersistentVolume)
	if pv.Annotations[provisionedBy] != pr.opts.NodeName || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		return nil
	}
	size, ok := needsExpansion(pvc, pv)
	if !ok {
		return nil
	}
	if path := volumePath(pv); pv.Annotations[sizedImageAnnotation] != "" && path != "" {
		if err := growSized(path, size.Value()); err != nil {
			return fmt.Errorf("growing the file system of PV %s: %w", pv.Name, err)
		}
	}
	if current := pv.Spec.Capacity[corev1.ResourceStorage]; current.Cmp(size) < 0 {
		patch := fmt.Sprintf(`{"spec":{"capacity":{"storage":%q}}}`, size.String())
		if _, err := pr.client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, []byte(patch),
			metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("growing PV %s to %s: %w", pv.Name, size.String(), err)
		}
	}
	patch := fmt.Sprintf(`{"status":{"capacity":{"storage":%q}}}`, size.String())
	if _, err := pr.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType,
		[]byte(patch), metav1.PatchOptions{}, "status"); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reporting the claim's capacity %s: %w", size.String(), err)
	}
	pr.opts.Log.Info("expanded volume", "claim", pvc.Namespace+"/"+pvc.Name, "pv", pv.Name, "size", size.String())
	return nil
}

// needsExpansion returns the size a bound claim's volume must grow to, when
// its request exceeds the PV's capacity or the claim's reported capacity.
func needsExpansion(pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) (resource.Quantity, bool) {
	want := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	volume := pv.Spec.Capacity[corev1.ResourceStorage]
	reported := pvc.Status.Capacity[corev1.ResourceStorage]
	if want.Cmp(volume) <= 0 && want.Cmp(reported) <= 0 {
		return resource.Quantity{}, false
	}
	if volume.Cmp(want) > 0 {
		want = volume // never report less than the volume has
	}
	return want, true
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
	annotations := map[string]string{provisionedBy: pr.opts.NodeName}
	if ptr.Deref(pvc.Spec.StorageClassName, "") == SizedStorageClass {
		if err := mountSized(dir, size.Value()); err != nil {
			return err
		}
		annotations[sizedImageAnnotation] = sizedImage(dir)
	}
	modes := pvc.Spec.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "pvc-" + string(pvc.UID),
			Annotations: annotations,
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   modes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain, // deleted by syncVolume
			StorageClassName:              ptr.Deref(pvc.Spec.StorageClassName, ""),
			VolumeMode:                    pvc.Spec.VolumeMode,
			PersistentVolumeSource:        pr.volumeSource(dir),
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

// volumeSource is a host folder: a local volume for a real kubelet (which then gives the
// folder to the pod's fsGroup, as on a cluster's local storage), a hostPath one for the
// host-process node (which applies the fsGroup itself).
func (pr *provisioner) volumeSource(dir string) corev1.PersistentVolumeSource {
	if pr.opts.LocalVolumes {
		return corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}}
	}
	return corev1.PersistentVolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr.To(corev1.HostPathDirectory)},
	}
}

// volumePath is the host folder of a PV this provisioner made ("" for another kind).
func volumePath(pv *corev1.PersistentVolume) string {
	switch {
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path
	case pv.Spec.Local != nil:
		return pv.Spec.Local.Path
	}
	return ""
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
	if path := volumePath(pv); path != "" && filepath.Dir(path) == volumesDir(pr.opts.Dir) {
		remove := os.RemoveAll
		if pv.Annotations[sizedImageAnnotation] != "" {
			remove = removeSized
		}
		if err := remove(path); err != nil {
			pr.opts.Log.Error(err, "removing released volume's folder", "pv", pv.Name)
		}
	}
}

// ensureSizedStorageClass creates SizedStorageClass when missing (never the default class).
func ensureSizedStorageClass(ctx context.Context, client kubernetes.Interface) error {
	sc := &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: SizedStorageClass},
		Provisioner:          provisionerName,
		ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode:    ptr.To(storagev1.VolumeBindingImmediate),
		AllowVolumeExpansion: ptr.To(true),
	}
	if _, err := client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil &&
		!apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("localnode: creating storage class %s: %w", SizedStorageClass, err)
	}
	return nil
}

package localnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// errNotReady marks a volume whose source is not there yet (a PVC not bound, a
// missing configMap): the pod waits and retries, as the kubelet does.
type errNotReady struct{ err error }

func (e errNotReady) Error() string { return e.err.Error() }
func (e errNotReady) Unwrap() error { return e.err }

// prepareVolumes makes every volume of pod available on the host and returns
// the host path of each, by volume name:
//   - emptyDir:               podDir/volumes/<name> (removed with the pod)
//   - configMap, secret,
//     downwardAPI:            podDir/volumes/<name>, files written at pod start
//     and rewritten atomically when a configMap or secret changes (refreshVolumes)
//   - persistentVolumeClaim:  the bound PV's hostPath (or local) folder
//   - hostPath:               the path itself
//
// fsGroup, when set, becomes the group of emptyDir and PVC folders (group
// read-write, set-gid directories) and of the materialised files.
func prepareVolumes(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, podDir string) (map[string]string, error) {
	var fsGroup *int64
	if pod.Spec.SecurityContext != nil {
		fsGroup = pod.Spec.SecurityContext.FSGroup
	}
	paths := make(map[string]string, len(pod.Spec.Volumes))
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(podDir, "volumes", v.Name)
		var err error
		switch {
		case v.EmptyDir != nil:
			err = os.MkdirAll(dir, 0o777)
			if err == nil {
				err = os.Chmod(dir, 0o777) // as the kubelet creates them
			}
		case v.ConfigMap != nil:
			err = configMapFiles(ctx, client, pod.Namespace, v.ConfigMap, dir)
		case v.Secret != nil:
			err = secretFiles(ctx, client, pod.Namespace, v.Secret, dir)
		case v.DownwardAPI != nil:
			err = downwardAPIFiles(pod, v.DownwardAPI, dir)
		case v.PersistentVolumeClaim != nil:
			dir, err = claimPath(ctx, client, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
		case v.HostPath != nil:
			dir = v.HostPath.Path
			if t := v.HostPath.Type; t != nil && (*t == corev1.HostPathDirectoryOrCreate) {
				err = os.MkdirAll(dir, 0o755)
			}
		default:
			err = fmt.Errorf("volume %q: this volume type is not supported by the local node", v.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		if fsGroup != nil && (v.EmptyDir != nil || v.PersistentVolumeClaim != nil) {
			if err := applyFSGroup(dir, int(*fsGroup)); err != nil {
				return nil, fmt.Errorf("volume %q: fsGroup: %w", v.Name, err)
			}
		}
		if fsGroup != nil && (v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil) {
			if err := chownTree(dir, int(*fsGroup)); err != nil {
				return nil, fmt.Errorf("volume %q: fsGroup: %w", v.Name, err)
			}
		}
		paths[v.Name] = dir
	}
	return paths, nil
}

// claimPath returns the folder of the PV bound to the claim.
func claimPath(ctx context.Context, client kubernetes.Interface, ns, name string) (string, error) {
	pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", errNotReady{fmt.Errorf("claim %s: %w", name, err)}
	}
	if pvc.Spec.VolumeName == "" {
		return "", errNotReady{fmt.Errorf("claim %s is not bound to a volume yet", name)}
	}
	pv, err := client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", errNotReady{fmt.Errorf("volume %s of claim %s: %w", pvc.Spec.VolumeName, name, err)}
	}
	var dir string
	switch {
	case pv.Spec.HostPath != nil && pv.Annotations[sizedImageAnnotation] != "":
		// Mounted again after a restart of the host; a no-op otherwise.
		capacity := pv.Spec.Capacity[corev1.ResourceStorage]
		dir = pv.Spec.HostPath.Path
		if err := mountSized(dir, capacity.Value()); err != nil {
			return "", fmt.Errorf("volume %s of claim %s: %w", pv.Name, name, err)
		}
	case pv.Spec.HostPath != nil:
		dir = pv.Spec.HostPath.Path
	case pv.Spec.Local != nil:
		dir = pv.Spec.Local.Path
	default:
		return "", fmt.Errorf("volume %s of claim %s: only hostPath and local volumes work on the local node", pv.Name, name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

func configMapFiles(ctx context.Context, client kubernetes.Interface, ns string, src *corev1.ConfigMapVolumeSource, dir string) error {
	data, err := configMapData(ctx, client, ns, src)
	if err != nil {
		return err
	}
	return writeFiles(dir, data, src.Items, src.DefaultMode)
}

// configMapData reads a configMap volume's source (nothing when it is optional and missing).
func configMapData(ctx context.Context, client kubernetes.Interface, ns string, src *corev1.ConfigMapVolumeSource) (map[string][]byte, error) {
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, src.Name, metav1.GetOptions{})
	if err != nil {
		if isOptional(src.Optional) && apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, errNotReady{fmt.Errorf("configMap %s: %w", src.Name, err)}
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return data, nil
}

func secretFiles(ctx context.Context, client kubernetes.Interface, ns string, src *corev1.SecretVolumeSource, dir string) error {
	data, err := secretData(ctx, client, ns, src)
	if err != nil {
		return err
	}
	return writeFiles(dir, data, src.Items, src.DefaultMode)
}

// secretData reads a secret volume's source (nothing when it is optional and missing).
func secretData(ctx context.Context, client kubernetes.Interface, ns string, src *corev1.SecretVolumeSource) (map[string][]byte, error) {
	s, err := client.CoreV1().Secrets(ns).Get(ctx, src.SecretName, metav1.GetOptions{})
	if err != nil {
		if isOptional(src.Optional) && apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, errNotReady{fmt.Errorf("secret %s: %w", src.SecretName, err)}
	}
	return s.Data, nil
}

// refreshVolumes rewrites the configMap and secret volumes of pod whose source changed since
// last time (digests, by volume name, kept in seen), as the kubelet keeps them in sync. A
// source that cannot be read is left as it is.
func refreshVolumes(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, podDir string, seen map[string]string) error {
	var errs []error
	for _, v := range pod.Spec.Volumes {
		var (
			data  map[string][]byte
			items []corev1.KeyToPath
			mode  *int32
			err   error
		)
		switch {
		case v.ConfigMap != nil:
			data, err = configMapData(ctx, client, pod.Namespace, v.ConfigMap)
			items, mode = v.ConfigMap.Items, v.ConfigMap.DefaultMode
		case v.Secret != nil:
			data, err = secretData(ctx, client, pod.Namespace, v.Secret)
			items, mode = v.Secret.Items, v.Secret.DefaultMode
		default:
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %q: %w", v.Name, err))
			continue
		}
		d := digest(data)
		if seen[v.Name] == d {
			continue
		}
		dir := filepath.Join(podDir, "volumes", v.Name)
		if err := writeFiles(dir, data, items, mode); err != nil {
			errs = append(errs, fmt.Errorf("volume %q: %w", v.Name, err))
			continue
		}
		if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
			if err := chownTree(dir, int(*sc.FSGroup)); err != nil {
				errs = append(errs, fmt.Errorf("volume %q: fsGroup: %w", v.Name, err))
				continue
			}
		}
		seen[v.Name] = d
	}
	return errors.Join(errs...)
}

// digest identifies a volume's content.
func digest(data map[string][]byte) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		fmt.Fprintf(h, "%d:%s%d:", len(k), k, len(data[k]))
		h.Write(data[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func downwardAPIFiles(pod *corev1.Pod, src *corev1.DownwardAPIVolumeSource, dir string) error {
	data := map[string][]byte{}
	var items []corev1.KeyToPath
	for _, it := range src.Items {
		if it.FieldRef == nil {
			return fmt.Errorf("%s: only fieldRef items are supported by the local node", it.Path)
		}
		v, err := fieldValue(pod, it.FieldRef.FieldPath)
		if err != nil {
			return err
		}
		data[it.Path] = []byte(v)
		items = append(items, corev1.KeyToPath{Key: it.Path, Path: it.Path, Mode: it.Mode})
	}
	return writeFiles(dir, data, items, src.DefaultMode)
}

// writeFiles writes data into dir the way the kubelet's atomic writer does: the files go into
// a fresh folder dir/..<random>, dir/..data is a symlink to it (replaced atomically on every
// write), and each top-level path is a symlink through ..data. A reader sees the old set of
// files or the new one, never a mix (a certificate and its key, say), and a bind mount of dir
// keeps working across updates. Every key becomes a file, or only items (key -> path) when
// given. Modes: the item's, else defaultMode, else 0644.
func writeFiles(dir string, data map[string][]byte, items []corev1.KeyToPath, defaultMode *int32) error {
	mode := fs.FileMode(0o644)
	if defaultMode != nil {
		mode = fs.FileMode(*defaultMode)
	}
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		if _, ok := data[it.Key]; !ok {
			return fmt.Errorf("no key %q", it.Key)
		}
		if strings.Contains(it.Path, "..") || filepath.IsAbs(it.Path) {
			return fmt.Errorf("path %q must be relative and must not contain '..'", it.Path)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	payload, err := os.MkdirTemp(dir, "..")
	if err != nil {
		return err
	}
	if err := os.Chmod(payload, 0o755); err != nil {
		return err
	}
	top := map[string]bool{}
	for _, it := range items {
		m := mode
		if it.Mode != nil {
			m = fs.FileMode(*it.Mode)
		}
		p := filepath.Join(payload, it.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data[it.Key], m); err != nil {
			return err
		}
		if err := os.Chmod(p, m); err != nil { // WriteFile's mode is masked by the umask
			return err
		}
		top[strings.SplitN(filepath.ToSlash(filepath.Clean(it.Path)), "/", 2)[0]] = true
	}
	// Swap ..data to the new payload in one rename.
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(payload), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == "..data":
		case strings.HasPrefix(name, ".."):
			if name != filepath.Base(payload) {
				if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
					return err
				}
			}
		case !top[name] || e.Type()&fs.ModeSymlink == 0:
			// Gone from the source, or a file of an older layout.
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join("..data", name) {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			return err
		}
	}
	return nil
}

// applyFSGroup gives gid every file under dir, with group read-write (and
// execute on directories, set-gid so new files inherit the group), when the
// top folder's group is not gid yet (fsGroupChangePolicy OnRootMismatch).
func applyFSGroup(dir string, gid int) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Gid) == gid {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		if err := os.Lchown(p, -1, gid); err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		m := fi.Mode().Perm() | 0o060
		if d.IsDir() {
			m |= 0o010 | fs.ModeSetgid
		}
		return os.Chmod(p, m)
	})
}

// chownTree sets the group of everything under dir to gid.
func chownTree(dir string, gid int) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, -1, gid)
	})
}

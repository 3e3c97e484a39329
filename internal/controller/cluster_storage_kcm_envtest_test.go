package controller

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// startControllerManager runs kube-controller-manager (from KUBEBUILDER_ASSETS, built by
// hack/control-plane.sh) with only the given controllers against env until the test ends.
func startControllerManager(t *testing.T, env *testenv.Env, controllers string) {
	t.Helper()
	user, err := env.Environment.AddUser(envtest.User{Name: "kcm", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("kube-controller-manager not built (hack/control-plane.sh): %v", err)
	}
	logf, err := os.Create(filepath.Join(dir, "kcm.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--controllers="+controllers,
		"--leader-elect=false", "--secure-port=0", "--concurrent-gc-syncs=2")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("kube-controller-manager log (tail):\n%s", tailLines(string(b), 40))
		}
	})
}

func tailLines(s string, n int) string {
	lines := 0
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			if lines++; lines > n {
				return s[i+1:]
			}
		}
	}
	return s
}

// TestEnvtestStorageGrowthKeepsPodsWithControllerManager grows the volumes of a cluster
// whose StatefulSet, pods and claims are run by the real StatefulSet controller and garbage
// collector: the re-created StatefulSet adopts the same pods at the same revision.
func TestEnvtestStorageGrowthKeepsPodsWithControllerManager(t *testing.T) {
	needEnvtest(t)
	// A control plane of its own: the controller manager acts on every namespace.
	env := testenv.StartForTest(t)
	startControllerManager(t, env, "garbage-collector-controller,statefulset-controller")
	c, err := client.New(env.Config, client.Options{Scheme: envScheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := "grow"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	class := newStorageClass(t, c, "expandable", ptr.To(true))
	key := createCluster(t, c, ns, "db", dolphinv1.MySQLClusterSpec{Instances: 2,
		Storage: dolphinv1.StorageSpec{Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: &class, DeletePolicy: dolphinv1.VolumeDelete}})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}

	// The StatefulSet controller creates claims and pods; stand in for the PV controller.
	var old appsv1.StatefulSet
	pods := map[string]*corev1.Pod{}
	testenv.Eventually(t, 60*time.Second, "StatefulSet controller created pods and claims", func() error {
		if err := c.Get(ctx, key, &old); err != nil {
			return err
		}
		if old.Status.CurrentRevision == "" || old.Status.Replicas != 2 {
			return fmt.Errorf("status %+v", old.Status)
		}
		for i := range 2 {
			name := fmt.Sprintf("db-%d", i)
			var p corev1.Pod
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
				return err
			}
			pods[name] = &p
			var pvc corev1.PersistentVolumeClaim
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: dataClaimName(name)}, &pvc); err != nil {
				return err
			}
		}
		return nil
	})
	for name := range pods {
		var pvc corev1.PersistentVolumeClaim
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: dataClaimName(name)}, &pvc); err != nil {
			t.Fatal(err)
		}
		pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: pvc.Spec.AccessModes,
			Capacity: pvc.Spec.Resources.Requests}
		if err := c.Status().Update(ctx, &pvc); err != nil {
			t.Fatal(err)
		}
	}
	revision := old.Status.CurrentRevision
	for name, p := range pods {
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] != revision {
			t.Fatalf("%s at revision %q, StatefulSet at %q", name, p.Labels[appsv1.ControllerRevisionHashLabelKey], revision)
		}
	}

	setStorageSize(t, c, key, "2Gi", nil)
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatalf("reconcile after growing spec.storage.size: %v", err)
	}
	if got := claimSizes(t, c, ns); got["data-db-0"] != "2Gi" || got["data-db-1"] != "2Gi" {
		t.Errorf("claim requests %v, want 2Gi", got)
	}
	testenv.Eventually(t, 60*time.Second, "garbage collector orphaned the dependents", func() error {
		var sts appsv1.StatefulSet
		if err := c.Get(ctx, key, &sts); !apierrors.IsNotFound(err) {
			return fmt.Errorf("StatefulSet still there (deleting since %v): %v", sts.DeletionTimestamp, err)
		}
		return nil
	})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatalf("reconcile re-creating the StatefulSet: %v", err)
	}
	var sts appsv1.StatefulSet
	testenv.Eventually(t, 60*time.Second, "re-created StatefulSet adopted the pods at their revision", func() error {
		if err := c.Get(ctx, key, &sts); err != nil {
			return err
		}
		st := sts.Status
		if st.ObservedGeneration != sts.Generation || st.Replicas != 2 {
			return fmt.Errorf("status %+v", st)
		}
		if st.UpdateRevision != revision || st.CurrentRevision != revision || st.UpdatedReplicas != 2 {
			return fmt.Errorf("revisions current %q update %q (%d updated), want both %q", st.CurrentRevision, st.UpdateRevision, st.UpdatedReplicas, revision)
		}
		for name, before := range pods {
			var p corev1.Pod
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
				return err
			}
			if p.UID != before.UID || p.DeletionTimestamp != nil {
				return fmt.Errorf("%s replaced or deleting (uid %s, was %s)", name, p.UID, before.UID)
			}
			if owner := metav1.GetControllerOf(&p); owner == nil || owner.UID != sts.UID {
				return fmt.Errorf("%s controlled by %+v, want the new StatefulSet %s", name, owner, sts.UID)
			}
		}
		return nil
	})
	if sts.UID == old.UID {
		t.Fatal("the StatefulSet was not replaced")
	}
	t.Logf("StatefulSet %s replaced by %s; pods %s, %s kept at revision %s", old.UID, sts.UID,
		pods["db-0"].UID, pods["db-1"].UID, revision)
	if q, _ := claimTemplateSize(&sts); q.String() != "2Gi" {
		t.Errorf("claim template %s, want 2Gi", q.String())
	}
	// With deletePolicy Delete the claims are owned by the StatefulSet: orphaning kept them,
	// and the new StatefulSet owns them again.
	testenv.Eventually(t, 30*time.Second, "claims kept and owned by the new StatefulSet", func() error {
		for name := range pods {
			var pvc corev1.PersistentVolumeClaim
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: dataClaimName(name)}, &pvc); err != nil {
				return err
			}
			if pvc.DeletionTimestamp != nil {
				return fmt.Errorf("%s is being deleted", pvc.Name)
			}
			owned := false
			for _, o := range pvc.OwnerReferences {
				owned = owned || o.UID == sts.UID
			}
			if !owned {
				return fmt.Errorf("%s owners %+v", pvc.Name, pvc.OwnerReferences)
			}
		}
		return nil
	})
}

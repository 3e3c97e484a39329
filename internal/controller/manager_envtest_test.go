package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestEnvtestManagerDrivesTheCluster runs the reconciler inside a real manager (cache,
// watches, event recorder) and drives it only through the API: create, edit, delete a
// child, delete the cluster.
func TestEnvtestManagerDrivesTheCluster(t *testing.T) {
	needEnvtest(t)
	mgr, err := ctrl.NewManager(envCfg, manager.Options{
		Scheme:                 envScheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &MySQLClusterReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder("dolphin-operator")}
	if err := r.SetupWithManager(mgr, controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: ptr.To(true)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	c := directClient(t, nil)
	key := createCluster(t, c, newNamespace(t), "live", dolphinv1.MySQLClusterSpec{})
	var sts appsv1.StatefulSet
	testenv.Eventually(t, 20*time.Second, "StatefulSet created and status Pending", func() error {
		if err := c.Get(ctx, key, &sts); err != nil {
			return err
		}
		if p := getCluster(t, c, key).Status.Phase; p != dolphinv1.PhasePending {
			return fmt.Errorf("phase %q", p)
		}
		return nil
	})
	testenv.Eventually(t, 20*time.Second, "events recorded for the cluster", func() error {
		var evs eventsv1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(key.Namespace)); err != nil {
			return err
		}
		reasons := map[string]bool{}
		for _, e := range evs.Items {
			if e.Regarding.Name == key.Name {
				reasons[e.Reason] = true
			}
		}
		for _, want := range []string{"CredentialsCreated", "CreatedStatefulSet", "PhaseChanged"} {
			if !reasons[want] {
				return fmt.Errorf("no %s event among %v", want, reasons)
			}
		}
		return nil
	})

	// Editing the spec reaches the StatefulSet through the watch on MySQLCluster.
	// A merge patch: the running manager may be writing the object at the same moment.
	cl := getCluster(t, c, key)
	scale := client.MergeFrom(cl.DeepCopy())
	cl.Spec.Instances = 5
	if err := c.Patch(ctx, cl, scale); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "StatefulSet scaled to 5", func() error {
		if err := c.Get(ctx, key, &sts); err != nil {
			return err
		}
		if *sts.Spec.Replicas != 5 {
			return fmt.Errorf("replicas %d", *sts.Spec.Replicas)
		}
		return nil
	})

	// A deleted child comes back through the owner watch.
	primary := &corev1.Service{}
	pk := client.ObjectKey{Namespace: key.Namespace, Name: "live-primary"}
	if err := c.Get(ctx, pk, primary); err != nil {
		t.Fatal(err)
	}
	oldUID := primary.UID
	if err := c.Delete(ctx, primary); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "primary Service recreated", func() error {
		if err := c.Get(ctx, pk, primary); err != nil {
			return err
		}
		if primary.UID == oldUID {
			return fmt.Errorf("still the old Service")
		}
		return nil
	})

	// Deleting the cluster runs the finalizer and the object goes away.
	if err := c.Delete(ctx, getCluster(t, c, key)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "cluster deleted", func() error {
		err := c.Get(ctx, key, &dolphinv1.MySQLCluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still present: %w", err)
	})
}

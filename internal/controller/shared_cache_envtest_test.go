package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// startCachedManager runs the reconciler in a manager whose cache is restricted the way the
// operator's is (CacheByObject), and returns the manager's client (reads from that cache).
func startCachedManager(t *testing.T) client.Client {
	t.Helper()
	mgr, err := ctrl.NewManager(envCfg, manager.Options{
		Scheme:                 envScheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: CacheByObject()},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &MySQLClusterReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
		Recorder: mgr.GetEventRecorder("dolphin-operator")}
	if err := r.SetupWithManager(mgr, controller.Options{SkipNameValidation: ptr.To(true)}); err != nil {
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
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	return mgr.GetClient()
}

func completeCredentials(operator string) map[string][]byte {
	return map[string][]byte{
		resources.RootPasswordKey: []byte("r"), resources.ReplicationPasswordKey: []byte("p"),
		resources.OperatorPasswordKey: []byte(operator), resources.MonitorPasswordKey: []byte("m"),
	}
}

// historyGenerations reads the generations the cluster's credentials history Secret holds.
func historyGenerations(ctx context.Context, c client.Reader, key types.NamespacedName) ([]string, error) {
	var h corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name + "-credentials-history"}, &h); err != nil {
		return nil, err
	}
	return resources.ReadCredentialHistory(&h).Generations, nil
}

// TestEnvtestCacheHoldsOnlyDolphinsObjects runs the reconciler on the operator's restricted
// cache: Secrets, pods and claims that are not Dolphin's never enter it; a user-supplied
// credentials Secret created after its cluster is found (by polling: nothing else can see an
// unlabelled Secret), labelled, and from then on its password rotation reaches the history
// Secret through the watch; a removed label is put back.
func TestEnvtestCacheHoldsOnlyDolphinsObjects(t *testing.T) {
	needEnvtest(t)
	live := directClient(t, nil)
	ctx := context.Background()
	ns := newNamespace(t)
	meta := func(name string, labels map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}
	}
	podSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
	claimSpec := corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}
	// Objects that are not Dolphin's, created before anything of Dolphin's: a watch delivers
	// events in order, so once a later Dolphin object is in the cache these would be too.
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: meta("unrelated", nil), StringData: map[string]string{"token": "not Dolphin's"}},
		&corev1.Secret{ObjectMeta: meta("other-operator", map[string]string{resources.LabelManagedBy: "someone-else"})},
		&corev1.Pod{ObjectMeta: meta("web-0", map[string]string{resources.LabelName: "web"}), Spec: podSpec},
		&corev1.PersistentVolumeClaim{ObjectMeta: meta("web-data", map[string]string{resources.LabelName: "web"}), Spec: claimSpec},
	} {
		if err := live.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	// A cluster whose Secret does not exist yet: a user error (counted as result=error, not
	// returned), looked at again after the poll interval. Before the manager runs, so that
	// only this reconcile counts.
	byo := createCluster(t, live, ns, "byo", dolphinv1.MySQLClusterSpec{Credentials: dolphinv1.CredentialsSpec{SecretName: "byo-secret"}})
	before := testutil.ToFloat64(metrics.ReconcileTotal.WithLabelValues(metrics.ResultError))
	r := &MySQLClusterReconciler{Client: live, Scheme: envScheme}
	res, err := r.Reconcile(ctrl.LoggerInto(ctx, ctrl.Log), ctrl.Request{NamespacedName: byo})
	if err != nil || res.RequeueAfter != userSecretPollInterval {
		t.Errorf("missing Secret: Reconcile = %+v, %v; want RequeueAfter %s and no error", res, err, userSecretPollInterval)
	}
	if after := testutil.ToFloat64(metrics.ReconcileTotal.WithLabelValues(metrics.ResultError)); after != before+1 {
		t.Errorf("waiting for the user's Secret counted as result=error %v times, want 1", after-before)
	}

	cached := startCachedManager(t)
	own := createCluster(t, live, ns, "own", dolphinv1.MySQLClusterSpec{})
	cl := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: own.Name}}
	for _, o := range []client.Object{
		&corev1.Pod{ObjectMeta: meta("own-0", resources.CommonLabels(cl)), Spec: podSpec},
		&corev1.PersistentVolumeClaim{ObjectMeta: meta("data-own-0", resources.SelectorLabels(cl)), Spec: claimSpec},
	} {
		if err := live.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	// Let the manager's first reconciles (its own status writes trigger some) settle, so that
	// what finds the Secret is the poll.
	testenv.Eventually(t, 20*time.Second, "the cluster reported waiting for its Secret", func() error {
		if st := getCluster(t, live, byo).Status; st.Phase != dolphinv1.PhaseFailed {
			return fmt.Errorf("phase %q", st.Phase)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	userSecret := &corev1.Secret{ObjectMeta: meta("byo-secret", nil), Data: completeCredentials("first")}
	if err := live.Create(ctx, userSecret); err != nil {
		t.Fatal(err)
	}
	firstGen := resources.CredentialsGeneration(userSecret.Data)
	created := time.Now()
	testenv.Eventually(t, userSecretPollInterval+15*time.Second, "the user's Secret found, labelled and recorded", func() error {
		var s corev1.Secret
		if err := live.Get(ctx, client.ObjectKeyFromObject(userSecret), &s); err != nil {
			return err
		}
		if s.Labels[resources.CredentialsLabel] != "true" {
			return fmt.Errorf("labels %v", s.Labels)
		}
		gens, err := historyGenerations(ctx, live, byo)
		if err != nil || len(gens) == 0 || gens[0] != firstGen {
			return fmt.Errorf("history generations %v (%v), want %s first", gens, err, firstGen)
		}
		return nil
	})

	t.Logf("the Secret created after its cluster was found %s later", time.Since(created).Round(100*time.Millisecond))

	wantSecrets := []string{"byo-agent", "byo-credentials-history", "byo-metrics", "byo-secret", "own-agent", "own-credentials", "own-credentials-history", "own-metrics"}
	testenv.Eventually(t, 20*time.Second, "the cache to hold exactly Dolphin's objects", func() error {
		var secrets corev1.SecretList
		var pods corev1.PodList
		var claims corev1.PersistentVolumeClaimList
		for _, l := range []client.ObjectList{&secrets, &pods, &claims} {
			if err := cached.List(ctx, l, client.InNamespace(ns)); err != nil {
				return err
			}
		}
		names := func(n int, name func(int) string) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = name(i)
			}
			slices.Sort(out)
			return out
		}
		got := map[string][]string{
			"Secrets": names(len(secrets.Items), func(i int) string { return secrets.Items[i].Name }),
			"Pods":    names(len(pods.Items), func(i int) string { return pods.Items[i].Name }),
			"claims":  names(len(claims.Items), func(i int) string { return claims.Items[i].Name }),
		}
		want := map[string][]string{"Secrets": wantSecrets, "Pods": {"own-0"}, "claims": {"data-own-0"}}
		for k := range want {
			if !slices.Equal(got[k], want[k]) {
				return fmt.Errorf("cached %s %v, want %v", k, got[k], want[k])
			}
		}
		return nil
	})
	if err := cached.Get(ctx, client.ObjectKey{Namespace: ns, Name: "unrelated"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("cached Get of a Secret that is not Dolphin's: %v, want NotFound", err)
	}

	// Rotation in the user's Secret: seen through the watch (the cluster no longer polls, and
	// the cache's resync is hours away).
	rotate := client.MergeFrom(userSecret.DeepCopy())
	userSecret.Data[resources.OperatorPasswordKey] = []byte("second")
	if err := live.Patch(ctx, userSecret, rotate); err != nil {
		t.Fatal(err)
	}
	secondGen := resources.CredentialsGeneration(userSecret.Data)
	start := time.Now()
	testenv.Eventually(t, 20*time.Second, "the rotated passwords recorded as the newest generation", func() error {
		gens, err := historyGenerations(ctx, live, byo)
		if err != nil || len(gens) != 2 || gens[0] != secondGen || gens[1] != firstGen {
			return fmt.Errorf("history generations %v (%v), want [%s %s]", gens, err, secondGen, firstGen)
		}
		return nil
	})
	t.Logf("rotation recorded %s after the Secret changed", time.Since(start).Round(time.Millisecond))

	// A removed label takes the Secret out of the cache (a deletion for the watch): the
	// cluster reads it live and labels it again.
	unlabel := client.MergeFrom(userSecret.DeepCopy())
	delete(userSecret.Labels, resources.CredentialsLabel)
	if err := live.Patch(ctx, userSecret, unlabel); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the label put back", func() error {
		var s corev1.Secret
		if err := live.Get(ctx, client.ObjectKeyFromObject(userSecret), &s); err != nil {
			return err
		}
		if s.Labels[resources.CredentialsLabel] != "true" {
			return fmt.Errorf("labels %v", s.Labels)
		}
		if string(s.Data[resources.OperatorPasswordKey]) != "second" || len(s.Data) != len(resources.CredentialKeys) {
			return fmt.Errorf("the user's data changed: %q", s.Data[resources.OperatorPasswordKey])
		}
		return nil
	})
}

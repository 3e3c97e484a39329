package operator_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/operator"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// startEnvtest starts kube-apiserver and etcd with Dolphin's CRDs installed and returns a
// client for them. It skips under -short and fails when the binaries are not configured.
func startEnvtest(t *testing.T) (*envtest.Environment, client.Client) {
	t.Helper()
	tenv := testenv.StartForTest(t)
	env, cfg := tenv.Environment, tenv.Config
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("creating client: %v", err)
	}
	return env, c
}

// syncBuffer collects the operator's logs; they are printed only when the test fails.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// eventually is testenv.Eventually for a condition that also says why it does not hold yet.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	testenv.Eventually(t, timeout, what, func() error {
		if ok, err := cond(); !ok {
			return cmp.Or(err, errors.New("not yet"))
		}
		return nil
	})
}

// TestEnvtestLeaderElectionReleasedOnShutdown runs the operator as the binary does, with
// leader election on: it must take the Lease, reconcile, and on cancellation return nil
// within the graceful shutdown timeout and leave the Lease free for the next replica.
func TestEnvtestLeaderElectionReleasedOnShutdown(t *testing.T) {
	env, c := startEnvtest(t)

	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("operator logs:\n%s", logs)
		}
	})
	opts := operator.DefaultOptions()
	opts.RESTConfig = env.Config
	opts.LeaderElectionNamespace = "default"
	opts.MetricsBindAddress = "0"
	opts.HealthProbeBindAddress = "0"
	opts.GracefulShutdownTimeout = 10 * time.Second
	opts.Zap.Development = true
	opts.Zap.DestWriter = logs
	opts.SkipControllerNameValidation = true // lets -count=N run this test again in one process

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- operator.Run(ctx, opts) }()

	lease := &coordinationv1.Lease{}
	leaseKey := client.ObjectKey{Namespace: "default", Name: opts.LeaderElectionID}
	var holder string
	eventually(t, 30*time.Second, "the operator to hold the Lease", func() (bool, error) {
		select {
		case err := <-done:
			t.Fatalf("Run returned before taking the Lease: %v", err)
		default:
		}
		if err := c.Get(ctx, leaseKey, lease); err != nil {
			return false, err
		}
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		return holder != "", nil
	})
	t.Logf("Lease %s held by %q", leaseKey, holder)

	// The leader reconciles: a new MySQLCluster gets Dolphin's finalizer.
	cluster := &dolphinv1.MySQLCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "leader-check"},
		Spec:       dolphinv1.MySQLClusterSpec{Paused: true},
	}
	if err := c.Create(ctx, cluster); err != nil {
		t.Fatalf("creating MySQLCluster: %v", err)
	}
	eventually(t, 30*time.Second, "the leader to reconcile the MySQLCluster", func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)
		return err == nil && controllerutil.ContainsFinalizer(cluster, controller.Finalizer), err
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v after cancellation, want nil", err)
		}
	case <-time.After(opts.GracefulShutdownTimeout + 5*time.Second):
		t.Fatalf("Run did not return within the graceful shutdown timeout (%s)", opts.GracefulShutdownTimeout)
	}

	if err := c.Get(context.Background(), leaseKey, lease); err != nil {
		t.Fatalf("reading the Lease after shutdown: %v", err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("Lease still held by %q after shutdown, want it released (LeaderElectionReleaseOnCancel)", *h)
	}
}

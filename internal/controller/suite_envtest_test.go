package controller

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// The envtest suite runs the reconciler against a real kube-apiserver and etcd (no fake
// clients). Tests that need it are named TestEnvtest…; they are skipped under -short.
var (
	envCfg    *rest.Config
	envScheme *runtime.Scheme
	nsCounter atomic.Int32
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	env, err := testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	envScheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(envScheme); err != nil {
		panic(err)
	}
	if err := dolphinv1.AddToScheme(envScheme); err != nil {
		panic(err)
	}
	envCfg = env.Config
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// needEnvtest skips a test under -short.
func needEnvtest(t *testing.T) {
	t.Helper()
	if envCfg == nil {
		t.Skip("envtest skipped under -short")
	}
}

// writeCounter counts every request that changes an object.
type writeCounter struct{ n atomic.Int64 }

// directClient is an uncached client to the envtest API server; when wc is not nil, every
// write through it is counted.
func directClient(t *testing.T, wc *writeCounter) client.WithWatch {
	t.Helper()
	c, err := client.NewWithWatch(envCfg, client.Options{Scheme: envScheme})
	if err != nil {
		t.Fatal(err)
	}
	if wc == nil {
		return c
	}
	count := func(o any) {
		wc.n.Add(1)
		t.Logf("write: %T", o)
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			count(o)
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			count(o)
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			count(o)
			return c.Patch(ctx, o, p, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			count(o)
			return c.Apply(ctx, o, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			count(o)
			return c.Delete(ctx, o, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			count(o)
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
			count(o)
			return c.SubResource(sub).Update(ctx, o, opts...)
		},
	})
}

// newNamespace creates a fresh namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("t%d-%d", time.Now().Unix()%100000, nsCounter.Add(1))
	if err := directClient(t, nil).Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// reconcileOnce runs one reconcile of the named cluster with a direct client.
func reconcileOnce(t *testing.T, c client.Client, key types.NamespacedName) error {
	t.Helper()
	r := &MySQLClusterReconciler{Client: c, Scheme: envScheme}
	_, err := r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), ctrl.Request{NamespacedName: key})
	return err
}

// interceptorRecordingPhases wraps c and appends the phase of every MySQLCluster status
// write to phases.
func interceptorRecordingPhases(c client.WithWatch, phases *[]dolphinv1.Phase) client.Client {
	return interceptor.NewClient(c, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if mc, ok := o.(*dolphinv1.MySQLCluster); ok && sub == "status" {
				*phases = append(*phases, mc.Status.Phase)
			}
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
	})
}

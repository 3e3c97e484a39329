package localproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// PortBook gives every Service port a stable local port, kept in a JSON file so that the
// address printed to the user survives restarts of `dolphin local`.
type PortBook struct {
	// File holds the assignments; empty keeps them in memory only.
	File string
	// Base is the first local port handed out (default 13306).
	Base int

	mu    sync.Mutex
	ports map[string]int
}

// Port returns the local port of a Service port, assigning the next free one the first time.
func (b *PortBook) Port(svc types.NamespacedName, port int32) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ports == nil {
		b.ports = map[string]int{}
		if b.File != "" {
			if data, err := os.ReadFile(b.File); err == nil {
				_ = json.Unmarshal(data, &b.ports)
			}
		}
	}
	key := svc.String() + ":" + strconv.Itoa(int(port))
	if p, ok := b.ports[key]; ok {
		return p
	}
	next := max(b.Base, 1024)
	if b.Base == 0 {
		next = 13306
	}
	used := map[int]bool{}
	for _, p := range b.ports {
		used[p] = true
	}
	for used[next] || !free(next) {
		next++
	}
	b.ports[key] = next
	if b.File != "" {
		if data, err := json.MarshalIndent(b.ports, "", "  "); err == nil {
			_ = os.WriteFile(b.File, data, 0o644)
		}
	}
	return next
}

func free(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// syncRequest is the one request the controller queues: every change re-syncs everything.
var syncRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "all"}}

// SetupWithManager makes the manager keep p in sync with Services and EndpointSlices.
func (p *Proxy) SetupWithManager(mgr ctrl.Manager, book *PortBook) error {
	if p.Client == nil {
		p.Client = mgr.GetClient()
	}
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{syncRequest}
	})
	err := ctrl.NewControllerManagedBy(mgr).
		Named("localproxy").
		Watches(&corev1.Service{}, all).
		Watches(&discoveryv1.EndpointSlice{}, all).
		Complete(reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
			if err := p.Sync(ctx, book.Port); err != nil {
				return reconcile.Result{}, fmt.Errorf("syncing the local proxy: %w", err)
			}
			return reconcile.Result{}, nil
		}))
	if err != nil {
		return fmt.Errorf("setting up the local proxy: %w", err)
	}
	return mgr.Add(closer{p})
}

// closer closes the proxy's listeners when the manager stops.
type closer struct{ p *Proxy }

func (c closer) Start(ctx context.Context) error {
	<-ctx.Done()
	c.p.Close()
	return nil
}

//go:build linux

package localproxy

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestEnvtestProxyServesClusterIPs: with ClusterIPDevice set, a Service is reachable at its
// ClusterIP and port (the address is put on the device), as pods reach it through kube-proxy;
// the device is created after the proxy started, as the local node's bridge may be.
func TestEnvtestProxyServesClusterIPs(t *testing.T) {
	device := fmt.Sprintf("dlpx%d", time.Now().UnixNano()%100000)
	env := testenv.StartForTest(t)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Log: testr.New(t), ClusterIPDevice: device}
	if err := p.SetupWithManager(mgr, &PortBook{File: filepath.Join(t.TempDir(), "ports.json"), Base: 24306}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	host := localIPv4(t)
	backend := greeter(t, host, "store-A")
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dolphin-store-x",
		Labels: map[string]string{"app.kubernetes.io/managed-by": "dolphin"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "store", Port: 40123}}}}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	bh, bp, _ := net.SplitHostPort(backend)
	var port int32
	fmt.Sscan(bp, &port)
	if err := c.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "dolphin-store-x-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{bh}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("store"), Port: &port}},
	}); err != nil {
		t.Fatal(err)
	}
	// The device appears after the first Syncs failed to put the address on it.
	time.Sleep(time.Second)
	if out, err := exec.Command("ip", "link", "add", device, "type", "bridge").CombinedOutput(); err != nil {
		if strings.Contains(string(out), "Operation not permitted") {
			t.Skipf("creating a network device needs root: %s", out)
		}
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", device).Run() })
	if out, err := exec.Command("ip", "link", "set", device, "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set up: %v: %s", err, out)
	}
	addr := net.JoinHostPort(svc.Spec.ClusterIP, "40123")
	testenv.Eventually(t, 60*time.Second, "reach the backend at the ClusterIP "+addr, func() error {
		cn, got, err := dialGreeting(addr)
		if err != nil {
			return err
		}
		cn.Close()
		if got != "store-A" {
			return fmt.Errorf("got %q", got)
		}
		return nil
	})
	out, err := exec.Command("ip", "-o", "addr", "show", "dev", device).CombinedOutput()
	if err != nil || !strings.Contains(string(out), svc.Spec.ClusterIP+"/32") {
		t.Errorf("the ClusterIP is not on %s: %v: %s", device, err, out)
	}
}

package localproxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// greeter accepts connections and writes its name, then echoes lines until closed.
func greeter(t *testing.T, host, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintln(c, name)
				s := bufio.NewScanner(c)
				for s.Scan() {
					fmt.Fprintln(c, s.Text())
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func dialGreeting(addr string) (net.Conn, string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		return nil, "", err
	}
	_ = c.SetReadDeadline(time.Time{})
	return c, line[:len(line)-1], nil
}

// TestEnvtestProxyFollowsEndpointSlices: a client reaches the ready endpoint through the
// local port; when the endpoint changes (a failover), the old connection is closed and a new
// connection through the same port reaches the new endpoint.
func TestEnvtestProxyFollowsEndpointSlices(t *testing.T) {
	env := testenv.StartForTest(t)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Log: testr.New(t)}
	book := &PortBook{File: filepath.Join(t.TempDir(), "ports.json"), Base: 23306}
	if err := p.SetupWithManager(mgr, book); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// EndpointSlices reject loopback addresses: serve on a local non-loopback address.
	host := localIPv4(t)
	a, b := greeter(t, host, "primary-A"), greeter(t, host, "primary-B")
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shop-primary",
		Labels: map[string]string{"app.kubernetes.io/managed-by": "dolphin"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "mysql", Port: 3306}}}}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	slice := func(addr string) *discoveryv1.EndpointSlice {
		host, port, _ := net.SplitHostPort(addr)
		var p int32
		fmt.Sscan(port, &p)
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "shop-primary-x", Labels: map[string]string{discoveryv1.LabelServiceName: "shop-primary"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("mysql"), Port: &p}},
		}
	}
	es := slice(a)
	if err := c.Create(ctx, es); err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", book.Port(types.NamespacedName{Namespace: "default", Name: "shop-primary"}, 3306))
	var conn net.Conn
	testenv.Eventually(t, 20*time.Second, "reach A through "+listen, func() error {
		cn, got, err := dialGreeting(listen)
		if err != nil {
			return err
		}
		if got != "primary-A" {
			cn.Close()
			return fmt.Errorf("got %q", got)
		}
		conn = cn
		return nil
	})

	// Failover: the endpoint moves to B.
	next := slice(b)
	es.Endpoints, es.Ports = next.Endpoints, next.Ports
	if err := c.Update(ctx, es); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the connection to A is closed", func() error {
		_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		fmt.Fprintln(conn, "ping")
		buf := make([]byte, 64)
		if _, err := conn.Read(buf); err == nil || isTimeout(err) {
			return fmt.Errorf("still open")
		}
		return nil
	})
	testenv.Eventually(t, 20*time.Second, "reach B through the same port", func() error {
		cn, got, err := dialGreeting(listen)
		if err != nil {
			return err
		}
		cn.Close()
		if got != "primary-B" {
			return fmt.Errorf("got %q", got)
		}
		return nil
	})
	if routes := p.Routes(); len(routes) != 1 || routes[0].Listen != listen {
		t.Errorf("routes %+v", routes)
	}
}

// localIPv4 returns a non-loopback IPv4 address of this machine.
func localIPv4(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address on this machine")
	return ""
}

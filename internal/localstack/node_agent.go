package localstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/dolphin-operator/dolphin/internal/localnode"
	"github.com/dolphin-operator/dolphin/internal/localproxy"
	"github.com/dolphin-operator/dolphin/internal/operator"
)

// agentName is the name of the local node + proxy process in state.json and its log file.
const agentName = "node"

// localAgentOptions are the flags of `dolphin local agent`.
type localAgentOptions struct {
	kubeconfig, dir, nodeName, podCIDR, bridge, health string
}

// newLocalAgentCmd returns `dolphin local agent`: the local node (pods as host processes) and
// the Service proxy, in one process. `dolphin local up` starts it; it needs root (network and
// mount namespaces).
func newLocalAgentCmd() *cobra.Command {
	var o localAgentOptions
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the local node (pods as host processes) and the Service proxy (started by `up`)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLocalAgent(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the local control plane")
	f.StringVar(&o.dir, "dir", defaultLocalDir(), "state folder of `dolphin local`")
	f.StringVar(&o.nodeName, "node-name", "dolphin-local", "name of the Node")
	f.StringVar(&o.podCIDR, "pod-cidr", "10.244.0.0/24", "pod addresses, reachable from this host only")
	f.StringVar(&o.bridge, "bridge", "dolphin0", "host bridge the pods' network namespaces join")
	f.StringVar(&o.health, "health-probe-bind-address", "127.0.0.1:0", "where /readyz answers once the node is registered")
	return cmd
}

func runLocalAgent(ctx context.Context, o localAgentOptions) error {
	// Milliseconds, as the operator logs: the Service proxy's endpoint changes are lined up
	// with the operator's failover steps.
	log := zap.New(func(o *zap.Options) { o.TimeEncoder = zapcore.TimeEncoderOfLayout(operator.LogTimeLayout) })
	ctrl.SetLogger(log)
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", o.kubeconfig, err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return fmt.Errorf("creating the proxy manager: %w", err)
	}
	proxy := &localproxy.Proxy{Log: log.WithName("proxy"), ClusterIPDevice: o.bridge}
	if err := proxy.SetupWithManager(mgr, &localproxy.PortBook{File: filepath.Join(o.dir, "services.json")}); err != nil {
		return err
	}

	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	// Ready once the Node is registered and reports Ready.
	srv := &http.Server{Addr: o.health, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var node corev1.Node
		if err := direct.Get(r.Context(), client.ObjectKey{Name: o.nodeName}, &node); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				fmt.Fprintln(w, "ok")
				return
			}
		}
		http.Error(w, "node not ready", http.StatusServiceUnavailable)
	})}
	go func() { _ = srv.ListenAndServe() }()
	defer srv.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- mgr.Start(ctx) }()
	go func() {
		errs <- localnode.Run(ctx, localnode.Options{
			Kubeconfig: o.kubeconfig, NodeName: o.nodeName, Dir: filepath.Join(o.dir, "node"), PodCIDR: o.podCIDR, Bridge: o.bridge,
			Log: log.WithName("node"),
		})
	}()
	err = <-errs
	cancel()
	err2 := <-errs
	return errors.Join(err, err2)
}

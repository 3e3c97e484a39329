package localstack

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dolphin-operator/dolphin/config"
	"github.com/dolphin-operator/dolphin/internal/imagebuild/manifest"
	"github.com/dolphin-operator/dolphin/internal/localcluster"
	"github.com/dolphin-operator/dolphin/internal/localnode"
	"github.com/dolphin-operator/dolphin/internal/operator"
	"github.com/dolphin-operator/dolphin/internal/realnode"
)

// Node kinds of `dolphin local up --node`.
const (
	nodeReal    = "real"
	nodeProcess = "process"
)

// provisionerName is the local-volume provisioner of the real node in state.json and logs.
const provisionerName = "provisioner"

// Where a real install runs the operator (config/manager/manager.yaml).
const (
	operatorNamespace  = "dolphin-system"
	operatorDeployment = "dolphin-operator"
	validatingWebhooks = "dolphin-validating-webhooks"
	webhookService     = "dolphin-webhook"
)

// localRealDir is the real node's folder in a local cluster's folder.
func localRealDir(dir string) string { return filepath.Join(dir, "realnode") }

// localUpReal is `dolphin local up --node real`: the control plane advertising the node's
// address, the real node (containerd, kubelet, kube-proxy, CoreDNS) with the images of make
// images imported, the local-volume provisioner, and Dolphin installed in the cluster from its
// image (config/default: CRDs, RBAC, the operator's Deployment, webhooks served by its pods).
func localUpReal(ctx context.Context, out io.Writer, o localUpOptions, binDir string, crds fs.FS, s3Binary, s3Host string, began time.Time) (err error) {
	netw, err := realnode.ParseNetwork(o.bridge, o.podCIDR)
	if err != nil {
		return err
	}
	manifest, err := readImages(o.imagesDir)
	if err != nil {
		return err
	}
	nodeBin := o.nodeBinDir
	if nodeBin == "" {
		nodeBin = realnode.DefaultBinDir()
	}
	if err := realnode.Check(nodeBin); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the dolphin binary for the provisioner: %w", err)
	}

	fmt.Fprintf(out, "Starting the local control plane in %s\n", o.dir)
	cp, err := localcluster.Start(ctx, localcluster.Options{
		Dir: o.dir, BinDir: binDir, AdvertiseAddress: netw.Gateway().String(), ServiceCIDR: realnode.DefaultServiceCIDR,
		Progress: func(c string, d time.Duration) { fmt.Fprintf(out, "  %-24s ready (%.1fs)\n", c, d.Seconds()) },
	})
	if err != nil {
		return fmt.Errorf("starting the control plane (logs in %s): %w", filepath.Join(o.dir, "logs"), err)
	}
	if cp.Reused {
		fmt.Fprintf(out, "  control plane already running at %s: reused\n", cp.APIServerURL())
	}
	nodeOpts := realnode.Options{Dir: localRealDir(cp.Dir), BinDir: nodeBin, NodeName: realnode.DefaultNodeName, Network: netw,
		ServiceCIDR: realnode.DefaultServiceCIDR, KubeProxyMinSyncPeriod: o.kubeProxyMinSync}
	before := addOnPIDs(cp)
	nodeRan := cp.Process(realnode.Kubelet).Alive()
	defer func() {
		if err != nil {
			// Stop what this call started: a node that ran before keeps running, and a node
			// refused because another runs on the host changed nothing to undo.
			if !nodeRan && !errors.Is(err, realnode.ErrOtherNode) {
				err = errors.Join(err, realnode.Down(context.WithoutCancel(ctx), cp, nodeOpts))
			}
			err = errors.Join(err, undoLocalUp(out, cp, before))
		}
	}()
	archives := []string{manifest.Pause.Archive, manifest.Dolphin.Archive}
	for _, m := range manifest.MariaDB {
		archives = append(archives, m.Archive)
	}
	if _, err := realnode.Up(ctx, cp, nodeOpts, archives, func(step string, took time.Duration) {
		fmt.Fprintf(out, "  %-24s ready (%.1fs)\n", step, took.Seconds())
	}); err != nil {
		return fmt.Errorf("starting the real node (logs in %s): %w", filepath.Join(cp.Dir, "logs"), err)
	}

	step := time.Now()
	if _, err := ensureAddOnWithPorts(ctx, cp, func(fresh bool) (localcluster.AddOn, error) {
		port, err := recordedPort(cp, provisionerName, "--health-probe-bind-address=127.0.0.1:", fresh)
		if err != nil {
			return localcluster.AddOn{}, err
		}
		return localcluster.AddOn{
			Name: provisionerName,
			Args: []string{exe, "local", "provisioner", "--kubeconfig=" + cp.Kubeconfig,
				"--dir=" + filepath.Join(nodeOpts.Dir, "storage"), "--node-name=" + nodeOpts.NodeName,
				fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", port)},
			Probe: localcluster.Probe{URL: fmt.Sprintf("http://127.0.0.1:%d/readyz", port)},
		}, nil
	}, nil); err != nil {
		return fmt.Errorf("starting the volume provisioner: %w", err)
	}
	fmt.Fprintf(out, "  %-24s ready (%.1fs)\n", "volume provisioner", time.Since(step).Seconds())

	var s3srv *localcluster.S3Server
	if o.s3 {
		step = time.Now()
		if s3srv, err = ensureLocalS3(ctx, cp, s3Binary, s3Host, o.s3Port); err != nil {
			return fmt.Errorf("starting the S3 server (--s3): %w", err)
		}
		fmt.Fprintf(out, "  %-24s ready (%.1fs): %s\n", "s3 (backups)", time.Since(step).Seconds(), s3srv.Endpoint)
	} else if _, err := cp.RemoveAddOn(localcluster.S3Process); err != nil {
		return fmt.Errorf("stopping the S3 server (no --s3): %w", err)
	}

	if o.noDolphin {
		fmt.Fprintf(out, "\nThe local cluster is up on a real node without Dolphin (%.1fs): install it, e.g. with Helm (docs/install.md; make helm builds one):\n\n", time.Since(began).Seconds())
		fmt.Fprintf(out, "  export KUBECONFIG=%s\n", cp.Kubeconfig)
		fmt.Fprintf(out, "  helm install dolphin-crds charts/dolphin-crds -n %s --create-namespace\n", operatorNamespace)
		fmt.Fprintf(out, "  helm install dolphin charts/dolphin -n %s --wait --set image.tag=%s\n\n", operatorNamespace,
			strings.TrimPrefix(manifest.Dolphin.References[0], "ghcr.io/dolphin-operator/dolphin:"))
		fmt.Fprintf(out, "Logs: %s (kubectl logs for pods). Stop: dolphin local down --dir %s [--wipe]\n", filepath.Join(cp.Dir, "logs"), cp.Dir)
		return nil
	}
	step = time.Now()
	names, err := localcluster.InstallCRDs(ctx, cp.Kubeconfig, crds, 0)
	if err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}
	fmt.Fprintf(out, "  %-24s ready (%.1fs): %s\n", "CRDs", time.Since(step).Seconds(), strings.Join(names, ", "))
	step = time.Now()
	docs, err := config.OperatorManifests()
	if err != nil {
		return fmt.Errorf("reading the install manifests: %w", err)
	}
	// The manifests name the image a development build is tagged with; the node runs the one
	// make images built (another IMAGE_TAG), never a stale one left in containerd.
	for i := range docs {
		docs[i] = bytes.ReplaceAll(docs[i], []byte(config.DevImage), []byte(manifest.Dolphin.References[0]))
	}
	if _, err := localcluster.ApplyManifests(ctx, cp.Kubeconfig, docs...); err != nil {
		return fmt.Errorf("installing the operator: %w", err)
	}
	if err := waitOperatorInCluster(ctx, cp.Kubeconfig); err != nil {
		return fmt.Errorf("the operator (kubectl -n %s logs deploy/%s): %w", operatorNamespace, operatorDeployment, err)
	}
	fmt.Fprintf(out, "  %-24s ready (%.1fs): %s in deployment %s/%s\n", "operator", time.Since(step).Seconds(),
		manifest.Dolphin.References[0], operatorNamespace, operatorDeployment)

	fmt.Fprintf(out, "\nDolphin local is up on a real node (%.1fs).\n\n", time.Since(began).Seconds())
	fmt.Fprintf(out, "  export KUBECONFIG=%s\n", cp.Kubeconfig)
	fmt.Fprintf(out, "  kubectl apply -f config/samples/mysqlcluster.yaml\n")
	fmt.Fprintf(out, "  kubectl wait --for=condition=Ready mysqlcluster/demo --timeout=120s\n")
	fmt.Fprintf(out, "  dolphin local status --dir %s   # Services at their ClusterIPs, reachable from this host through kube-proxy\n\n", cp.Dir)
	if s3srv != nil {
		if err := printLocalS3(out, s3srv); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "Logs: %s (kubectl logs for pods). Stop: dolphin local down --dir %s [--wipe]\n", filepath.Join(cp.Dir, "logs"), cp.Dir)
	return nil
}

// readImages reads the manifest make images writes (in the user's cache folder by default).
func readImages(dir string) (manifest.Manifest, error) {
	if dir == "" {
		dir = filepath.Join(localcluster.CacheDir(), "images")
	}
	return manifest.Read(dir)
}

// waitOperatorInCluster waits until the operator's Deployment has a ready pod and the webhook
// configuration carries the CA it serves with (the API server can then call it).
func waitOperatorInCluster(ctx context.Context, kubeconfig string) error {
	c, err := kubeClient(kubeconfig)
	if err != nil {
		return err
	}
	var last error
	for {
		var d appsv1.Deployment
		var hooks admissionregistrationv1.ValidatingWebhookConfiguration
		var svc corev1.Service
		switch {
		case c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, &d) != nil:
			last = errors.New("no Deployment yet")
		case d.Status.ReadyReplicas == 0:
			last = fmt.Errorf("no ready pod (%d of %d updated)", d.Status.UpdatedReplicas, d.Status.Replicas)
		case c.Get(ctx, client.ObjectKey{Name: validatingWebhooks}, &hooks) != nil:
			last = errors.New("no webhook configuration")
		case len(hooks.Webhooks) == 0 || len(hooks.Webhooks[0].ClientConfig.CABundle) == 0:
			last = errors.New("the webhook's CA is not injected yet")
		case c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: webhookService}, &svc) != nil:
			last = errors.New("no webhook Service")
		default:
			// The API server calls the webhook through the Service, from this host: ready once
			// kube-proxy sends the Service's address to a pod that serves it.
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp",
				net.JoinHostPort(svc.Spec.ClusterIP, "443"), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reachability only
			if err == nil {
				conn.Close()
				return nil
			}
			last = fmt.Errorf("the webhook Service %s does not answer yet: %w", svc.Spec.ClusterIP, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// realNodeRuns reports whether the local cluster in dir has a real node whose kubelet runs.
func realNodeRuns(dir string) (bool, error) {
	if _, err := realnode.LoadOptions(localRealDir(dir)); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	cp, err := localcluster.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return cp.Process(realnode.Kubelet).Alive(), nil
}

// runningNodeKind is the kind of node the local cluster in dir was started with (its `up`
// without --node keeps it): real when the folder has the real node's settings, process when
// it recorded a node agent, and real — the default — for a new folder.
func runningNodeKind(dir string) (string, error) {
	if _, err := realnode.LoadOptions(localRealDir(dir)); err == nil {
		return nodeReal, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	cp, err := localcluster.Open(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nodeReal, nil
	case err != nil:
		return "", err
	case cp.Process(agentName) != nil:
		return nodeProcess, nil
	}
	return nodeReal, nil
}

// downRealNode stops the real node of a local cluster, if one was started there, before the
// control plane stops (its pods must go while containerd runs).
func downRealNode(out io.Writer, cp *localcluster.ControlPlane) error {
	opts, err := realnode.LoadOptions(localRealDir(cp.Dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	began := time.Now()
	if _, err := cp.RemoveAddOn(provisionerName); err != nil {
		return err
	}
	if err := realnode.Down(context.Background(), cp, opts); err != nil {
		return fmt.Errorf("stopping the real node: %w", err)
	}
	fmt.Fprintf(out, "  %-24s stopped (%.1fs)\n", "real node", time.Since(began).Seconds())
	return nil
}

// localProvisionerOptions are the flags of `dolphin local provisioner`.
type localProvisionerOptions struct {
	kubeconfig, dir, nodeName, health string
}

// newLocalProvisionerCmd returns `dolphin local provisioner`: the real node's volume
// provisioner (local PVs in host folders, expansion, sized volumes), started by `up --node real`.
func newLocalProvisionerCmd() *cobra.Command {
	var o localProvisionerOptions
	cmd := &cobra.Command{
		Use:    "provisioner",
		Short:  "Run the real node's volume provisioner (started by `up --node real`)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := zap.New(func(o *zap.Options) { o.TimeEncoder = zapcore.TimeEncoderOfLayout(operator.LogTimeLayout) })
			ctrl.SetLogger(log)
			ready := make(chan struct{})
			srv := &http.Server{Addr: o.health, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				select {
				case <-ready:
					fmt.Fprintln(w, "ok")
				default:
					http.Error(w, "storage classes not created yet", http.StatusServiceUnavailable)
				}
			})}
			go func() { _ = srv.ListenAndServe() }()
			defer srv.Close()
			return localnode.RunProvisioner(cmd.Context(), localnode.Options{
				Kubeconfig: o.kubeconfig, Dir: o.dir, NodeName: o.nodeName, LocalVolumes: true, Log: log.WithName("provisioner"),
			}, func() { close(ready) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the local control plane")
	f.StringVar(&o.dir, "dir", "", "folder of the volumes (volumes/<claim uid>)")
	f.StringVar(&o.nodeName, "node-name", realnode.DefaultNodeName, "the node the volumes are on")
	f.StringVar(&o.health, "health-probe-bind-address", "127.0.0.1:0", "where /readyz answers once the storage classes exist")
	return cmd
}

// Package localstack is `dolphin local`: the whole stack on this machine — a real control
// plane (internal/localcluster), a node (the real one, internal/realnode, or the host-process
// one, internal/localnode), Dolphin's CRDs and operator, and an S3 server — started, reported
// and stopped by its subcommands (up, down, status; agent and provisioner are the process
// node's and the real node's own processes). Only cmd/dolphin links it: the binary inside the
// pods (cmd/dolphin-pod) does not.
//
//	local.go        the command, up, down, status
//	real.go         up and down of the real node (containerd, kubelet, kube-proxy, CoreDNS)
//	real_status.go  the Services a real node's host reaches at their ClusterIPs
//	node_agent.go   `dolphin local agent`, the host-process node
//	s3.go           the S3 server of `up --s3`
package localstack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dolphin-operator/dolphin/config/crd"
	webhookmanifests "github.com/dolphin-operator/dolphin/config/webhook"
	"github.com/dolphin-operator/dolphin/internal/freeport"
	"github.com/dolphin-operator/dolphin/internal/localcluster"
	"github.com/dolphin-operator/dolphin/internal/localnode"
	"github.com/dolphin-operator/dolphin/internal/realnode"
)

// operatorName is the name of the operator process in state.json and its log file.
const operatorName = "operator"

// defaultLocalDir is where `dolphin local` keeps its cluster: <cache>/local, with the same
// cache folder as hack/control-plane.sh (${DOLPHIN_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/dolphin}).
func defaultLocalDir() string { return filepath.Join(localcluster.CacheDir(), "local") }

// Command returns `dolphin local` and its subcommands.
func Command() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "local",
		Short: "Run a real Kubernetes control plane and the operator on this machine, without Docker",
		Long: "Run a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,\n" +
			"kube-scheduler, built from Go modules by hack/control-plane.sh) as host processes, and the\n" +
			"Dolphin operator on it. Everything lives in one folder (--dir); the processes keep\n" +
			"running after `up` returns, until `down`.\n\n" +
			"`up` also starts a node (needs root): by default a real one — containerd, the kubelet,\n" +
			"kube-proxy and CoreDNS, with Dolphin installed in the cluster from its image; this host\n" +
			"reaches Services at their ClusterIPs (`status` lists them). `--node process` starts the\n" +
			"host-process node instead: pods as host processes, images mapped to host binaries,\n" +
			"Services forwarded to 127.0.0.1 ports.",
	}
	cmd.AddCommand(newLocalUpCmd(), newLocalDownCmd(), newLocalStatusCmd(), newLocalAgentCmd(), newLocalProvisionerCmd())
	return cmd
}

// localUpOptions are the flags of `dolphin local up`.
type localUpOptions struct {
	dir, binDir, crdDir string
	podCIDR, bridge     string
	timeout             time.Duration
	// s3 runs an S3 server for backups (versitygw) on the pods' gateway address, s3Port.
	s3        bool
	s3Port    int
	versitygw string
	// node is the node kind (nodeProcess or nodeReal); nodeBinDir and imagesDir are the real
	// node's binaries (hack/node.sh) and images (make images).
	node, nodeBinDir, imagesDir string
	// kubeProxyMinSync is the real node's kube-proxy minSyncPeriod (0: kube-proxy's default).
	kubeProxyMinSync time.Duration
	// noDolphin starts the real node's cluster without Dolphin (no CRDs, no operator), for an
	// install another way (the Helm charts).
	noDolphin bool
}

func newLocalUpCmd() *cobra.Command {
	var o localUpOptions
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start (or reuse) the local control plane, the local node, the CRDs and the operator",
		Long: "Start the local control plane, install the CRDs and start the operator, showing progress,\n" +
			"then print how to connect. Idempotent: what already runs healthy is kept; a folder whose\n" +
			"processes died is restarted on the same etcd data and certificates.\n\n" +
			"The binaries come from --bin-dir, else KUBEBUILDER_ASSETS, else the folder that\n" +
			"hack/control-plane.sh builds into; when they are missing and ./hack/control-plane.sh\n" +
			"exists (run from the repository), it is run to build them (~8 min once).\n\n" +
			"The node needs root: run `sudo dolphin local up`.\n\n" +
			"--s3 also runs an S3 server for backups, versitygw (built by hack/versitygw.sh or\n" +
			"`make versitygw`; --versitygw or DOLPHIN_VERSITYGW name another binary), listening on the\n" +
			"pods' gateway address (the first address of --pod-cidr: http://10.244.0.1:7070 by default),\n" +
			"storing under <dir>/s3. It has a bucket `dolphin`; its credentials, generated once into\n" +
			"<dir>/s3-credentials.json, are in the Secret default/dolphin-s3 (keys access-key-id and\n" +
			"secret-access-key), for spec.backup.store.s3 of clusters in namespace default. `up` prints\n" +
			"a spec.backup to use. An `up` without --s3 stops an S3 server that an earlier --s3 started\n" +
			"(its objects stay in <dir>/s3 until `down --wipe`).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return localUp(cmd.Context(), cmd.OutOrStdout(), o) },
	}
	fs := cmd.Flags()
	fs.StringVar(&o.dir, "dir", defaultLocalDir(), "Folder of the local cluster (state, certificates, etcd data, logs).")
	fs.StringVar(&o.binDir, "bin-dir", "", "Folder with etcd, kube-apiserver, kube-controller-manager, kube-scheduler (default: see above).")
	fs.StringVar(&o.crdDir, "crd-dir", "", "Folder with the CRD manifests to install (default: the CRDs built into this binary).")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "Give up when the whole stack is not ready within this time.")
	fs.StringVar(&o.podCIDR, "pod-cidr", "", "Pod addresses, reachable from this host only (default 10.244.0.0/24; with --node real "+realnode.DefaultPodCIDR+").")
	fs.StringVar(&o.bridge, "bridge", "", "Host bridge for the pods (default dolphin0; with --node real "+realnode.DefaultBridge+"); use another one, with another --pod-cidr, for a second local cluster.")
	fs.BoolVar(&o.s3, "s3", false, "Also run an S3 server for backups (versitygw) on the pods' gateway address, with bucket dolphin and Secret default/dolphin-s3 (see above).")
	fs.IntVar(&o.s3Port, "s3-port", localcluster.DefaultS3Port, "Port of the S3 server (--s3) on the pods' gateway address.")
	fs.StringVar(&o.versitygw, "versitygw", "", "The versitygw binary for --s3 (default: $"+localcluster.EnvVersitygw+", else where hack/versitygw.sh builds it).")
	fs.StringVar(&o.node, "node", "", "The node: \"real\" runs containerd, kubelet, kube-proxy and CoreDNS (hack/node.sh) with the images of make images, and installs Dolphin in the cluster from its image; \"process\" runs pods as host processes (kept for comparisons and the operator-upgrade test). Default: the kind the folder was started with, else real.")
	fs.StringVar(&o.nodeBinDir, "node-bin-dir", "", "Folder with the real node's binaries (default: where hack/node.sh builds them).")
	fs.StringVar(&o.imagesDir, "images", "", "Folder of the images make images built (default: images in the user's cache folder).")
	fs.BoolVar(&o.noDolphin, "no-dolphin", false, "With --node real: start the cluster without Dolphin (no CRDs, no operator), to install it another way, e.g. with the Helm charts under charts/ (docs/install.md).")
	fs.DurationVar(&o.kubeProxyMinSync, "kube-proxy-min-sync-period", 0, "The real node's kube-proxy minSyncPeriod: the shortest time between two rewrites of its rules (default: kube-proxy's, 1s).")
	return cmd
}

// localUp is `dolphin local up`.
func localUp(ctx context.Context, out io.Writer, o localUpOptions) (err error) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if o.node == "" {
		var err error
		if o.node, err = runningNodeKind(o.dir); err != nil {
			return err
		}
	}
	// Each node kind has its own bridge and pod range, so a real node never takes over (and
	// removes at `down`) the bridge of a host-process node left on the defaults.
	if o.bridge == "" {
		o.bridge = map[bool]string{true: realnode.DefaultBridge, false: "dolphin0"}[o.node == nodeReal]
	}
	if o.podCIDR == "" {
		o.podCIDR = map[bool]string{true: realnode.DefaultPodCIDR, false: "10.244.0.0/24"}[o.node == nodeReal]
	}
	// A folder runs one kind of node: starting the other would restart the control plane and
	// stop the real node's processes without removing its containers and host changes.
	if o.node != nodeReal {
		if running, err := realNodeRuns(o.dir); err != nil {
			return err
		} else if running {
			return fmt.Errorf("%s runs a real node: stop it first (dolphin local down --dir %s), or pass --node real", o.dir, o.dir)
		}
	}
	if o.noDolphin && o.node != nodeReal {
		return fmt.Errorf("--no-dolphin needs --node real: the process node runs the operator on this host")
	}
	crds := crd.Bases()
	if o.crdDir != "" {
		if fi, err := os.Stat(o.crdDir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--crd-dir %s is not a folder", o.crdDir)
		}
		crds = os.DirFS(o.crdDir)
	}
	// Everything --s3 needs is checked before anything starts.
	var s3Binary, s3Host string
	if o.s3 {
		if o.s3Port < 1 || o.s3Port > 65535 {
			return fmt.Errorf("--s3-port %d is not a TCP port", o.s3Port)
		}
		var err error
		if s3Binary, err = localcluster.FindVersitygw(o.versitygw); err != nil {
			return err
		}
		if s3Host, err = localcluster.GatewayAddress(o.podCIDR); err != nil {
			return fmt.Errorf("--pod-cidr: %w", err)
		}
	}
	binDir, err := findOrBuildBinDir(ctx, out, o.binDir)
	if err != nil {
		return err
	}
	switch o.node {
	case nodeReal:
		return localUpReal(ctx, out, o, binDir, crds, s3Binary, s3Host, began)
	case nodeProcess:
	default:
		return fmt.Errorf("--node %q: want %q or %q", o.node, nodeProcess, nodeReal)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the dolphin binary for the operator: %w", err)
	}

	fmt.Fprintf(out, "Starting the local control plane in %s\n", o.dir)
	cp, err := localcluster.Start(ctx, localcluster.Options{
		Dir: o.dir, BinDir: binDir,
		Progress: func(c string, d time.Duration) { fmt.Fprintf(out, "  %-24s ready (%.1fs)\n", c, d.Seconds()) },
	})
	if err != nil {
		return fmt.Errorf("starting the control plane (logs in %s): %w", filepath.Join(o.dir, "logs"), err)
	}
	if cp.Reused {
		fmt.Fprintf(out, "  control plane already running at %s: reused\n", cp.APIServerURL())
	}
	// A failure from here on stops what this `up` started, so that nothing is left holding
	// ports and memory: everything when the control plane was started afresh, else every
	// add-on that runs as another process than before this call (started, or restarted with
	// another command line: the one it replaced is not brought back).
	before := addOnPIDs(cp)
	defer func() {
		if err != nil {
			err = errors.Join(err, undoLocalUp(out, cp, before))
		}
	}()

	step := time.Now()
	nodeStarted, err := ensureAddOnWithPorts(ctx, cp, func(fresh bool) (localcluster.AddOn, error) {
		nodePort, err := recordedPort(cp, agentName, "--health-probe-bind-address=127.0.0.1:", fresh)
		if err != nil {
			return localcluster.AddOn{}, err
		}
		return localcluster.AddOn{
			Name: agentName,
			Args: []string{exe, "local", "agent", "--kubeconfig=" + cp.Kubeconfig, "--dir=" + cp.Dir,
				"--pod-cidr=" + o.podCIDR, "--bridge=" + o.bridge,
				fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", nodePort)},
			Probe: localcluster.Probe{URL: fmt.Sprintf("http://127.0.0.1:%d/readyz", nodePort)},
		}, nil
	}, nil)
	if err != nil {
		return fmt.Errorf("starting the local node (needs root; log in %s): %w", filepath.Join(cp.Dir, "logs", agentName+".log"), err)
	}
	fmt.Fprintf(out, "  %-24s %s (%.1fs)\n", "node + service proxy", map[bool]string{true: "ready", false: "already running"}[nodeStarted], time.Since(step).Seconds())

	// The S3 server listens on the pods' gateway address, which exists once the node is up.
	var s3srv *localcluster.S3Server
	step = time.Now()
	if o.s3 {
		if s3srv, err = ensureLocalS3(ctx, cp, s3Binary, s3Host, o.s3Port); err != nil {
			return fmt.Errorf("starting the S3 server (--s3): %w", err)
		}
		fmt.Fprintf(out, "  %-24s %s (%.1fs): %s, bucket %s, Secret %s/%s\n", "s3 (backups)",
			map[bool]string{true: "ready", false: "already running"}[s3srv.Started], time.Since(step).Seconds(),
			s3srv.Endpoint, s3srv.Bucket, localS3Namespace, localS3Secret)
	} else if stopped, err := cp.RemoveAddOn(localcluster.S3Process); err != nil {
		return fmt.Errorf("stopping the S3 server (no --s3): %w", err)
	} else if stopped {
		fmt.Fprintf(out, "  %-24s stopped: no --s3 (its objects stay in %s)\n", "s3 (backups)", localcluster.S3DataDir(cp.Dir))
	}

	// The admission and conversion webhooks of a real install, served by the operator on this
	// host: the API server calls https://127.0.0.1:<port>, the certificate names 127.0.0.1, and
	// the operator is ready only once it serves it (so `up` returns with the webhooks answering).
	// The CRDs (their conversion webhook) and the webhook configurations name its port, so they
	// are installed again when the operator has to move to other ports.
	step = time.Now()
	started, err := ensureAddOnWithPorts(ctx, cp, func(fresh bool) (localcluster.AddOn, error) {
		return operatorAddOn(cp, exe, fresh)
	}, func(a localcluster.AddOn) error {
		webhookPort := flagPort(a.Args, "--webhook-port=")
		names, err := localcluster.InstallCRDs(ctx, cp.Kubeconfig, crds, webhookPort)
		if err != nil {
			return fmt.Errorf("installing CRDs: %w", err)
		}
		fmt.Fprintf(out, "  %-24s ready (%.1fs): %s\n", "CRDs", time.Since(step).Seconds(), strings.Join(names, ", "))
		hooks, err := localcluster.LocalWebhooks(webhookmanifests.Manifests, webhookPort)
		if err != nil {
			return err
		}
		if err := localcluster.EnsureWebhooks(ctx, cp.Kubeconfig, hooks); err != nil {
			return fmt.Errorf("registering the admission webhooks: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("starting the operator: %w", err)
	}
	verb := "ready"
	if !started {
		verb = "already running"
	}
	fmt.Fprintf(out, "  %-24s %s (%.1fs)\n", operatorName, verb, time.Since(step).Seconds())

	fmt.Fprintf(out, "\nDolphin local is up (%.1fs).\n\n", time.Since(began).Seconds())
	fmt.Fprintf(out, "  export KUBECONFIG=%s\n", cp.Kubeconfig)
	fmt.Fprintf(out, "  kubectl apply -f config/samples/mysqlcluster.yaml\n")
	fmt.Fprintf(out, "  kubectl wait --for=condition=Ready mysqlcluster/demo --timeout=120s\n")
	fmt.Fprintf(out, "  kubectl apply -f config/samples/mysqldatabase.yaml -f config/samples/mysqluser.yaml   # an application account and its database\n")
	fmt.Fprintf(out, "  dolphin local status --dir %s   # lists the 127.0.0.1 ports of the primary and replica Services\n\n", cp.Dir)
	if s3srv != nil {
		if err := printLocalS3(out, s3srv); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "kubectl %s is in %s. Logs: %s. Stop: dolphin local down --dir %s [--wipe]\n",
		localcluster.KubernetesVersion, binDir, filepath.Join(cp.Dir, "logs"), cp.Dir)
	return nil
}

// findOrBuildBinDir finds the control-plane binaries; when they are missing and no folder
// was named, it runs ./hack/control-plane.sh (from the repository) to build them.
func findOrBuildBinDir(ctx context.Context, out io.Writer, explicit string) (string, error) {
	dir, err := localcluster.FindBinDir(explicit)
	if err == nil || explicit != "" {
		return dir, err
	}
	script := filepath.Join("hack", "control-plane.sh")
	if _, serr := os.Stat(script); serr != nil {
		return "", fmt.Errorf("%w; run hack/control-plane.sh in the Dolphin repository, or pass --bin-dir", err)
	}
	fmt.Fprintf(out, "Building the control plane with %s (once; ~8 min on 2 cores)\n", script)
	cmd := exec.CommandContext(ctx, script)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the control plane with %s: %w", script, err)
	}
	var last string
	for sc := bufio.NewScanner(&stdout); sc.Scan(); {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			last = line
		}
	}
	return localcluster.FindBinDir(last)
}

// operatorAddOn is the operator's command line, on its recorded ports (new ones when fresh).
func operatorAddOn(cp *localcluster.ControlPlane, exe string, fresh bool) (localcluster.AddOn, error) {
	var ports [3]int
	for i, flag := range []string{"--webhook-port=", "--health-probe-bind-address=127.0.0.1:", "--metrics-bind-address=127.0.0.1:"} {
		p, err := recordedPort(cp, operatorName, flag, fresh)
		if err != nil {
			return localcluster.AddOn{}, err
		}
		ports[i] = p
	}
	webhookPort, probe, metrics := ports[0], ports[1], ports[2]
	return localcluster.AddOn{
		Name: operatorName,
		Args: []string{exe, "operator",
			"--kubeconfig=" + cp.Kubeconfig,
			"--leader-elect=false",
			// Plain HTTP on loopback: this is a single-user development stack.
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics), "--metrics-secure=false",
			"--instance-address=pod-ip", // pod IPs are reachable from this host; cluster DNS is not
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe),
			fmt.Sprintf("--webhook-port=%d", webhookPort), "--webhook-host=127.0.0.1", "--webhook-ips=127.0.0.1",
			"--webhook-namespace=default",
		},
		Probe: localcluster.Probe{URL: fmt.Sprintf("http://127.0.0.1:%d/readyz", probe)},
	}, nil
}

// addOnPortAttempts is how many times an add-on is started on newly chosen ports when another
// process took one of them first.
const addOnPortAttempts = 3

// ensureAddOnWithPorts runs cp.EnsureAddOn with the add-on that build returns, after prepare
// (when set) has installed what names its ports. When it fails because a port was taken in the
// meantime ("address already in use": ports are chosen before the process binds them), it
// builds the add-on again on new ports and retries, up to addOnPortAttempts times.
func ensureAddOnWithPorts(ctx context.Context, cp *localcluster.ControlPlane, build func(fresh bool) (localcluster.AddOn, error), prepare func(localcluster.AddOn) error) (started bool, err error) {
	for attempt := 1; ; attempt++ {
		a, err := build(attempt > 1)
		if err != nil {
			return started, err
		}
		if prepare != nil {
			if err := prepare(a); err != nil {
				return started, err
			}
		}
		s, err := cp.EnsureAddOn(ctx, a)
		started = started || s
		if err == nil || !freeport.InUse(err) || attempt == addOnPortAttempts {
			return started, err
		}
	}
}

// recordedPort keeps the port an add-on was started with (flag prefix up to the port) when it
// still runs or the port is free, unless fresh; otherwise it picks a free one.
func recordedPort(cp *localcluster.ControlPlane, name, flagPrefix string, fresh bool) (int, error) {
	if p := cp.Process(name); p != nil && !fresh {
		if port := flagPort(p.Args, flagPrefix); port != 0 && (p.Alive() || localcluster.PortFree(port)) {
			return port, nil
		}
	}
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// flagPort returns the port in the argument that starts with flagPrefix (up to the port), or 0.
func flagPort(args []string, flagPrefix string) int {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flagPrefix); ok {
			if port, err := strconv.Atoi(v); err == nil {
				return port
			}
		}
	}
	return 0
}

// localAddOns are the processes `dolphin local up` runs beside the control plane, in start order.
var localAddOns = []string{agentName, localcluster.S3Process, operatorName}

// addOnPIDs returns the PID of every add-on that runs now.
func addOnPIDs(cp *localcluster.ControlPlane) map[string]int {
	pids := map[string]int{}
	for _, name := range localAddOns {
		if p := cp.Process(name); p != nil && p.Alive() {
			pids[name] = p.PID
		}
	}
	return pids
}

// undoLocalUp stops what a failed `dolphin local up` started: the whole stack when it started
// the control plane afresh, else every add-on that runs as another process than before (the
// PIDs in before), newest first.
func undoLocalUp(out io.Writer, cp *localcluster.ControlPlane, before map[string]int) error {
	if !cp.Reused {
		fmt.Fprintf(out, "  stopping what this up started (the control plane was new)\n")
		if err := cp.Stop(); err != nil {
			return fmt.Errorf("stopping the local cluster after the failure: %w", err)
		}
		return nil
	}
	var errs []error
	for _, name := range slices.Backward(localAddOns) {
		p := cp.Process(name)
		if p == nil || !p.Alive() || p.PID == before[name] {
			continue
		}
		fmt.Fprintf(out, "  stopping %s (started by this up)\n", name)
		if _, err := cp.RemoveAddOn(name); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s after the failure: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func newLocalDownCmd() *cobra.Command {
	var dir string
	var wipe bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the operator and the local control plane; --wipe also deletes the folder",
		Long: "Stop every process `dolphin local up` started, newest first (the operator, then\n" +
			"kube-scheduler, kube-controller-manager, kube-apiserver, etcd last), waiting for each to\n" +
			"exit (SIGTERM, then SIGKILL after 15 s). Data and certificates stay for the next `up`\n" +
			"unless --wipe is given.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return localDown(cmd.OutOrStdout(), dir, wipe) },
	}
	cmd.Flags().StringVar(&dir, "dir", defaultLocalDir(), "Folder of the local cluster.")
	cmd.Flags().BoolVar(&wipe, "wipe", false, "Delete the folder (etcd data, certificates, logs, S3 objects) after stopping.")
	return cmd
}

// localDown is `dolphin local down`.
func localDown(out io.Writer, dir string, wipe bool) error {
	began := time.Now()
	cp, err := localcluster.Open(dir)
	switch {
	case err == nil:
		cp.OnStopped = func(name string, took time.Duration) {
			fmt.Fprintf(out, "  %-24s stopped (%.1fs)\n", name, took.Seconds())
		}
		// The control plane stops even when the node's clean-up failed (both errors are told).
		nodeErr := downRealNode(out, cp)
		if err := errors.Join(nodeErr, cp.Stop()); err != nil {
			return fmt.Errorf("stopping the local cluster in %s: %w", dir, err)
		}
		fmt.Fprintf(out, "Dolphin local is down (%.1fs).\n", time.Since(began).Seconds())
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(out, "No local cluster in %s.\n", dir)
	default:
		return err
	}
	if !wipe {
		return nil
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// Refuse to delete a folder that does not look like a local cluster (a mistyped --dir).
	if _, err := os.Stat(filepath.Join(dir, "state.json")); err != nil {
		return fmt.Errorf("not wiping %s: it holds no state.json, so it is not a dolphin local folder", dir)
	}
	// Sized volumes (localnode.SizedStorageClass) are mounted file systems: unmounted first.
	if err := localnode.UnmountVolumes(filepath.Join(dir, "node")); err != nil {
		return fmt.Errorf("wiping %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("wiping %s: %w", dir, err)
	}
	fmt.Fprintf(out, "Deleted %s.\n", dir)
	return nil
}

func newLocalStatusCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each process of the local cluster with its PID and health",
		Long:  "Show each process of the local cluster with its PID and health. Exits non-zero when any is not healthy.",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return localStatus(cmd.Context(), cmd.OutOrStdout(), dir) },
	}
	cmd.Flags().StringVar(&dir, "dir", defaultLocalDir(), "Folder of the local cluster.")
	return cmd
}

// localStatus is `dolphin local status`.
func localStatus(ctx context.Context, out io.Writer, dir string) error {
	cp, err := localcluster.Open(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Folder:     %s\nAPI server: %s\nKubeconfig: %s\n\n", cp.Dir, cp.APIServerURL(), cp.Kubeconfig)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tPID\tHEALTH\tLOG")
	unhealthy := 0
	health := cp.Health(ctx)
	for _, h := range health {
		state, pid := "healthy", "-"
		if h.PID > 0 {
			pid = strconv.Itoa(h.PID)
		}
		if h.Err != nil {
			state = h.Err.Error()
			unhealthy++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", h.Name, pid, state, h.Log)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	if data, err := os.ReadFile(filepath.Join(cp.Dir, "services.json")); err == nil {
		var routes map[string]int
		if json.Unmarshal(data, &routes) == nil && len(routes) > 0 {
			fmt.Fprintln(out, "\nServices on this host (forwarded to their ready endpoints):")
			keys := slices.Sorted(maps.Keys(routes))
			for _, k := range keys {
				fmt.Fprintf(out, "  %-40s 127.0.0.1:%d\n", k, routes[k])
			}
		}
	}
	if kind, err := runningNodeKind(cp.Dir); err == nil && kind == nodeReal && unhealthy == 0 && len(health) > 0 {
		if err := printClusterIPServices(ctx, out, cp.Kubeconfig); err != nil {
			fmt.Fprintf(out, "\nServices: %v\n", err)
		}
	}
	endpoint, s3Running := cp.S3Endpoint()
	if s3Running {
		fmt.Fprintf(out, "\nS3 for backups: %s, bucket %s, credentials in Secret %s/%s\n",
			endpoint, localcluster.S3Bucket, localS3Namespace, localS3Secret)
	}
	if len(health) == 0 || unhealthy > 0 {
		again := ""
		if endpoint != "" {
			again = " --s3" // an `up` without --s3 would stop it
		}
		return fmt.Errorf("%d of %d processes not healthy: run `dolphin local up --dir %s%s`", unhealthy, len(health), cp.Dir, again)
	}
	return nil
}

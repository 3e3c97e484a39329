package plugin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

func newConnectCmd(e *env) *cobra.Command {
	var root, replica bool
	var instance, client string
	cmd := &cobra.Command{
		Use:   "connect CLUSTER [USER] [-- MARIADB-ARGS...]",
		Short: "Open a mariadb shell on the primary (or a replica) as an account, through a port-forward",
		Long: "Forward a local port to the primary's pod (--replica: a replica's; --instance: that pod's),\n" +
			"and run the mariadb client there as USER (a MySQLUser's account; the only one when\n" +
			"omitted; --root for root), with the password from its Secret (passed in MYSQL_PWD, not\n" +
			"on the command line) and, when the cluster serves TLS, its CA. Arguments after -- go to\n" +
			"the client, e.g. -- -e 'SELECT @@hostname'.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			dash := cmd.ArgsLenAtDash()
			pos, extra := args, []string(nil)
			if dash >= 0 {
				pos, extra = args[:dash], args[dash:]
			}
			if len(pos) < 1 || len(pos) > 2 {
				return fmt.Errorf("want CLUSTER [USER], got %v", pos)
			}
			mc, err := e.cluster(ctx, pos[0])
			if err != nil {
				return err
			}
			user := ""
			if len(pos) == 2 {
				user = pos[1]
			}
			a, err := e.account(ctx, mc, user, root)
			if err != nil {
				return err
			}
			pod, err := pickInstance(mc, instance, replica)
			if err != nil {
				return err
			}
			port, stop, err := e.portForward(ctx, mc.Namespace, pod, mysqlPort)
			if err != nil {
				return err
			}
			defer stop()
			clientArgs := []string{"-h", "127.0.0.1", "-P", strconv.Itoa(port), "-u", a.User}
			if mc.Spec.TLS.Enabled {
				ca, err := e.secretValue(ctx, mc.Namespace, caSecret(mc), "ca.crt")
				if err != nil {
					return err
				}
				dir, err := os.MkdirTemp("", "kubectl-dolphin-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				caFile := filepath.Join(dir, "ca.crt")
				if err := os.WriteFile(caFile, []byte(ca), 0o600); err != nil {
					return err
				}
				// The server's name is not 127.0.0.1: the chain is verified, not the name.
				clientArgs = append(clientArgs, "--ssl-ca="+caFile)
			}
			fmt.Fprintf(e.errOut, "connecting to %s as %s through 127.0.0.1:%d\n", pod, a.User, port)
			// Not bound to the context: Ctrl-C is the client's (it kills the running query),
			// and the plugin, which ignores it meanwhile, waits for the client to end.
			c := exec.Command(client, append(clientArgs, extra...)...)
			c.Env = append(os.Environ(), "MYSQL_PWD="+a.Password)
			c.Stdin, c.Stdout, c.Stderr = cmd.InOrStdin(), e.out, e.errOut
			if err := c.Run(); err != nil {
				return fmt.Errorf("%s: %w", client, err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&root, "root", false, "Log in as root.")
	cmd.Flags().BoolVar(&replica, "replica", false, "Connect to a ready replica instead of the primary.")
	cmd.Flags().StringVar(&instance, "instance", "", "Connect to this instance (pod name).")
	cmd.Flags().StringVar(&client, "client", "mariadb", "The client program to run.")
	return cmd
}

// pickInstance chooses the pod to connect to.
func pickInstance(mc *dolphinv1.MySQLCluster, instance string, replica bool) (string, error) {
	switch {
	case instance != "":
		return instance, nil
	case !replica:
		if mc.Status.CurrentPrimary == "" {
			return "", fmt.Errorf("%s has no primary now (kubectl dolphin status %s); --instance connects to a given pod", mc.Name, mc.Name)
		}
		return mc.Status.CurrentPrimary, nil
	}
	for _, in := range mc.Status.Instances {
		if in.Role == dolphinv1.RoleReplica && in.Ready {
			return in.Name, nil
		}
	}
	return "", fmt.Errorf("%s has no ready replica", mc.Name)
}

// portForward forwards a free port of 127.0.0.1 to the pod's remote port, as kubectl
// port-forward does (WebSocket first, SPDY when the server does not take it), until stop.
func (e *env) portForward(ctx context.Context, ns, pod string, remote int) (local int, stop func(), err error) {
	cs, err := corev1client.NewForConfig(e.cfg)
	if err != nil {
		return 0, nil, err
	}
	url := cs.RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(e.cfg)
	if err != nil {
		return 0, nil, err
	}
	var dialer streamhttp.Dialer = spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	ws, err := portforward.NewSPDYOverWebsocketDialerForStreaming(url, e.cfg)
	if err != nil {
		return 0, nil, err
	}
	dialer = portforward.NewFallbackDialerForStreaming(ws, dialer, func(err error) bool {
		return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
	})
	stopCh, readyCh := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddressesForStreaming(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(remote)}, stopCh, readyCh, io.Discard, e.errOut)
	if err != nil {
		return 0, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-readyCh:
	case err := <-done:
		return 0, nil, fmt.Errorf("forwarding a port to %s/%s: %w", ns, pod, err)
	case <-ctx.Done():
		close(stopCh)
		return 0, nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		close(stopCh)
		return 0, nil, fmt.Errorf("forwarding a port to %s/%s: %v", ns, pod, err)
	}
	return int(ports[0].Local), func() { close(stopCh); <-done }, nil
}

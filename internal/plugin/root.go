// Package plugin is `kubectl dolphin`, the command line of Dolphin's users: the state of a
// cluster at a glance, the requests Dolphin takes by annotation (switchover, accepting a loss,
// approving a re-clone, pausing), credentials and a database shell, backups and restore
// manifests, a support bundle, and the operator's version. It talks to the API server only,
// with the standard kubectl flags (--kubeconfig, --context, -n), and links none of the
// operator (docs/design/0059).
package plugin

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// Version is the plugin's version, set at link time like the other binaries'
// (internal/cli.Version); `kubectl dolphin version` compares it with the operator's.
var Version = "dev"

// env is what every subcommand uses: the kubectl flags, the client they make, and where to
// print.
type env struct {
	flags  *genericclioptions.ConfigFlags
	out    io.Writer
	errOut io.Writer
	cfg    *rest.Config
	c      client.Client
}

// NewRootCmd returns `kubectl dolphin` with its subcommands.
func NewRootCmd() *cobra.Command {
	e := &env{flags: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use:   "kubectl-dolphin",
		Short: "Operate Dolphin's MySQLClusters: status, switchover, credentials, backups, restore, support bundles",
		Long: "kubectl dolphin operates the MySQLClusters of the Dolphin operator through the Kubernetes API.\n" +
			"It takes kubectl's flags (--kubeconfig, --context, -n/--namespace) and needs no access to\n" +
			"the databases, except `connect`, which forwards a port to an instance.",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			e.out, e.errOut = cmd.OutOrStdout(), cmd.ErrOrStderr()
			return nil
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	e.flags.AddFlags(root.PersistentFlags())
	root.AddCommand(
		newStatusCmd(e),
		newSwitchoverCmd(e),
		newCutoverCmd(e),
		newVerifyCopyCmd(e),
		newFallBackCmd(e),
		newAcceptLossCmd(e),
		newRecloneCmd(e),
		newPauseCmd(e, true),
		newPauseCmd(e, false),
		newCredentialsCmd(e),
		newConnectCmd(e),
		newBackupCmd(e),
		newRestoreCmd(e),
		newReportCmd(e),
		newVersionCmd(e),
	)
	return root
}

// scheme holds the kinds the plugin reads and writes: Kubernetes' and Dolphin's v1beta1.
func scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := dolphinv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// client connects to the API server the flags name, once.
func (e *env) client() (client.Client, error) {
	if e.c != nil {
		return e.c, nil
	}
	cfg, err := e.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	s, err := scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	e.cfg, e.c = cfg, c
	return c, nil
}

// namespace is the namespace the flags or the kubeconfig's context name.
func (e *env) namespace() (string, error) {
	ns, _, err := e.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

// cluster reads the MySQLCluster name in the flags' namespace.
func (e *env) cluster(ctx context.Context, name string) (*dolphinv1.MySQLCluster, error) {
	c, err := e.client()
	if err != nil {
		return nil, err
	}
	ns, err := e.namespace()
	if err != nil {
		return nil, err
	}
	var mc dolphinv1.MySQLCluster
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &mc); err != nil {
		return nil, fmt.Errorf("reading MySQLCluster %s/%s: %w", ns, name, err)
	}
	return &mc, nil
}

// onCluster is a command's RunE that reads the MySQLCluster its first argument names, in the
// flags' namespace, and hands it to run.
func (e *env) onCluster(run func(ctx context.Context, mc *dolphinv1.MySQLCluster, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		mc, err := e.cluster(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		return run(cmd.Context(), mc, args)
	}
}

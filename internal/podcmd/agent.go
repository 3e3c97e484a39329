package podcmd

import (
	"context"
	"errors"
	goflag "flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/agentops"
	"github.com/dolphin-operator/dolphin/internal/instancemetrics"
	"github.com/dolphin-operator/dolphin/internal/podlayout"
)

// agentOptions are the flags of `dolphin agent`. The flags of the backup and clone functions
// (where the data and the server are) are an agentops.Config.
type agentOptions struct {
	listen, tokenFile, tlsCert, tlsKey string
	// metricsTokenFile and monitorPasswordFile default to the agent Secret's keys beside
	// tokenFile, so that pods whose command predates the flags serve metrics too.
	metricsTokenFile, monitorUser, monitorPasswordFile string
	shutdownTimeout                                    time.Duration
	zap                                                zap.Options
	wiring                                             agentops.Config
}

// newAgentCmd returns `dolphin agent`: the instance agent, a sidecar of every database pod that
// takes backups of the data next to it and streams clones, over HTTPS with a bearer token.
// (Not `dolphin local agent`, the local node.)
func newAgentCmd() *cobra.Command {
	var o agentOptions
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the instance agent: backups and clones of the database next to it, over HTTPS",
		Long: "Run the instance agent, a sidecar of every database pod: it takes backups of the\n" +
			"data directory next to it and streams clones for new instances, for the operator,\n" +
			"over TLS with a bearer token. The token and certificate files are re-read when they\n" +
			"change (a rotated Secret). On SIGTERM it cancels the running backup and stops.\n\n" +
			"GET /metrics serves the server's own metrics (mysqld_exporter's default collectors,\n" +
			"run as the monitor account over --socket) to scrapers presenting the metrics token.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", fmt.Sprintf(":%d", agent.DefaultPort), "address the HTTPS API listens on")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the bearer token requests must carry (required)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "PEM server certificate (required)")
	f.StringVar(&o.tlsKey, "tls-key", "", "PEM server key (required)")
	f.StringVar(&o.metricsTokenFile, "metrics-token-file", "",
		"file holding the bearer token scrapers of /metrics must carry (default: "+podlayout.AgentMetricsTokenKey+" beside --token-file)")
	f.StringVar(&o.monitorUser, "monitor-user", podlayout.MonitorUser, "account the metrics collectors log in as over --socket")
	f.StringVar(&o.monitorPasswordFile, "monitor-password-file", "",
		"file holding --monitor-user's password (default: "+podlayout.MonitorPasswordKey+" beside --token-file)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", agent.DefaultShutdownTimeout,
		"how long requests and the running backup may take to end after SIGTERM")
	f.StringVar(&o.wiring.Flavor, "flavor", "mariadb", `database flavor: "mariadb" or "mysql"`)
	f.StringVar(&o.wiring.DataDir, "datadir", "/var/lib/mysql", "the server's data directory")
	f.StringVar(&o.wiring.Socket, "socket", "", "the server's Unix socket, when a request names none")
	zfs := goflag.NewFlagSet("zap", goflag.ContinueOnError)
	o.zap.BindFlags(zfs)
	f.AddGoFlagSet(zfs)
	return cmd
}

func runAgent(ctx context.Context, o agentOptions) error {
	switch {
	case o.tokenFile == "":
		return errors.New("--token-file is required")
	case o.tlsCert == "" || o.tlsKey == "":
		return errors.New("--tls-cert and --tls-key are required")
	}
	log := zap.New(zap.UseFlagOptions(&o.zap)).WithName("agent")
	backupFn, cloneFn := o.wiring.Functions(log)
	opts := agent.ServerOptions{
		TokenFile: o.tokenFile, CertFile: o.tlsCert, KeyFile: o.tlsKey,
		Backup: backupFn, Clone: cloneFn, CloneUpgradeRecord: o.wiring.CloneUpgradeRecordFunc(), Reseed: o.wiring.ReseedFunc(), Keep: o.wiring.KeepFunc(), GTIDState: o.wiring.GTIDStateFunc(), EngineUpgrade: o.wiring.EngineUpgradeFunc(), StopReleasedFile: o.wiring.StopReleasedFile(), Logger: log, ShutdownTimeout: o.shutdownTimeout,
	}
	if o.wiring.Socket != "" {
		metrics, err := instancemetrics.Handler(instancemetrics.Options{Socket: o.wiring.Socket, User: o.monitorUser,
			PasswordFile: besideTokenFile(o.monitorPasswordFile, o.tokenFile, podlayout.MonitorPasswordKey), Logger: log.WithName("metrics")})
		if err != nil {
			// Backups, clones and the stop release matter more than metrics.
			log.Error(err, "Serving no metrics")
		} else {
			opts.Metrics = metrics
			opts.MetricsTokenFile = besideTokenFile(o.metricsTokenFile, o.tokenFile, podlayout.AgentMetricsTokenKey)
		}
	}
	srv, err := agent.NewServer(opts)
	if err != nil {
		return err
	}
	return srv.Serve(ctx, o.listen)
}

// besideTokenFile is file, or when empty the file named key in the token file's directory
// (the mounted agent Secret).
func besideTokenFile(file, tokenFile, key string) string {
	if file != "" {
		return file
	}
	return filepath.Join(filepath.Dir(tokenFile), key)
}

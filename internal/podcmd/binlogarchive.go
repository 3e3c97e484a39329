package podcmd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// binlogArchiveFlags are the flags of `dolphin binlog-archive`.
type binlogArchiveFlags struct {
	storeConfig, prefix              string
	sources                          []string
	replicaOnly                      bool
	user, passwordFile               string
	serverID                         uint32
	start                            string
	segmentMaxAge                    time.Duration
	listen, tokenFile, cert, keyFile string
	sourceCA, sourceServerName       string
}

// newBinlogArchiveCmd returns `dolphin binlog-archive`, the per-cluster Deployment that copies
// the binary log into the backup store for point-in-time recovery (spec.backup.continuousArchiving).
func newBinlogArchiveCmd() *cobra.Command {
	var f binlogArchiveFlags
	cmd := &cobra.Command{
		Use:   "binlog-archive",
		Short: "Copy a cluster's binary log into the backup store, continuously",
		Long: "Stream the binary log over the replication protocol from the first --source that answers\n" +
			"(the operator gives the replicas Service only, or the primary of a single instance) into\n" +
			"GTID-keyed segments under --prefix of the\n" +
			"store described by --store-config, resuming after the last archived segment (or after\n" +
			"--start when there is none), and serve its status over HTTPS with a bearer token at " + binlog.StatusPath + ".\n" +
			"After a failover it reconnects from the archived position to whichever source answers.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return f.run(ctx)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.storeConfig, "store-config", "", "file holding the backup store's configuration (JSON, as the operator writes it; required)")
	fs.StringVar(&f.prefix, "prefix", "", "key prefix of the archive in the store (required)")
	fs.StringSliceVar(&f.sources, "source", nil, "host:port of a server to read from, in order of preference (repeatable; required)")
	fs.StringVar(&f.user, "user", "", "account with REPLICATION SLAVE on the sources (required)")
	fs.BoolVar(&f.replicaOnly, "replica-only", false, "read only from read-only servers (replicas): a writable source found through a Service is refused and another tried")
	fs.StringVar(&f.passwordFile, "password-file", "", "file holding the account's password (required)")
	fs.Uint32Var(&f.serverID, "server-id", 0, "server_id the archiver registers with (no server or replica may use it; required)")
	fs.StringVar(&f.start, "start", "", "GTID position to archive after when the store holds no segment yet (a base backup's)")
	fs.DurationVar(&f.segmentMaxAge, "segment-max-age", binlog.DefaultSegmentMaxAge, "close a segment this long after its first transaction (the RPO)")
	fs.StringVar(&f.listen, "listen", ":9445", "address the status endpoint listens on")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token of the status endpoint (required)")
	fs.StringVar(&f.cert, "tls-cert", "", "PEM server certificate of the status endpoint (required)")
	fs.StringVar(&f.keyFile, "tls-key", "", "PEM server key (required)")
	fs.StringVar(&f.sourceCA, "source-ca", "", "PEM CA the sources' certificates must chain to: connect to them over TLS only (with --source-server-name)")
	fs.StringVar(&f.sourceServerName, "source-server-name", "", "name the sources' certificates are verified for (the Service's DNS name; the sources are dialled by address)")
	return cmd
}

func (f *binlogArchiveFlags) run(ctx context.Context) error {
	if f.storeConfig == "" || f.prefix == "" || len(f.sources) == 0 || f.user == "" || f.passwordFile == "" ||
		f.serverID == 0 || f.tokenFile == "" || f.cert == "" || f.keyFile == "" {
		return errors.New("--store-config, --prefix, --source, --user, --password-file, --server-id, --token-file, --tls-cert and --tls-key are required")
	}
	password, err := readSecretFile(f.passwordFile, "--password-file")
	if err != nil {
		return err
	}
	token, err := readSecretFile(f.tokenFile, "--token-file")
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(f.cert, f.keyFile)
	if err != nil {
		return fmt.Errorf("loading the TLS certificate: %w", err)
	}
	b, err := os.ReadFile(f.storeConfig)
	if err != nil {
		return fmt.Errorf("--store-config: %w", err)
	}
	var cfg objectstore.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("--store-config %s: %w", f.storeConfig, err)
	}
	store, err := objectstore.New(ctx, cfg)
	if err != nil {
		return fmt.Errorf("opening the backup store: %w", err)
	}
	sourceTLS, err := f.sourceTLS()
	if err != nil {
		return err
	}
	var candidates []binlog.Endpoint
	for _, s := range f.sources {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return fmt.Errorf("--source %q: %w", s, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return fmt.Errorf("--source %q: port: %w", s, err)
		}
		candidates = append(candidates, binlog.Endpoint{Host: host, Port: p, User: f.user, Password: password, TLS: sourceTLS, ReplicaOnly: f.replicaOnly})
	}
	log := zap.New().WithName("binlog-archive")
	a, err := binlog.NewArchiver(binlog.ArchiverOptions{
		Source: binlog.FirstAnswering(candidates...), Store: store, Prefix: f.prefix,
		ServerID: f.serverID, SegmentMaxAge: f.segmentMaxAge, Start: f.start, Log: log,
	})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", f.listen, err)
	}
	srv := &http.Server{
		Handler:           binlog.StatusHandler(a.Status, token),
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}},
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Info("archiving", "store", objectstore.Locate(store, f.prefix), "sources", f.sources, "status", l.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(l, "", "") }()
	archived := make(chan error, 1)
	go func() { archived <- a.Run(ctx) }()
	select {
	case err := <-served:
		return fmt.Errorf("serving the status: %w", err)
	case <-ctx.Done():
	}
	// Run discards the segment being written; the next run reads it again from the source.
	err = <-archived
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	return err
}

// readSecretFile reads a one-line secret (a password, a token) from path.
func readSecretFile(path, flag string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s %s is empty", flag, path)
	}
	return s, nil
}

// sourceTLS is the TLS configuration the sources are read over: their certificate verified
// against --source-ca for --source-server-name. Nil without --source-ca (plain connections).
func (f *binlogArchiveFlags) sourceTLS() (*tls.Config, error) {
	if f.sourceCA == "" {
		if f.sourceServerName != "" {
			return nil, errors.New("--source-server-name needs --source-ca")
		}
		return nil, nil
	}
	if f.sourceServerName == "" {
		return nil, errors.New("--source-ca needs --source-server-name")
	}
	pem, err := os.ReadFile(f.sourceCA)
	if err != nil {
		return nil, fmt.Errorf("--source-ca: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--source-ca %s holds no PEM certificate", f.sourceCA)
	}
	return &tls.Config{RootCAs: roots, ServerName: f.sourceServerName, MinVersion: tls.VersionTLS12}, nil
}

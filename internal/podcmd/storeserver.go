package podcmd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// storeServerFlags are the flags of `dolphin store-server`.
type storeServerFlags struct {
	listen, directory, tokenFile, certFile, keyFile string
}

// newStoreServerCmd returns `dolphin store-server`, the one pod that serves a
// PersistentVolumeClaim used as a backup store (spec.backup.store.pvc) to the agents, seed
// containers, verification pods and the operator.
func newStoreServerCmd() *cobra.Command {
	var f storeServerFlags
	cmd := &cobra.Command{
		Use:   "store-server",
		Short: "Serve a directory (a mounted PVC) as a backup store over HTTPS",
		Long: "Serve the objects under --directory over HTTPS with a bearer token: streamed uploads that\n" +
			"become visible only when complete (a cut or short upload leaves nothing), reads, listing\n" +
			"and deletion. A full volume fails the upload with 507 and a message saying what to do.\n" +
			"The certificate and token are read at start; the operator rolls the pod when it renews them.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return f.run(ctx)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", ":9444", "address to listen on")
	fs.StringVar(&f.directory, "directory", "", "the directory holding the store's objects (required)")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token clients must present (required)")
	fs.StringVar(&f.certFile, "tls-cert", "", "PEM server certificate (required)")
	fs.StringVar(&f.keyFile, "tls-key", "", "PEM server key (required)")
	return cmd
}

func (f *storeServerFlags) run(ctx context.Context) error {
	if f.directory == "" || f.tokenFile == "" || f.certFile == "" || f.keyFile == "" {
		return errors.New("--directory, --token-file, --tls-cert and --tls-key are required")
	}
	token, err := os.ReadFile(f.tokenFile)
	if err != nil {
		return fmt.Errorf("--token-file: %w", err)
	}
	if strings.TrimSpace(string(token)) == "" {
		return fmt.Errorf("--token-file %s is empty", f.tokenFile)
	}
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return fmt.Errorf("loading the TLS certificate: %w", err)
	}
	store, err := objectstore.NewDirectory(f.directory)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", f.listen, err)
	}
	srv := &http.Server{
		Handler:           objectstore.NewHTTPHandler(store, strings.TrimSpace(string(token))),
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}},
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
	}
	fmt.Fprintf(os.Stderr, "dolphin store-server: serving %s on %s\n", store.Describe(), l.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(l, "", "") }()
	select {
	case err := <-done:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	// Uploads in flight are cut: their objects are never committed, so nothing half-written
	// is left behind.
	shutdown, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
	}
	return nil
}

package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"

	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// NewServer is a webhook server that serves the certificate of certs, and runs certs (issue,
// renewal, CA injection) for as long as it runs itself.
//
// The manager starts webhook servers before it waits for its caches, and the caches may need
// the server: listing MySQLClusters still stored as v1alpha1 (written by an earlier release)
// calls the conversion webhook, which the API server reaches only once the CA is injected.
// A certificate manager added as an ordinary runnable would start after the caches synced:
// never, in that case.
func NewServer(opts crwebhook.Options, certs *CertManager) crwebhook.Server {
	opts.TLSOpts = append(opts.TLSOpts, func(c *tls.Config) {
		c.GetCertificate = certs.GetCertificate
		c.NextProtos = []string{"http/1.1"} // no HTTP/2, as for metrics
	})
	return &server{Server: crwebhook.NewServer(opts), certs: certs}
}

// NewServerFromDir is the webhook server serving the certificate in dir (tls.crt, tls.key),
// which someone else issues and renews: controller-runtime reloads the files when they change.
func NewServerFromDir(opts crwebhook.Options, dir string) crwebhook.Server {
	opts.CertDir = dir
	opts.TLSOpts = append(opts.TLSOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	return crwebhook.NewServer(opts)
}

type server struct {
	crwebhook.Server
	certs *CertManager
}

// Start runs the certificate manager and the server until ctx ends, and returns when both
// have stopped.
func (s *server) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var certErr error
	wg.Go(func() { certErr = s.certs.Start(ctx) })
	err := s.Server.Start(ctx)
	cancel()
	wg.Wait()
	return errors.Join(err, certErr)
}

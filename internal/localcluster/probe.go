package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// How a Probe connects.
const (
	// ProbePlain is plain HTTP (etcd's client port, the operator's probe port).
	ProbePlain = ""
	// ProbeInsecureTLS is HTTPS without verifying the server: kube-controller-manager and
	// kube-scheduler serve with self-signed certificates; /healthz needs no client identity.
	ProbeInsecureTLS = "insecure"
	// ProbeAdminTLS is HTTPS verified against the cluster CA, with the admin client
	// certificate (kube-apiserver's /readyz).
	ProbeAdminTLS = "admin"
)

// probeTimeout bounds one probe request.
const probeTimeout = 2 * time.Second

// Probe is an HTTP health check of a process: healthy means a 200 answer.
type Probe struct {
	// URL is the health endpoint, e.g. https://127.0.0.1:6443/readyz.
	URL string `json:"url"`
	// TLS is one of ProbePlain, ProbeInsecureTLS, ProbeAdminTLS.
	TLS string `json:"tls,omitempty"`
}

// Check calls the probe once. pki is needed for ProbeAdminTLS only.
func (pr Probe) Check(ctx context.Context, pki *PKI) error {
	if pr.URL == "" {
		return nil
	}
	client, err := pr.client(pki)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pr.URL, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", pr.URL, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe %s: %s: %s", pr.URL, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func (pr Probe) client(pki *PKI) (*http.Client, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	switch pr.TLS {
	case ProbePlain:
	case ProbeInsecureTLS:
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // self-signed component serving certs on loopback
	case ProbeAdminTLS:
		if pki == nil {
			return nil, fmt.Errorf("probe %s needs the cluster PKI", pr.URL)
		}
		cfg, err := pki.adminTLS()
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = cfg
	default:
		return nil, fmt.Errorf("probe %s: unknown TLS mode %q", pr.URL, pr.TLS)
	}
	return &http.Client{Transport: tr, Timeout: probeTimeout}, nil
}

// adminTLS is a client TLS configuration trusting the cluster CA, presenting the admin certificate.
func (p *PKI) adminTLS() (*tls.Config, error) {
	caPEM, err := os.ReadFile(p.CACert())
	if err != nil {
		return nil, fmt.Errorf("reading CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no certificate", p.CACert())
	}
	pair, err := tls.LoadX509KeyPair(p.CertKey("admin"))
	if err != nil {
		return nil, fmt.Errorf("loading admin certificate: %w", err)
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// waitReady polls the probe of p every 100 ms until it answers 200, the process exits, or
// timeout passes. Errors carry the end of the process's log.
func waitReady(parent context.Context, p *Process, pki *PKI, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if !p.Alive() {
			return p.exitError()
		}
		if last = p.Probe.Check(ctx, pki); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if err := parent.Err(); err != nil {
				return fmt.Errorf("waiting for %s: %w", p.Name, err)
			}
			return fmt.Errorf("%s not ready within %s (last probe: %w); last lines of %s:\n%s",
				p.Name, timeout, last, p.Log, logTail(p.Log, 15))
		case <-tick.C:
		}
	}
}

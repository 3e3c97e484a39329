package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dolphin-operator/dolphin/internal/binlog"
)

// DefaultClientTimeout bounds each API call, and the wait for a clone's first byte, when
// ClientOptions.Timeout is zero.
const DefaultClientTimeout = 30 * time.Second

// ErrCloneFailed is wrapped by the error a clone stream's Read returns when the agent reported
// a failure (or no outcome) at the end of the stream.
var ErrCloneFailed = errors.New("the clone stream failed")

// ClientOptions configure a Client. BaseURL, Token and CACertPEM are required.
type ClientOptions struct {
	// BaseURL is the agent, "https://host:port" (a pod IP will do: see ServerName).
	BaseURL string
	// Token is the bearer token the agent expects.
	Token string
	// CACertPEM holds the CA certificate(s) the agent's certificate must chain to; nothing
	// else is trusted. Several PEM certificates may be given, e.g. the old and the new CA while
	// a CA is being replaced.
	CACertPEM []byte
	// ServerName is the name the agent's certificate must carry (AgentServerName), whatever
	// address BaseURL dials. Empty means BaseURL's host.
	ServerName string
	// Timeout bounds each API call and the wait for a clone's first byte
	// (DefaultClientTimeout when zero). A clone's stream itself is bounded only by its context.
	Timeout time.Duration
}

// Client talks to one instance agent. It is safe for concurrent use.
type Client struct {
	base    *url.URL
	token   string
	timeout time.Duration
	http    *http.Client
}

// StatusError is an agent's answer with an unexpected HTTP status. It wraps ErrUnknownBackup
// for a 404 about a backup and ErrBackupRunning for a 409.
type StatusError struct {
	// Agent is the agent's base URL; Op the request, e.g. "GET /v1/backups/x".
	Agent, Op string
	// StatusCode is the HTTP status; Message the agent's error message.
	StatusCode int
	Message    string
	// RunningID names the running backup, on a 409.
	RunningID string

	kind error
}

// Error names the agent, the request, the status and the agent's message.
func (e *StatusError) Error() string {
	return fmt.Sprintf("agent %s: %s: %d %s: %s", e.Agent, e.Op, e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Unwrap returns ErrUnknownBackup, ErrBackupRunning, binlog.ErrBinlogsPurged,
// binlog.ErrBinlogBeingWritten or nil.
func (e *StatusError) Unwrap() error { return e.kind }

// NewClient checks the options and builds a client; it does not contact the agent.
func NewClient(opts ClientOptions) (*Client, error) {
	base, err := url.Parse(strings.TrimRight(opts.BaseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("agent client: parsing the base URL: %w", err)
	}
	if base.Scheme != "https" || base.Host == "" {
		return nil, fmt.Errorf("agent client: the base URL %q is not https://host:port", opts.BaseURL)
	}
	token := strings.TrimSpace(opts.Token)
	if token == "" || strings.ContainsAny(token, "\r\n") {
		return nil, errors.New("agent client: a one-line token is required")
	}
	serverName := opts.ServerName
	if serverName == "" {
		serverName = base.Hostname()
	}
	tlsConfig, err := ClientTLSConfig(opts.CACertPEM, serverName)
	if err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultClientTimeout
	}
	transport := &http.Transport{
		// Pod addresses are never reached through an HTTP proxy.
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
	}
	return &Client{base: base, token: token, timeout: timeout, http: &http.Client{
		Transport: transport,
		// The API never redirects; following one would send the token elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// Agent is the agent's base URL, as errors name it.
func (c *Client) Agent() string { return c.base.String() }

// CloseIdleConnections closes the client's idle connections (when the agent goes away).
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// StartBackup starts the backup job req.ID, or returns its status when the agent already
// knows that ID. The error wraps ErrBackupRunning when another job runs.
func (c *Client) StartBackup(ctx context.Context, req BackupRequest) (BackupStatus, error) {
	var st BackupStatus
	err := c.call(ctx, http.MethodPost, "/v1/backups", req, &st, http.StatusOK, http.StatusAccepted)
	return st, err
}

// BackupStatus returns the status of the backup job id; the error wraps ErrUnknownBackup when
// the agent does not know it (it restarted since, or forgot the job).
func (c *Client) BackupStatus(ctx context.Context, id string) (BackupStatus, error) {
	var st BackupStatus
	if !validID(id) {
		return st, fmt.Errorf("agent %s: invalid backup ID %q", c.Agent(), id)
	}
	err := c.call(ctx, http.MethodGet, "/v1/backups/"+url.PathEscape(id), nil, &st, http.StatusOK)
	return st, err
}

// CancelBackup cancels the backup job id (it then fails with "cancelled"); cancelling a
// finished job does nothing. The error wraps ErrUnknownBackup when the agent does not know it.
func (c *Client) CancelBackup(ctx context.Context, id string) error {
	if !validID(id) {
		return fmt.Errorf("agent %s: invalid backup ID %q", c.Agent(), id)
	}
	return c.call(ctx, http.MethodDelete, "/v1/backups/"+url.PathEscape(id), nil, nil, http.StatusOK, http.StatusAccepted)
}

// Seed sends the operator's instruction to `dolphin seed` and returns the status it started
// (Running), or the final one when the instance was seeded already (Succeeded). The error
// wraps ErrSeedRunning when an instruction runs; a StatusError with 422 says the instance
// cannot seed that way, 400 that the request is malformed.
func (c *Client) Seed(ctx context.Context, req SeedRequest) (SeedStatus, error) {
	var st SeedStatus
	err := c.call(ctx, http.MethodPost, "/v1/seed", req, &st, http.StatusOK, http.StatusAccepted)
	return st, err
}

// SeedStatus returns where the instance's seeding is (GET /v1/seed).
func (c *Client) SeedStatus(ctx context.Context) (SeedStatus, error) {
	var st SeedStatus
	err := c.call(ctx, http.MethodGet, "/v1/seed", nil, &st, http.StatusOK)
	return st, err
}

// Healthy reports whether the agent answers GET /healthz.
func (c *Client) Healthy(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/healthz", nil, nil, http.StatusOK)
}

// Clone starts a clone and returns its stream, which the caller must close. The stream's Read
// returns an error wrapping ErrCloneFailed at its end, instead of io.EOF, when the agent
// reported a failure or the outcome is missing; a broken connection is an error too. So a
// reader that reached io.EOF has the complete stream. ctx bounds the whole stream.
func (c *Client) Clone(ctx context.Context, req CloneRequest) (*CloneStream, error) {
	op := "POST /v1/clone"
	resp, err := c.do(ctx, http.MethodPost, "/v1/clone", req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer func() { _ = resp.Body.Close() }()
		return nil, c.statusError(op, resp)
	}
	return &CloneStream{agent: c.Agent(), resp: resp}, nil
}

// call sends a JSON request and decodes the JSON answer into out (unless nil), within the
// client's timeout.
func (c *Client) call(ctx context.Context, method, path string, in, out any, ok ...int) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	op := method + " " + path
	resp, err := c.do(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	for _, code := range ok {
		if resp.StatusCode != code {
			continue
		}
		if out == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxRequestBytes))
			return nil
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 16*MaxRequestBytes)).Decode(out); err != nil {
			return fmt.Errorf("agent %s: %s: decoding the answer: %w", c.Agent(), op, err)
		}
		return nil
	}
	serr := c.statusError(op, resp)
	if path == "/v1/seed" && resp.StatusCode == http.StatusConflict {
		serr.kind = ErrSeedRunning
	}
	if strings.HasPrefix(path, "/v1/backups") {
		switch resp.StatusCode {
		case http.StatusNotFound:
			serr.kind = ErrUnknownBackup
		case http.StatusConflict:
			serr.kind = ErrBackupRunning
		}
	}
	return serr
}

// do sends the request with the token and in (unless nil) as its JSON body.
func (c *Client) do(ctx context.Context, method, path string, in any) (*http.Response, error) {
	op := method + " " + path
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("agent %s: %s: encoding the request: %w", c.Agent(), op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, body)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %s: %w", c.Agent(), op, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %s: %w", c.Agent(), op, err)
	}
	return resp, nil
}

// statusError reads the agent's error message from resp.
func (c *Client) statusError(op string, resp *http.Response) *StatusError {
	e := &StatusError{Agent: c.Agent(), Op: op, StatusCode: resp.StatusCode}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var er ErrorResponse
	if json.Unmarshal(b, &er) == nil && er.Error != "" {
		e.Message, e.RunningID = er.Error, er.RunningID
		switch er.Code {
		case codePurged:
			e.kind = binlog.ErrBinlogsPurged
		case codeBeingWritten:
			e.kind = binlog.ErrBinlogBeingWritten
		}
	} else {
		e.Message = strings.TrimSpace(string(b))
	}
	return e
}

// CloneStream is a clone's body that checks the trailers at its end.
type CloneStream struct {
	agent string
	resp  *http.Response
	n     int64
	err   error // sticky once the stream ended
}

func (r *CloneStream) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.resp.Body.Read(p)
	r.n += int64(n)
	switch {
	case err == io.EOF:
		r.err = r.outcome()
	case err != nil:
		r.err = fmt.Errorf("agent %s: clone: the stream broke after %d bytes: %w", r.agent, r.n, err)
	}
	return n, r.err
}

// outcome is io.EOF when the trailers say the stream is complete, or the failure.
func (r *CloneStream) outcome() error {
	t := r.resp.Trailer
	switch status := t.Get(CloneStatusTrailer); status {
	case "ok":
	case "":
		return fmt.Errorf("agent %s: clone: %w: the stream ended after %d bytes without an outcome", r.agent, ErrCloneFailed, r.n)
	default:
		msg := t.Get(CloneErrorTrailer)
		if msg == "" {
			msg = "status " + strconv.Quote(status)
		}
		return fmt.Errorf("agent %s: clone: %w after %d bytes: %s", r.agent, ErrCloneFailed, r.n, msg)
	}
	if sent, err := strconv.ParseInt(t.Get(CloneBytesTrailer), 10, 64); err != nil || sent != r.n {
		return fmt.Errorf("agent %s: clone: %w: received %d bytes, the agent sent %q", r.agent, ErrCloneFailed, r.n, t.Get(CloneBytesTrailer))
	}
	return io.EOF
}

// Close ends the stream (early, when it is not read to its end).
func (r *CloneStream) Close() error { return r.resp.Body.Close() }

// UpgradeRecord is the source's mariadb-upgrade record (CloneUpgradeRecordTrailer) once the
// stream was read to its end and complete; "" before, after a failure, or when the source sent
// none.
func (r *CloneStream) UpgradeRecord() string {
	if r.err != io.EOF { //nolint:errorlint // exactly the complete stream's end, never a wrapped error
		return ""
	}
	return r.resp.Trailer.Get(CloneUpgradeRecordTrailer)
}

// ClientTLSConfig is the TLS configuration of a client of an agent (or of a server that
// presents the agents' certificate): it trusts only caPEM and verifies serverName.
func ClientTLSConfig(caPEM []byte, serverName string) (*tls.Config, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("agent client: CACertPEM holds no PEM certificate")
	}
	return &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS13}, nil
}

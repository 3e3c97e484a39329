package objectstore

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
	"strings"
	"syscall"
	"time"
)

// HTTPConfig is a store server: a pod that owns a volume (a PersistentVolumeClaim) and serves
// a directory store on it over HTTPS (NewHTTPHandler), so that backups can go to a volume
// that only one pod can mount.
type HTTPConfig struct {
	// URL is the store server's address, e.g. "https://name.namespace.svc:9444"; only https
	// is accepted, since the token travels with every request.
	URL string
	// CACertPEM, when set, holds the PEM certificates of the only authorities trusted to sign
	// the store server's certificate; when empty, the system's trusted authorities are used.
	CACertPEM []byte
	// ServerName, when set, is the DNS name verified in the store server's certificate
	// whatever host the URL dials (e.g. a ClusterIP); when empty, the URL's host is verified.
	ServerName string
	// Token is the bearer token the store server was started with. It is sent with every
	// request and never appears in messages.
	Token string
}

// Timeouts of a store server client. There is no overall timeout: an object's body streams
// for as long as it takes, bounded by the caller's context.
const (
	httpDialTimeout = 10 * time.Second
	httpTLSTimeout  = 10 * time.Second
	// httpAnswerTimeout bounds the wait for the response headers of a request without a
	// streamed body.
	httpAnswerTimeout = time.Minute
	// httpCommitTimeout bounds the wait for the answer to an upload once its body is sent:
	// the server fsyncs the whole object before it answers.
	httpCommitTimeout = 10 * time.Minute
	// httpDeleteBatch is about the most key bytes sent in one delete request, well below the
	// server's limit on JSON bodies.
	httpDeleteBatch = 256 << 10
)

// errNoAnswer is why a request is cancelled when the store server does not answer in time.
var errNoAnswer = errors.New("no answer from the store server in time")

// httpStore is a Store served by a store server.
type httpStore struct {
	base   string // scheme://host[/path], no trailing '/'
	token  string
	client *http.Client
}

// NewHTTP returns a Store whose objects are kept by the store server cfg names. Every request
// carries cfg.Token; the connection is TLS 1.2 or later, verified with cfg.CACertPEM and
// cfg.ServerName when set. Nothing is sent until the store is used.
func NewHTTP(cfg HTTPConfig) (Store, error) {
	u, err := url.Parse(cfg.URL)
	switch {
	case cfg.URL == "":
		return nil, errors.New("store server: no URL given: set it to the store server's address, e.g. https://name.namespace.svc:9444")
	case err != nil:
		return nil, fmt.Errorf("store server: the URL %q does not parse: %w", cfg.URL, err)
	case u.Scheme != "https":
		return nil, fmt.Errorf("store server: the URL %q is not https://: the token must not travel in clear text", u.Redacted())
	case u.Host == "":
		return nil, fmt.Errorf("store server: the URL %q has no host", u.Redacted())
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("store server: the URL %q has a user, query or fragment: give only scheme, host, port and path", u.Redacted())
	}
	if cfg.Token == "" {
		return nil, errors.New("store server: no token given: set the token the store server was started with")
	}
	if strings.IndexFunc(cfg.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return nil, errors.New("store server: the token contains white space or control characters (a trailing newline?): remove them")
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
	if len(cfg.CACertPEM) > 0 {
		tlsCfg.RootCAs = x509.NewCertPool()
		if !tlsCfg.RootCAs.AppendCertsFromPEM(cfg.CACertPEM) {
			return nil, errors.New("store server: the CA certificate holds no PEM certificate: give the PEM of the authority that signs the store server's certificate")
		}
	}
	transport := &http.Transport{
		Proxy:               nil, // the store server is inside the cluster
		DialContext:         (&net.Dialer{Timeout: httpDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: httpTLSTimeout,
		// An upload's body cannot be sent twice, so an upload on an idle connection the server
		// has just closed would fail. A store does few requests: each gets its own connection.
		DisableKeepAlives: true,
	}
	return &httpStore{
		base:  u.Scheme + "://" + u.Host + strings.TrimSuffix(u.EscapedPath(), "/"),
		token: cfg.Token,
		client: &http.Client{
			Transport: transport,
			// A redirect would carry the token elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// Describe returns "dolphin-store https://host:port/".
func (s *httpStore) Describe() string {
	return "dolphin-store " + s.base + "/"
}

// escapeKey escapes each '/'-separated element of key for a URL path.
func escapeKey(key string) string {
	elems := strings.Split(key, "/")
	for i, e := range elems {
		elems[i] = url.PathEscape(e)
	}
	return strings.Join(elems, "/")
}

func (s *httpStore) objectURL(key string) string { return s.base + "/v1/objects/" + escapeKey(key) }

func (s *httpStore) newRequest(ctx context.Context, method, target string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Describe(), err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	return req, nil
}

// do sends a request without a streamed body and returns its response when the status is
// 2xx, else the classified error. The response headers must come within httpAnswerTimeout.
// The caller closes the body.
func (s *httpStore) do(ctx context.Context, op, method, target string, body []byte) (*http.Response, error) {
	rctx, cancel := context.WithCancelCause(ctx)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := s.newRequest(rctx, method, target, rd)
	if err != nil {
		cancel(nil)
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	timer := time.AfterFunc(httpAnswerTimeout, func() { cancel(errNoAnswer) })
	resp, err := s.client.Do(req)
	if !timer.Stop() && err == nil {
		resp.Body.Close()
		err = errNoAnswer
	}
	if err != nil {
		if errors.Is(context.Cause(rctx), errNoAnswer) {
			err = fmt.Errorf("%w: %w", errNoAnswer, err)
		}
		cancel(nil)
		return nil, s.classify(ctx, op, err)
	}
	if resp.StatusCode/100 != 2 {
		defer cancel(nil)
		defer resp.Body.Close()
		return nil, s.statusErr(op, resp)
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases a request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel(nil)
	return err
}

// decode reads the JSON answer of op into v and closes the body.
func (s *httpStore) decode(op string, resp *http.Response, v any) error {
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v); err != nil {
		return fmt.Errorf("%s: %s: the store server's answer does not decode: %w", s.Describe(), op, err)
	}
	return nil
}

// Create starts a PUT whose body streams what is written; see httpUpload.
func (s *httpStore) Create(ctx context.Context, key string) (Upload, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: upload %s: %w", s.Describe(), key, err)
	}
	return newHTTPUpload(ctx, s, key)
}

// Open streams the object key; reads fail once ctx is done.
func (s *httpStore) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	op := "read " + key
	resp, err := s.do(ctx, op, http.MethodGet, s.objectURL(key), nil)
	if err != nil {
		return nil, err
	}
	return &httpReader{s: s, ctx: ctx, op: op, body: resp.Body}, nil
}

// httpReader is an object's body whose errors name the store and are classified.
type httpReader struct {
	s    *httpStore
	ctx  context.Context
	op   string
	body io.ReadCloser
}

func (r *httpReader) Read(p []byte) (int, error) {
	n, err := r.body.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = r.s.classify(r.ctx, r.op, err)
	}
	return n, err
}

func (r *httpReader) Close() error { return r.body.Close() }

// Stat describes the object key.
func (s *httpStore) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return ObjectInfo{}, err
	}
	op := "stat " + key
	resp, err := s.do(ctx, op, http.MethodGet, s.base+"/v1/stat/"+escapeKey(key), nil)
	if err != nil {
		return ObjectInfo{}, err
	}
	var o httpObject
	if err := s.decode(op, resp, &o); err != nil {
		return ObjectInfo{}, err
	}
	return ObjectInfo(o), nil
}

// List returns the objects under prefix in key order.
func (s *httpStore) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("list %q", prefix)
	resp, err := s.do(ctx, op, http.MethodGet, s.base+"/v1/list?prefix="+url.QueryEscape(prefix), nil)
	if err != nil {
		return nil, err
	}
	var objs []httpObject
	if err := s.decode(op, resp, &objs); err != nil {
		return nil, err
	}
	out := make([]ObjectInfo, len(objs))
	for i, o := range objs {
		out[i] = ObjectInfo(o)
	}
	return out, nil
}

// Delete removes the keys, in requests of at most about httpDeleteBatch bytes of keys.
func (s *httpStore) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	for len(keys) > 0 {
		n, size := 0, 0
		for n < len(keys) && (n == 0 || size+len(keys[n]) < httpDeleteBatch) {
			size += len(keys[n]) + 8
			n++
		}
		body, err := json.Marshal(httpDelete{Keys: keys[:n]})
		if err != nil {
			return fmt.Errorf("%s: delete: %w", s.Describe(), err)
		}
		op := fmt.Sprintf("delete %d objects", n)
		if n == 1 {
			op = "delete " + keys[0]
		}
		resp, err := s.do(ctx, op, http.MethodPost, s.base+"/v1/delete", body)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		keys = keys[n:]
	}
	return nil
}

// kindError is a classified error: its message is written for the store server, and
// errors.Is finds both its kind (ErrUnreachable, ErrTLS, ...) and its cause.
type kindError struct {
	msg  string
	kind error
	err  error
}

func (e *kindError) Error() string { return e.msg }

func (e *kindError) Unwrap() []error {
	if e.err == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.err}
}

// statusErr is the error of op answered with a status other than 2xx.
func (s *httpStore) statusErr(op string, resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body httpError
	if json.Unmarshal(raw, &body) != nil || body.Error == "" {
		body = httpError{Error: strings.TrimSpace(string(raw))}
		if len(body.Error) > 300 {
			body.Error = body.Error[:300] + "…"
		}
	}
	where := s.Describe()
	kind := func(k error, reason string) error {
		msg := fmt.Sprintf("%s: %s: %s", where, op, reason)
		if body.Error != "" {
			msg += ": " + body.Error
		}
		return &kindError{msg: msg, kind: k}
	}
	switch code := resp.StatusCode; {
	case code == http.StatusUnauthorized:
		return kind(ErrCredentials, "the store server refused the token (401 Unauthorized): use the token the store server was started with")
	case code == http.StatusNotFound && body.Code == httpCodeNotFound:
		return kind(ErrNotFound, "object not found")
	case code == http.StatusNotFound:
		return fmt.Errorf("%s: %s: the server has no such endpoint (%s): check that the URL is the store server's: %s", where, op, resp.Status, body.Error)
	case code == http.StatusInsufficientStorage:
		return kind(ErrStoreFull, "the store server's volume is full ("+resp.Status+")")
	case code == http.StatusBadRequest:
		return fmt.Errorf("%s: %s: the store server refused the request (%s): %s", where, op, resp.Status, body.Error)
	default:
		return fmt.Errorf("%s: %s: the store server failed (%s): %s", where, op, resp.Status, body.Error)
	}
}

// classify wraps err from the operation op, run on ctx, with the store's location and, when
// the cause is known, its kind and what to change. When ctx is done the caller cancelled or
// ran out of time, and that is what the error says.
func (s *httpStore) classify(ctx context.Context, op string, err error) error {
	where := s.Describe()
	switch ctx.Err() {
	case context.Canceled:
		return fmt.Errorf("%s: %s: cancelled: %w", where, op, err)
	case context.DeadlineExceeded:
		return fmt.Errorf("%s: %s: the deadline passed before the store server answered: %w", where, op, err)
	}
	if k, reason, hint, ok := httpClassifyErr(err); ok {
		return &kindError{msg: fmt.Sprintf("%s: %s: %s: %s: %v", where, op, reason, hint, err), kind: k, err: err}
	}
	return fmt.Errorf("%s: %s: %w", where, op, err)
}

// httpClassifyErr finds the kind of a transport error, why it happened and what to change;
// ok is false when the cause is not a known one.
func httpClassifyErr(err error) (kind error, reason, hint string, ok bool) {
	var (
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		certErr   x509.CertificateInvalidError
		verifyErr *tls.CertificateVerificationError
		recordErr tls.RecordHeaderError
		dnsErr    *net.DNSError
		netErr    net.Error
		caHint    = "give the CA certificate that signs the store server's certificate, and check that the URL points at the store server"
		runHint   = "check the URL's host and port, and that the store server pod is running and ready"
	)
	switch {
	case errors.Is(err, errNoAnswer):
		return ErrUnreachable, "the store server sent no answer in time", "check that the store server pod is running and not overloaded (see its logs)", true
	case errors.As(err, &unknownCA):
		return ErrTLS, "the store server's certificate is not signed by a trusted authority", caHint, true
	case errors.As(err, &hostErr):
		return ErrTLS, "the store server's certificate is not valid for the name " + hostErr.Host,
			"set the server name to a DNS name of the certificate, or issue the certificate for this name", true
	case errors.As(err, &certErr), errors.As(err, &verifyErr):
		return ErrTLS, "the store server's certificate is not valid", "check its validity dates and usage, and renew it; " + caHint, true
	case errors.As(err, &recordErr), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return ErrTLS, "the server does not speak TLS", "check that the URL's port is the store server's", true
	case errors.As(err, &dnsErr):
		return ErrUnreachable, "the host name " + dnsErr.Name + " does not resolve", "check the URL's host name (the store server's Service)", true
	case errors.Is(err, syscall.ECONNREFUSED):
		return ErrUnreachable, "connection refused", runHint, true
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return ErrUnreachable, "no route to host", runHint, true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return ErrUnreachable, "the connection was closed by the server", runHint + " (see its logs)", true
	case errors.As(err, &netErr) && netErr.Timeout():
		return ErrUnreachable, "timed out", "check the URL's host and port, and that no firewall or network policy blocks it", true
	}
	return nil, "", "", false
}

// httpUpload is a PUT whose chunked body is a pipe: Write writes into it while a goroutine
// runs the request. The request declares the trailer httpSizeTrailer, which Commit sets to
// the bytes written before ending the body; the server stores the object only when the body
// ends cleanly and the trailer matches. Abort, or the Create context ending, closes the pipe
// with an error: the request is cut and the server discards what it received.
type httpUpload struct {
	s    *httpStore
	key  string
	ctx  context.Context // Create's
	pw   *io.PipeWriter
	size []string // the trailer's value, set by Commit
	n    int64    // bytes written
	stop func() bool
	// cancel ends the request's context, with errNoAnswer after httpCommitTimeout.
	cancel context.CancelCauseFunc
	closed bool // Commit or Abort called

	started chan struct{} // closed at the transport's first read of the body
	done    chan struct{} // closed when the request has ended; then info and err are set
	info    ObjectInfo
	err     error
}

func newHTTPUpload(ctx context.Context, s *httpStore, key string) (*httpUpload, error) {
	pr, pw := io.Pipe()
	rctx, cancel := context.WithCancelCause(ctx)
	u := &httpUpload{
		s: s, key: key, ctx: ctx, pw: pw, size: make([]string, 1), cancel: cancel,
		started: make(chan struct{}), done: make(chan struct{}),
	}
	req, err := s.newRequest(rctx, http.MethodPut, s.objectURL(key), &firstRead{r: pr, started: u.started})
	if err != nil {
		cancel(nil)
		return nil, err
	}
	req.ContentLength = -1 // chunked
	req.Header.Set("Content-Type", "application/octet-stream")
	// Only the key is read when the headers are sent; the value is read after the body's EOF.
	req.Trailer = http.Header{httpSizeTrailer: u.size}
	go u.run(req, pr)
	// A cancelled context aborts the upload even if the caller never calls Abort.
	u.stop = context.AfterFunc(ctx, func() {
		pw.CloseWithError(fmt.Errorf("%s: upload %s: %w", s.Describe(), key, context.Cause(ctx)))
	})
	return u, nil
}

// firstRead is the request body: it tells when the transport starts reading it, which is
// after it has sent the headers (and read the trailer's key).
type firstRead struct {
	r       *io.PipeReader
	started chan struct{}
	once    bool
}

func (f *firstRead) Read(p []byte) (int, error) {
	if !f.once {
		f.once = true
		close(f.started)
	}
	return f.r.Read(p)
}

func (f *firstRead) Close() error { return f.r.Close() }

// run sends the request and records its outcome. Whenever it ends, the pipe is closed with
// the outcome, so that a Write blocked on a server that answered early returns that answer.
func (u *httpUpload) run(req *http.Request, pr *io.PipeReader) {
	defer close(u.done)
	op := "upload " + u.key
	resp, err := u.s.client.Do(req)
	if err != nil {
		if errors.Is(context.Cause(req.Context()), errNoAnswer) {
			err = fmt.Errorf("%w: %w", errNoAnswer, err)
		}
		u.err = u.s.classify(u.ctx, op, err)
	} else if resp.StatusCode != http.StatusOK {
		u.err = u.s.statusErr(op, resp)
		resp.Body.Close()
	} else {
		var o httpObject
		if u.err = u.s.decode(op, resp, &o); u.err == nil {
			u.info = ObjectInfo(o)
		}
	}
	if u.err != nil {
		pr.CloseWithError(u.err)
	} else {
		pr.CloseWithError(fmt.Errorf("%s: %s: the store server answered before the upload ended", u.s.Describe(), op))
	}
}

// Write sends p to the store server. Once the request has failed (the server refused the
// upload, the connection broke, the context ended) it returns why.
func (u *httpUpload) Write(p []byte) (int, error) {
	if u.closed {
		return 0, errUploadDone
	}
	n, err := u.pw.Write(p)
	u.n += int64(n)
	if err != nil {
		// The pipe was closed by run with the outcome, by the transport once it stopped
		// sending (run ends soon), or by the context watcher (the request is cancelled).
		<-u.done
		if u.err != nil {
			return n, u.err
		}
		return n, err
	}
	return n, nil
}

// Commit ends the body with the trailer and waits for the store server's answer, which
// comes once the object is stored (fsynced), within httpCommitTimeout.
func (u *httpUpload) Commit() (ObjectInfo, error) {
	if u.closed {
		return ObjectInfo{}, errUploadDone
	}
	u.closed = true
	defer u.stop()
	defer u.cancel(nil)
	if err := u.ctx.Err(); err != nil {
		// Do not let a clean end of the body race with the cancellation.
		u.pw.CloseWithError(err)
		<-u.done
		return ObjectInfo{}, u.s.classify(u.ctx, "upload "+u.key, err)
	}
	select {
	case <-u.started:
	case <-u.done:
	}
	u.size[0] = fmt.Sprint(u.n)
	timer := time.AfterFunc(httpCommitTimeout, func() { u.cancel(errNoAnswer) })
	defer timer.Stop()
	_ = u.pw.Close()
	<-u.done
	return u.info, u.err
}

// Abort cuts the request and waits for it to end; the server then discards the upload.
// After Commit it does nothing.
func (u *httpUpload) Abort() error {
	if u.closed {
		return nil
	}
	u.closed = true
	u.stop()
	u.pw.CloseWithError(errUploadAborted)
	u.cancel(errUploadAborted)
	<-u.done
	return nil
}

package objectstore

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The store server protocol (NewHTTPHandler serves it, NewHTTP is its client). Every request
// but GET /healthz carries "Authorization: Bearer <token>", else the answer is 401. Keys are
// '/'-separated, each element path-escaped, and follow the directory store's rules (else 400).
// Errors are JSON {"error": "...", "code": "..."}; objects are JSON {"key", "size", "modified"}.
//
//	PUT  /v1/objects/{key...}  chunked body, trailer Dolphin-Object-Size: its length → 200 object
//	GET  /v1/objects/{key...}  the object's bytes, with Content-Length → 200, or 404
//	GET  /v1/stat/{key...}     → 200 object, or 404
//	GET  /v1/list?prefix=...   → 200 [object...] in key order
//	POST /v1/delete            JSON {"keys": [...]}, at most httpMaxJSON bytes → 204
//	GET  /healthz              → 200 (no token needed)
//
// A PUT is stored only when its body ends cleanly and the trailer equals the bytes received;
// else, or when the connection breaks or the store fails, the upload is aborted and nothing is
// left. A full store answers 507.
const (
	// httpMaxJSON bounds JSON request bodies.
	httpMaxJSON = 1 << 20
	// httpCopyBuffer is the size of the reads of an upload's body.
	httpCopyBuffer = 256 << 10
	// httpDrainTimeout bounds how long a refused upload's body is read after the answer is
	// sent, so that the client gets the answer rather than a reset connection. The store's
	// client stops sending as soon as it has the answer.
	httpDrainTimeout = 30 * time.Second
)

// Error codes of the store server's JSON error bodies.
const (
	httpCodeNotFound   = "NotFound"
	httpCodeStoreFull  = "StoreFull"
	httpCodeBadRequest = "BadRequest"
	httpCodeAuth       = "Unauthorized"
	httpCodeNoEndpoint = "NoSuchEndpoint"
	httpCodeInternal   = "InternalError"
)

// httpSizeTrailer is the trailer of an upload that says how many bytes the client sent.
const httpSizeTrailer = "Dolphin-Object-Size"

// httpObject is ObjectInfo on the wire.
type httpObject struct {
	Key      string    `json:"key"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

// httpError is an error answer on the wire.
type httpError struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"`
}

// httpDelete is the body of POST /v1/delete.
type httpDelete struct {
	Keys []string `json:"keys"`
}

// httpHandler serves a Store; see NewHTTPHandler.
type httpHandler struct {
	st    Store
	token []byte
}

// NewHTTPHandler serves st (in a store server, a directory store on its volume) with the store
// server protocol, for NewHTTP clients. Requests must carry token as a bearer token; an empty
// token accepts no request. Serve it over TLS, with a ReadHeaderTimeout but no ReadTimeout or
// WriteTimeout, which would cut long uploads and downloads.
func NewHTTPHandler(st Store, token string) http.Handler {
	return &httpHandler{st: st, token: []byte(token)}
}

func (h *httpHandler) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && len(h.token) > 0 && subtle.ConstantTimeCompare([]byte(got), h.token) == 1
}

// ServeHTTP routes a request by hand rather than with http.ServeMux, which would redirect the
// non-canonical keys that must be refused with 400.
func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if p == "/healthz" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.methodNotAllowed(w, r, "GET")
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	if r.Method == http.MethodPut {
		// So that a refusal can be answered while the body still comes (see refuse). HTTP/2
		// is always full duplex, hence the error is of no interest.
		_ = http.NewResponseController(w).EnableFullDuplex()
	}
	if !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="dolphin-store"`)
		h.refuse(w, r, http.StatusUnauthorized, httpCodeAuth,
			errors.New("missing or wrong bearer token"))
		return
	}
	switch {
	case strings.HasPrefix(p, "/v1/objects/"):
		key := strings.TrimPrefix(p, "/v1/objects/")
		switch r.Method {
		case http.MethodGet:
			h.get(w, r, key)
		case http.MethodPut:
			h.put(w, r, key)
		default:
			h.methodNotAllowed(w, r, "GET, PUT")
		}
	case strings.HasPrefix(p, "/v1/stat/"):
		if r.Method != http.MethodGet {
			h.methodNotAllowed(w, r, "GET")
			return
		}
		h.stat(w, r, strings.TrimPrefix(p, "/v1/stat/"))
	case p == "/v1/list":
		if r.Method != http.MethodGet {
			h.methodNotAllowed(w, r, "GET")
			return
		}
		h.list(w, r)
	case p == "/v1/delete":
		if r.Method != http.MethodPost {
			h.methodNotAllowed(w, r, "POST")
			return
		}
		h.delete(w, r)
	default:
		h.refuse(w, r, http.StatusNotFound, httpCodeNoEndpoint, fmt.Errorf("no endpoint %s %s", r.Method, p))
	}
}

func (h *httpHandler) methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	h.refuse(w, r, http.StatusMethodNotAllowed, httpCodeBadRequest,
		fmt.Errorf("method %s not allowed on %s: use %s", r.Method, r.URL.Path, allow))
}

// writeJSON answers with v. The Content-Length lets a client read a refusal whole while the
// handler still drains the request body (see refuse).
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the answer failed","code":"InternalError"}`)
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// refuse answers with the JSON error err. For a PUT it then reads (and drops) what remains
// of the body for at most httpDrainTimeout: closing a connection with unread data would reset
// it, and the client could lose the answer.
func (h *httpHandler) refuse(w http.ResponseWriter, r *http.Request, status int, code string, err error) {
	writeJSON(w, status, httpError{Error: err.Error(), Code: code})
	if r.Method != http.MethodPut {
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	_ = rc.SetReadDeadline(time.Now().Add(httpDrainTimeout))
	_, _ = io.Copy(io.Discard, r.Body)
}

// storeErr answers with the error of the store: 404 for a missing object, 507 when the store
// is full, else 500.
func (h *httpHandler) storeErr(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		h.refuse(w, r, http.StatusNotFound, httpCodeNotFound, err)
	case errors.Is(err, ErrStoreFull):
		h.refuse(w, r, http.StatusInsufficientStorage, httpCodeStoreFull, err)
	default:
		h.refuse(w, r, http.StatusInternalServerError, httpCodeInternal, err)
	}
}

func (h *httpHandler) badRequest(w http.ResponseWriter, r *http.Request, err error) {
	h.refuse(w, r, http.StatusBadRequest, httpCodeBadRequest, err)
}

// put stores the body under key when it ends cleanly with a matching size trailer.
func (h *httpHandler) put(w http.ResponseWriter, r *http.Request, key string) {
	if err := checkKey(key); err != nil {
		h.badRequest(w, r, err)
		return
	}
	if _, ok := r.Trailer[httpSizeTrailer]; !ok {
		h.badRequest(w, r, fmt.Errorf("upload of %s: no trailer %s declared: send the body chunked, ending with that trailer set to its length", key, httpSizeTrailer))
		return
	}
	up, err := h.st.Create(r.Context(), key)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	buf := make([]byte, httpCopyBuffer)
	var n int64
	for {
		m, rerr := r.Body.Read(buf)
		if m > 0 {
			if _, err := up.Write(buf[:m]); err != nil {
				_ = up.Abort()
				h.storeErr(w, r, err)
				return
			}
			n += int64(m)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			_ = up.Abort()
			h.badRequest(w, r, fmt.Errorf("upload of %s: the body broke off after %d bytes, nothing was stored: %w", key, n, rerr))
			return
		}
	}
	if got := r.Trailer.Get(httpSizeTrailer); got != strconv.FormatInt(n, 10) {
		_ = up.Abort()
		h.badRequest(w, r, fmt.Errorf("upload of %s: %d bytes received but the trailer %s says %q: the upload was cut, nothing was stored", key, n, httpSizeTrailer, got))
		return
	}
	info, err := up.Commit()
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, httpObject(info))
}

// get streams the object key. A failure once the status is sent cuts the connection, so that
// the client sees an error rather than a short object.
func (h *httpHandler) get(w http.ResponseWriter, r *http.Request, key string) {
	if err := checkKey(key); err != nil {
		h.badRequest(w, r, err)
		return
	}
	info, err := h.st.Stat(r.Context(), key)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	rd, err := h.st.Open(r.Context(), key)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	defer rd.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rd); err != nil {
		panic(http.ErrAbortHandler)
	}
}

func (h *httpHandler) stat(w http.ResponseWriter, r *http.Request, key string) {
	if err := checkKey(key); err != nil {
		h.badRequest(w, r, err)
		return
	}
	info, err := h.st.Stat(r.Context(), key)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, httpObject(info))
}

func (h *httpHandler) list(w http.ResponseWriter, r *http.Request) {
	prefix := r.URL.Query().Get("prefix")
	if err := checkPrefix(prefix); err != nil {
		h.badRequest(w, r, err)
		return
	}
	infos, err := h.st.List(r.Context(), prefix)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	out := make([]httpObject, len(infos))
	for i, o := range infos {
		out[i] = httpObject(o)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *httpHandler) delete(w http.ResponseWriter, r *http.Request) {
	var req httpDelete
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, httpMaxJSON)).Decode(&req); err != nil {
		h.badRequest(w, r, fmt.Errorf("delete: the body is not JSON {\"keys\": [...]} of at most %d bytes: %w", httpMaxJSON, err))
		return
	}
	for _, k := range req.Keys {
		if err := checkKey(k); err != nil {
			h.badRequest(w, r, err)
			return
		}
	}
	if err := h.st.Delete(r.Context(), req.Keys...); err != nil {
		h.storeErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

package agent

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxTrailerError bounds the error message sent in CloneErrorTrailer.
const maxTrailerError = 1024

// clone serves POST /v1/clone: the Clone function's stream as the body, its outcome in the
// trailers. A failure before the first byte is an ordinary 500.
func (s *Server) clone(w http.ResponseWriter, r *http.Request) {
	var req CloneRequest
	if !decodeBody(w, r, &req) {
		return
	}
	log := s.log.WithValues("client", r.RemoteAddr)
	log.Info("Clone started", "db", req.DB)
	start := time.Now()
	w.Header().Set("Trailer", strings.Join([]string{CloneStatusTrailer, CloneErrorTrailer, CloneBytesTrailer, CloneUpgradeRecordTrailer}, ", "))
	record := s.cloneUpgradeRecord() // before the copy: an upgrade running meanwhile makes the two differ
	cw := &cloneWriter{w: w}
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("the clone panicked: %v", p)
			}
		}()
		return s.opts.Clone(r.Context(), req, cw)
	}()
	if err != nil && !cw.started {
		log.Info("Clone failed", "error", err.Error())
		w.Header().Del("Trailer")
		writeError(w, http.StatusInternalServerError, ErrorResponse{Error: "clone: " + err.Error()})
		return
	}
	cw.start()
	h := w.Header()
	h.Set(CloneBytesTrailer, strconv.FormatInt(cw.n, 10))
	if err != nil {
		log.Info("Clone failed", "error", err.Error(), "bytes", cw.n)
		h.Set(CloneStatusTrailer, "error")
		h.Set(CloneErrorTrailer, headerSafe(err.Error()))
		return
	}
	log.Info("Clone sent", "bytes", cw.n, "duration", time.Since(start).String())
	if record != "" && record == s.cloneUpgradeRecord() {
		h.Set(CloneUpgradeRecordTrailer, headerSafe(record))
	}
	h.Set(CloneStatusTrailer, "ok")
}

// cloneUpgradeRecord is the data directory's upgrade record, "" without CloneUpgradeRecord.
func (s *Server) cloneUpgradeRecord() string {
	if s.opts.CloneUpgradeRecord == nil {
		return ""
	}
	return s.opts.CloneUpgradeRecord()
}

// cloneWriter sends the 200 header before the first byte and counts the bytes.
type cloneWriter struct {
	w       http.ResponseWriter
	started bool
	n       int64
}

func (c *cloneWriter) start() {
	if c.started {
		return
	}
	c.started = true
	c.w.Header().Set("Content-Type", "application/octet-stream")
	c.w.Header().Set("Cache-Control", "no-store")
	c.w.WriteHeader(http.StatusOK)
}

func (c *cloneWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.start()
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// headerSafe makes s fit in a header value: one line, at most maxTrailerError bytes.
func headerSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxTrailerError {
		s = strings.ToValidUTF8(s[:maxTrailerError], "")
	}
	return s
}

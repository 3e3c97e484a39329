package agent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// ReseedRequest is the body of POST /v1/reseed: the operator's reason for discarding this
// instance's data (shown in the seed container's log).
type ReseedRequest struct {
	Reason string `json:"reason"`
	// Keep is the copy kept before this request (POST /v1/keep): the seed container makes it
	// again with the server stopped and keeps what was committed since. Nil when none was
	// kept (a re-clone without a copy, consented to).
	Keep *ReseedKeep `json:"keep,omitempty"`
}

// ReseedKeep names a kept copy and what it was measured against.
type ReseedKeep struct {
	Name         string `json:"name"`
	Instance     string `json:"instance"`
	Primary      string `json:"primary"`
	PrimaryState string `json:"primaryState"`
	// GTIDs the copy holds ("" when it holds none).
	GTIDs string `json:"gtids"`
}

// ReseedFunc marks the instance's data directory to be discarded and seeded again the next
// time its pod starts (it writes a marker; the running server is not touched).
type ReseedFunc func(ctx context.Context, req ReseedRequest) error

// reseed serves POST /v1/reseed.
func (s *Server) reseed(w http.ResponseWriter, r *http.Request) {
	var req ReseedRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: "decoding the reseed request: " + err.Error()})
		return
	}
	if strings.TrimSpace(req.Reason) == "" {
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: "a reason is required"})
		return
	}
	if err := s.opts.Reseed(r.Context(), req); err != nil {
		writeError(w, http.StatusInternalServerError, ErrorResponse{Error: err.Error()})
		return
	}
	s.log.Info("The data directory will be seeded again at the next start", "reason", req.Reason)
	writeJSON(w, http.StatusOK, struct{}{})
}

// Reseed asks the agent to mark its instance's data to be discarded and seeded again when its
// pod next starts (the operator then deletes the pod).
func (c *Client) Reseed(ctx context.Context, req ReseedRequest) error {
	resp, err := c.do(ctx, http.MethodPost, "/v1/reseed", req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c.statusError("POST /v1/reseed", resp)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

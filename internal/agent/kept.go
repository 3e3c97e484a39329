package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/dolphin-operator/dolphin/internal/binlog"
)

// KeepRequest is the body of POST /v1/keep: keep a copy of the transactions this instance
// holds and the primary lacks, before its data is discarded (docs/design/0044).
type KeepRequest struct {
	// Name of the copy (validID).
	Name string `json:"name"`
	// Instance names this instance (for the manifest).
	Instance string `json:"instance"`
	// Primary names the primary; PrimaryState is its @@gtid_binlog_state.
	Primary      string `json:"primary"`
	PrimaryState string `json:"primaryState"`
	// Reason is why the data is about to be discarded.
	Reason string `json:"reason"`
	// Store, when set, is the cluster's backup store (passed through like BackupRequest's):
	// the copy is uploaded there too, under StorePrefix, and survives the volume.
	Store       StoreConfig `json:"store,omitempty"`
	StorePrefix string      `json:"storePrefix,omitempty"`
}

// KeepResponse is the answer to POST /v1/keep.
type KeepResponse struct {
	// Copy is the copy's manifest; Transactions 0 when there was nothing to keep (no copy is
	// written then).
	Copy binlog.KeptCopy `json:"copy"`
	// Location says where the copy is, for people: e.g. "file:///var/lib/mysql/dolphin-kept-…".
	Location string `json:"location,omitempty"`
	// StoreLocation is where its upload to the backup store is ("" without a store).
	StoreLocation string `json:"storeLocation,omitempty"`
}

// KeepFunc makes the copy. Its error wraps binlog.ErrBinlogsPurged or
// binlog.ErrBinlogBeingWritten when those are the reason.
type KeepFunc func(ctx context.Context, req KeepRequest) (*KeepResponse, error)

// GTIDStateRequest is the body of POST /v1/gtid-state: read the instance's
// @@gtid_binlog_state with this account.
type GTIDStateRequest struct {
	DB DBConn `json:"db"`
}

// GTIDStateResponse answers POST /v1/gtid-state.
type GTIDStateResponse struct {
	State string `json:"state"`
}

// GTIDStateFunc reads the instance's @@gtid_binlog_state.
type GTIDStateFunc func(ctx context.Context, db DBConn) (string, error)

// Error codes of /v1/keep, in ErrorResponse.Code.
const (
	codePurged       = "binlogs-purged"
	codeBeingWritten = "binlog-being-written"
)

// keep serves POST /v1/keep.
func (s *Server) keep(w http.ResponseWriter, r *http.Request) {
	var req KeepRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: "decoding the keep request: " + err.Error()})
		return
	}
	if !validID(req.Name) || strings.TrimSpace(req.Primary) == "" {
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: "a valid name and the primary are required"})
		return
	}
	resp, err := s.opts.Keep(r.Context(), req)
	switch {
	case errors.Is(err, binlog.ErrBinlogsPurged):
		writeError(w, http.StatusUnprocessableEntity, ErrorResponse{Error: err.Error(), Code: codePurged})
	case errors.Is(err, binlog.ErrBinlogBeingWritten):
		writeError(w, http.StatusServiceUnavailable, ErrorResponse{Error: err.Error(), Code: codeBeingWritten})
	case err != nil:
		writeError(w, http.StatusInternalServerError, ErrorResponse{Error: err.Error()})
	default:
		s.log.Info("Kept a copy of the transactions the primary lacks", "name", req.Name, "transactions", resp.Copy.Transactions,
			"gtids", resp.Copy.GTIDs, "location", resp.Location, "storeLocation", resp.StoreLocation)
		writeJSON(w, http.StatusOK, resp)
	}
}

// gtidState serves POST /v1/gtid-state.
func (s *Server) gtidState(w http.ResponseWriter, r *http.Request) {
	var req GTIDStateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: "decoding the request: " + err.Error()})
		return
	}
	st, err := s.opts.GTIDState(r.Context(), req.DB)
	if err != nil {
		writeError(w, http.StatusInternalServerError, ErrorResponse{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, GTIDStateResponse{State: st})
}

// Keep asks the agent to keep a copy of what its instance holds beyond the primary. The
// error wraps binlog.ErrBinlogsPurged or binlog.ErrBinlogBeingWritten when the agent says so.
func (c *Client) Keep(ctx context.Context, req KeepRequest) (*KeepResponse, error) {
	var out KeepResponse
	if err := c.postJSON(ctx, "/v1/keep", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GTIDState reads the instance's @@gtid_binlog_state through its agent.
func (c *Client) GTIDState(ctx context.Context, db DBConn) (string, error) {
	var out GTIDStateResponse
	if err := c.postJSON(ctx, "/v1/gtid-state", GTIDStateRequest{DB: db}, &out); err != nil {
		return "", err
	}
	return out.State, nil
}

// postJSON posts in and decodes a 200 answer into out; other statuses are a *StatusError
// whose kind follows the ErrorResponse's code.
func (c *Client) postJSON(ctx context.Context, path string, in, out any) error {
	resp, err := c.do(ctx, http.MethodPost, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c.statusError("POST "+path, resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxRequestBytes)).Decode(out); err != nil {
		return errors.Join(errors.New("agent "+c.Agent()+": POST "+path+": decoding the answer"), err)
	}
	return nil
}

package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// EngineUpgradeRequest is the body of POST /v1/engine-upgrade: bring the instance's system
// tables up to its server's version (mariadb-upgrade), with this account.
type EngineUpgradeRequest struct {
	DB DBConn `json:"db"`
}

// EngineUpgradeResponse answers POST /v1/engine-upgrade.
type EngineUpgradeResponse struct {
	// From is the version the data directory recorded as upgraded to before ("" for none).
	From string `json:"from,omitempty"`
	// To is the version it records now: the server's.
	To string `json:"to"`
	// Ran is true when the tool upgraded something.
	Ran bool `json:"ran"`
	// Seconds is how long the tool ran.
	Seconds float64 `json:"seconds"`
}

// EngineUpgradeFunc runs the upgrade tool against the local server.
type EngineUpgradeFunc func(ctx context.Context, db DBConn) (EngineUpgradeResponse, error)

// engineUpgrade serves POST /v1/engine-upgrade.
func (s *Server) engineUpgrade(w http.ResponseWriter, r *http.Request) {
	var req EngineUpgradeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: "decoding the request: " + err.Error()})
		return
	}
	began := time.Now()
	resp, err := s.opts.EngineUpgrade(r.Context(), req.DB)
	if err != nil {
		writeError(w, http.StatusInternalServerError, ErrorResponse{Error: err.Error()})
		return
	}
	if resp.Ran {
		s.log.Info("Upgraded the system tables to the server's version", "from", resp.From, "to", resp.To,
			"took", time.Since(began).Round(time.Millisecond).String())
	}
	writeJSON(w, http.StatusOK, resp)
}

// EngineUpgrade asks the agent to bring its instance's system tables up to the server's
// version. An agent built before the endpoint answers 404 (a *StatusError).
func (c *Client) EngineUpgrade(ctx context.Context, db DBConn) (EngineUpgradeResponse, error) {
	var out EngineUpgradeResponse
	err := c.postJSON(ctx, "/v1/engine-upgrade", EngineUpgradeRequest{DB: db}, &out)
	return out, err
}

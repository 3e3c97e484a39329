package agent

import (
	"context"
	"fmt"
	"net/http"
	"os"
)

// releaseStop creates the file whose existence ends the server container's preStop hold
// (resources.StopReleasedFile, docs/design/0051): the operator has moved the primary role
// away from this instance, or it was none, and its server may stop. Creating a file that
// exists changes nothing.
func (s *Server) releaseStop(w http.ResponseWriter, _ *http.Request) {
	f, err := os.OpenFile(s.opts.StopReleasedFile, os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, ErrorResponse{Error: fmt.Sprintf("releasing the server's stop: %v", err)})
		return
	}
	s.log.Info("the server's stop released", "file", s.opts.StopReleasedFile)
	w.WriteHeader(http.StatusNoContent)
}

// ReleaseStop tells the agent that its instance's server may stop: the preStop hold of a
// deleted or evicted pod ends (docs/design/0051). An agent without the endpoint (a pod of an
// older template, which has no hold) answers 404, wrapped in a *StatusError.
func (c *Client) ReleaseStop(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/release-stop", nil, nil, http.StatusNoContent)
}

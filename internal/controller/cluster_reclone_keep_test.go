package controller

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/binlog"
)

// TestAgentTooOld: only an agent's 404 to the keep request means an agent before kept
// copies; other failures (purged logs, a server error, a network error) do not.
func TestAgentTooOld(t *testing.T) {
	old := fmt.Errorf("keeping: %w", &agent.StatusError{Op: "POST /v1/keep", StatusCode: http.StatusNotFound})
	if !agentTooOld(old) {
		t.Error("a 404 is not taken for an old agent")
	}
	for _, err := range []error{
		&agent.StatusError{Op: "POST /v1/keep", StatusCode: http.StatusInternalServerError},
		fmt.Errorf("x: %w", binlog.ErrBinlogsPurged),
		fmt.Errorf("dial tcp: connection refused"),
	} {
		if agentTooOld(err) {
			t.Errorf("%v taken for an old agent", err)
		}
	}
}

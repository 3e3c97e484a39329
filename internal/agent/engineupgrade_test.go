package agent

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// The engine-upgrade endpoint passes the caller's account to the function and answers what it
// did; a failure is a 500 with the function's words; an agent without the function answers
// 404, which the operator reads as an agent that predates it.
func TestEngineUpgradeEndpoint(t *testing.T) {
	a := startAgent(t, nil, nil)
	old := a.client(testToken)
	var se *StatusError
	if _, err := old.EngineUpgrade(t.Context(), DBConn{User: "dolphin"}); !errors.As(err, &se) || se.StatusCode != http.StatusNotFound {
		t.Fatalf("an agent without the function: %v, want a 404", err)
	}
	a.shutdown()

	var got DBConn
	fail := false
	a.opts.EngineUpgrade = func(_ context.Context, db DBConn) (EngineUpgradeResponse, error) {
		got = db
		if fail {
			return EngineUpgradeResponse{}, errors.New("mariadb-upgrade: exit status 1: Access denied")
		}
		return EngineUpgradeResponse{From: "10.11.19-MariaDB", To: "11.8.9-MariaDB", Ran: true, Seconds: 1.5}, nil
	}
	a.start(a.addr)
	c := a.client(testToken)
	res, err := c.EngineUpgrade(t.Context(), DBConn{User: "dolphin", Password: "secret"})
	if err != nil || !res.Ran || res.From != "10.11.19-MariaDB" || res.To != "11.8.9-MariaDB" || got.User != "dolphin" || got.Password != "secret" {
		t.Fatalf("upgrade: %+v, %v (the function got %s)", res, err, got)
	}
	fail = true
	if _, err := c.EngineUpgrade(t.Context(), DBConn{User: "dolphin"}); err == nil || !strings.Contains(err.Error(), "Access denied") {
		t.Fatalf("a failing upgrade: %v, want the tool's words", err)
	}
	if _, err := a.client("wrong").EngineUpgrade(t.Context(), DBConn{}); !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the token: %v, want a 401", err)
	}
}

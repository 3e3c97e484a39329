package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestAgentReseed(t *testing.T) {
	a := startAgent(t, nil, nil)
	var got []string
	a.shutdown()
	a.opts.Reseed = func(_ context.Context, req ReseedRequest) error {
		reason := req.Reason
		if reason == "fail" {
			return errors.New("disk full")
		}
		got = append(got, reason)
		return nil
	}
	a.start("127.0.0.1:0")
	ctx := context.Background()
	if err := a.client(testToken).Reseed(ctx, ReseedRequest{Reason: "errant: 0-1002-12 beyond 0-1-10"}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "errant: 0-1002-12 beyond 0-1-10" {
		t.Fatalf("reseed calls %q", got)
	}
	if err := a.client("wrong").Reseed(ctx, ReseedRequest{Reason: "x"}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong token: %v, want 401", err)
	}
	if err := a.client(testToken).Reseed(ctx, ReseedRequest{Reason: " "}); err == nil || !strings.Contains(err.Error(), "reason is required") {
		t.Fatalf("empty reason: %v", err)
	}
	if err := a.client(testToken).Reseed(ctx, ReseedRequest{Reason: "fail"}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("failing reseed: %v", err)
	}
	if len(got) != 1 {
		t.Fatalf("reseed calls %q after refused requests", got)
	}
}

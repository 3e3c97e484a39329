package topology

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// appInsert commits id on db-0 as the application account, in the background; the outcome
// arrives on the channel.
func (h *harness) appInsert(t *testing.T, id int) <-chan error {
	t.Helper()
	app, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s", appAccount.User, appAccount.Password, h.db.Instances[0].Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	done := make(chan error, 1)
	go func() {
		_, err := app.Exec("INSERT INTO app.rows VALUES (?)", id)
		done <- err
	}()
	return done
}

// appTable creates table app.rows on db-0 and the application account, and waits until
// every instance has them.
func (h *harness) appTable() {
	h.t.Helper()
	mustExec(h.t, h.sqlDB(0), "CREATE DATABASE app")
	mustExec(h.t, h.sqlDB(0), "CREATE TABLE app.rows (id INT PRIMARY KEY)")
	h.createAppAccount()
	h.waitSameRows("db-0", "db-1", "db-2")
}

// globalString reads the value of a SHOW GLOBAL VARIABLES or STATUS query on db-i.
func (h *harness) globalString(i int, query string) string {
	h.t.Helper()
	var name, v string
	if err := h.sqlDB(i).QueryRow(query).Scan(&name, &v); err != nil {
		h.t.Fatal(err)
	}
	return v
}

// TestServerDurabilityRequiredNeverAcknowledgesAlone: with spec.durability Required (the
// default), both replicas down for longer than the old 30 s fallback timeout: the application's
// write waits and is not acknowledged, the primary never falls back, the engine says why, and
// the write completes once a replica is back — and that replica holds it.
func TestServerDurabilityRequiredNeverAcknowledgesAlone(t *testing.T) {
	h := newHarness(t, 3)
	h.converge("three instances healthy", healthyWith("db-0"))
	if got := h.globalString(0, "SHOW GLOBAL VARIABLES LIKE 'rpl_semi_sync_master_timeout'"); got != "4294967295" {
		t.Fatalf("the primary's semi-sync timeout is %s ms, want 4294967295 (never)", got)
	}
	h.appTable()

	h.db.Instances[1].Stop(t)
	h.db.Instances[2].Stop(t)
	insert := h.appInsert(t, 1)
	restarted := false
	start := time.Now()
	var d Decision
	for time.Since(start) < 35*time.Second {
		select {
		case err := <-insert:
			t.Fatalf("the write returned (%v) after %s with both replicas down", err, time.Since(start).Round(time.Millisecond))
		case <-time.After(500 * time.Millisecond):
		}
		d, _ = h.e.Cycle(context.Background())
		restarted = restarted || slices.ContainsFunc(d.Plan, func(s Step) bool { return s.Kind == StepRestartSemiSyncSource })
	}
	if !d.NoSemiSyncReplica || !d.CommitsWaiting || d.SemiSyncFallback || !strings.Contains(d.Message, "commits wait until one is back (spec.durability Required)") {
		t.Fatalf("after 35 s: no replica %v, commits waiting %v, fallback %v, message %q", d.NoSemiSyncReplica, d.CommitsWaiting, d.SemiSyncFallback, d.Message)
	}
	if got := h.globalString(0, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_status'"); got != "ON" {
		t.Fatalf("Rpl_semi_sync_master_status=%s after 35 s: the primary fell back", got)
	}
	if got := h.globalString(0, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_no_tx'"); got != "0" {
		t.Fatalf("Rpl_semi_sync_master_no_tx=%s: the primary committed without an acknowledgement", got)
	}
	t.Logf("the write waited %s with both replicas down", time.Since(start).Round(time.Second))

	h.db.Instances[1].Start(t)
	back := time.Now()
	var insertErr error
wait:
	for {
		d, _ = h.e.Cycle(context.Background())
		restarted = restarted || slices.ContainsFunc(d.Plan, func(s Step) bool { return s.Kind == StepRestartSemiSyncSource })
		select {
		case insertErr = <-insert:
			break wait
		case <-time.After(200 * time.Millisecond):
			if time.Since(back) > time.Minute {
				t.Fatal("the write did not complete within 60 s of a replica's return")
			}
		}
	}
	switch {
	case insertErr == nil:
		t.Logf("the write was acknowledged %s after db-1 started", time.Since(back).Round(time.Millisecond))
	case restarted:
		// A stall restart (docs/design/0010) closes waiting connections instead of
		// acknowledging them: the client was never told "committed".
		t.Logf("the write's connection was closed by a stall restart: %v", insertErr)
		return
	default:
		t.Fatalf("the write failed: %v", insertErr)
	}
	// Acknowledged means db-1 received it; it applies it right after.
	var n int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := h.sqlDB(1).QueryRow("SELECT COUNT(*) FROM app.rows WHERE id = 1").Scan(&n); err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("db-1 does not hold the acknowledged write")
		}
	}
}

// TestServerDurabilityPreferredWaitsForConsent: with spec.durability Preferred the primary
// acknowledges alone once no replica answered for the fallback timeout (2 s here); the engine
// records it, and when that primary is then lost, no replica is promoted until a person
// accepts the loss, which the promotion then describes.
func TestServerDurabilityPreferredWaitsForConsent(t *testing.T) {
	h := newHarness(t, 3)
	h.cfg.Settings.AckAlone, h.cfg.Settings.FallbackAfter = true, 2*time.Second
	h.e.Close()
	h.e = New(h.cfg, Persisted{})
	h.converge("three instances healthy", healthyWith("db-0"))
	if got := h.globalString(0, "SHOW GLOBAL VARIABLES LIKE 'rpl_semi_sync_master_timeout'"); got != "2000" {
		t.Fatalf("the primary's semi-sync timeout is %s ms, want 2000", got)
	}
	h.appTable()

	h.db.Instances[1].Stop(t)
	h.db.Instances[2].Stop(t)
	select {
	case err := <-h.appInsert(t, 1):
		if err != nil {
			t.Fatalf("Preferred: the write failed instead of being acknowledged alone: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Preferred: the write was not acknowledged alone within 30 s")
	}
	d := h.converge("the fallback recorded", func(d Decision) bool { return d.SemiSyncFallback && d.AckedAlone != nil })
	alone := d.AckedAlone
	t.Logf("recorded: %s acknowledged alone since %s, up to %s", alone.Primary, alone.Since.Format(time.RFC3339), alone.UpTo)

	// The primary is lost; the replicas come back without the write.
	h.db.Instances[0].Kill(t)
	h.db.Instances[1].Start(t)
	h.db.Instances[2].Start(t)
	d = h.converge("the failover waits", func(d Decision) bool { return d.State == StatePrimaryLost && d.RestartLostPrimary == "db-0" })
	if !strings.Contains(d.Message, "acknowledged writes alone") || !strings.Contains(d.Message, "failover-accept-loss=db-0") {
		t.Fatalf("waiting message %q", d.Message)
	}
	// It keeps waiting.
	for range 10 {
		if d, _ = h.e.Cycle(context.Background()); d.Primary != "db-0" || slices.ContainsFunc(d.Plan, func(s Step) bool { return s.Kind == StepPromote }) {
			t.Fatalf("promoted without consent: %s plan %v (%s)", d.Primary, steps(d), d.Message)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if p := h.e.State().AckedAlone; p == nil || p.Primary != "db-0" {
		t.Fatalf("persisted record %+v while waiting", p)
	}

	if !h.e.AcceptFailoverLoss("db-0") {
		t.Fatal("no failover waiting for consent")
	}
	d = h.converge("promoted with consent", func(d Decision) bool { return d.Primary != "db-0" && d.LossAccepted != "" })
	if !strings.Contains(d.LossAccepted, "db-0 acknowledged alone since") || !strings.Contains(d.LossAccepted, alone.UpTo.String()) {
		t.Fatalf("loss accepted %q", d.LossAccepted)
	}
	t.Logf("promoted %s: %s", d.Primary, d.LossAccepted)
	if p := h.e.State().AckedAlone; p != nil {
		t.Fatalf("persisted record %+v after the accepted failover", p)
	}
}

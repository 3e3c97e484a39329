package topology

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"
)

// After a switchover, a client that reached the former primary after the fence — as one does
// through a Service kube-proxy has not moved yet — is disconnected once the Services have had
// time to move (formerPrimaryDisconnects), so that it reconnects to the new primary instead of
// reading from a replica; a client of the new primary keeps its connection.
func TestServerFormerPrimaryClientsDisconnectedAfterAPromotion(t *testing.T) {
	h := newHarness(t, 2)
	h.converge("two instances healthy", healthyWith("db-0"))
	admin := h.sqlDB(0)
	mustExec(t, admin, "CREATE DATABASE app")
	mustExec(t, admin, "CREATE TABLE app.rows (id INT PRIMARY KEY)")
	h.createAppAccount()
	h.waitSameRows("db-0", "db-1")

	h.e.RequestSwitchover("db-1")
	h.converge("switchover to db-1", healthyWith("db-1"))
	promoted := time.Now()
	appConn := func(i int) *sql.Conn {
		db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s&readTimeout=5s",
			appAccount.User, appAccount.Password, h.db.Instances[i].Addr()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		c, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM app.rows").Scan(new(int)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	stale, fresh := appConn(0), appConn(1)

	var killedAfter time.Duration
	for deadline := time.Now().Add(formerPrimaryDisconnects[1] + 5*time.Second); time.Now().Before(deadline) && killedAfter == 0; time.Sleep(200 * time.Millisecond) {
		if _, err := h.e.Cycle(context.Background()); err != nil {
			t.Logf("cycle: %v", err)
		}
		if err := stale.QueryRowContext(context.Background(), "SELECT 1").Scan(new(int)); err != nil {
			killedAfter = time.Since(promoted)
			t.Logf("the former primary's client was disconnected %.1fs after the promotion: %v", killedAfter.Seconds(), err)
		}
	}
	if killedAfter == 0 {
		t.Fatalf("a client of the former primary db-0 still connected %s after the promotion", formerPrimaryDisconnects[1]+5*time.Second)
	}
	if killedAfter < formerPrimaryDisconnects[1]-time.Second {
		t.Errorf("disconnected %s after the promotion, before the Services could move (%s)", killedAfter, formerPrimaryDisconnects[1])
	}
	if err := fresh.QueryRowContext(context.Background(), "SELECT 1").Scan(new(int)); err != nil {
		t.Errorf("the new primary's client was disconnected too: %v", err)
	}

	// An operator that stops right after its promotion leaves the disconnects to the next
	// one: a new engine started from the status (its lastPromotion) disconnects the former
	// primary's clients at once, the moments being past.
	h.e.Close()
	from := h.e.State()
	from.LastPromotion = &PromotionSeen{From: "db-0", At: promoted} // as the status records it
	h.e = New(h.cfg, from)
	late := appConn(0)
	disconnected := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !disconnected; time.Sleep(200 * time.Millisecond) {
		if _, err := h.e.Cycle(context.Background()); err != nil {
			t.Logf("cycle: %v", err)
		}
		disconnected = late.QueryRowContext(context.Background(), "SELECT 1").Scan(new(int)) != nil
	}
	if !disconnected {
		t.Error("a new engine did not disconnect the former primary's clients of a promotion it found in the status")
	}
}

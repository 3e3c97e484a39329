package topology

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"
)

// After a switchover the former primary refuses application logins for formerPrimaryRefusal —
// a client that reaches it through a Service kube-proxy has not moved yet is refused and tries
// again — then takes them again; its clients are disconnected at each step, a new engine puts
// back an init_connect an earlier one left refusing, and disconnects the clients of a promotion
// it finds in the status. A client of the new primary keeps its connection throughout.
func TestServerFormerPrimaryRefusesThenDisconnectsAfterAPromotion(t *testing.T) {
	h := newHarness(t, 2)
	h.converge("two instances healthy", healthyWith("db-0"))
	admin := h.sqlDB(0)
	mustExec(t, admin, "CREATE DATABASE app")
	mustExec(t, admin, "CREATE TABLE app.rows (id INT PRIMARY KEY)")
	h.createAppAccount()
	h.waitSameRows("db-0", "db-1")

	appConn := func(i int) (*sql.Conn, error) {
		db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s&readTimeout=5s",
			appAccount.User, appAccount.Password, h.db.Instances[i].Addr()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		c, err := db.Conn(context.Background())
		if err == nil {
			err = c.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM app.rows").Scan(new(int))
		}
		return c, err
	}
	alive := func(c *sql.Conn) bool {
		return c.QueryRowContext(context.Background(), "SELECT 1").Scan(new(int)) == nil
	}
	cycle := func() {
		if _, err := h.e.Cycle(context.Background()); err != nil {
			t.Logf("cycle: %v", err)
		}
	}

	h.e.RequestSwitchover("db-1")
	h.converge("switchover to db-1", healthyWith("db-1"))
	promoted := time.Now()
	fresh, err := appConn(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appConn(0); err == nil {
		t.Fatal("the former primary db-0 took an application login right after the promotion")
	} else {
		t.Logf("the former primary refused an application login: %v", err)
	}
	// Dolphin's own work on the former primary (mariadb-upgrade after a rollout restarted it,
	// a backup) runs as its account, busy: the disconnects leave it alone.
	busy := make(chan error, 1)
	go func() {
		_, err := admin.ExecContext(context.Background(), "DO SLEEP(?)", (formerPrimaryRefusal + time.Second).Seconds())
		busy <- err
	}()
	var back *sql.Conn
	for deadline := time.Now().Add(formerPrimaryRefusal + 5*time.Second); time.Now().Before(deadline) && back == nil; time.Sleep(200 * time.Millisecond) {
		cycle()
		if c, err := appConn(0); err == nil {
			back = c
			t.Logf("the former primary takes application logins again %.1fs after the promotion", time.Since(promoted).Seconds())
		}
	}
	switch {
	case back == nil:
		t.Fatalf("the former primary db-0 still refuses application logins %s after the promotion", formerPrimaryRefusal+5*time.Second)
	case time.Since(promoted) < formerPrimaryRefusal-time.Second:
		t.Errorf("logins taken again %s after the promotion, before the Services could move", time.Since(promoted))
	}
	if err := <-busy; err != nil {
		t.Errorf("a busy session of Dolphin's own account on the former primary was ended by the disconnects: %v", err)
	}
	if v := h.globalString(0, "SHOW GLOBAL VARIABLES LIKE 'init_connect'"); v != "" {
		t.Errorf("init_connect after the refusal %q, want the default (empty)", v)
	}
	if !alive(fresh) {
		t.Error("the new primary's client was disconnected")
	}

	// An engine stopped during a refusal leaves it: the next one puts the setting back.
	h.e.Close()
	mustExec(t, admin, "SET GLOBAL init_connect = ?", refusedLogin)
	st := h.e.State()
	st.LastPromotion = nil // a status that records no recent promotion
	h.e = New(h.cfg, st)
	cycle()
	if _, err := appConn(0); err != nil {
		t.Errorf("a new engine left the refusal an earlier one set: %v", err)
	}

	// An operator that stops right after its promotion leaves the disconnects to the next
	// one: a new engine started from the status (its lastPromotion) does them at once.
	late, err := appConn(0)
	if err != nil {
		t.Fatal(err)
	}
	h.e.Close()
	from := h.e.State()
	from.LastPromotion = &PromotionSeen{From: "db-0", At: promoted} // as the status records it
	h.e = New(h.cfg, from)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && alive(late); time.Sleep(200 * time.Millisecond) {
		cycle()
	}
	if alive(late) {
		t.Error("a new engine did not disconnect the former primary's clients of a promotion it found in the status")
	}
	for i := 0; i < 3; i++ { // the refusal it started ends too, the moments being past
		cycle()
	}
	if _, err := appConn(0); err != nil {
		t.Errorf("the former primary refuses logins after the new engine's catch-up: %v", err)
	}
	if !alive(fresh) {
		t.Error("the new primary's client was disconnected")
	}
}

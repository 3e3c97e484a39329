package topology

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// TestServerCredentialRotation rotates every password under an application writer while a
// replica is down, as the operator does when the credentials Secret changes: a new engine
// with the new generation and the old one as Previous. The instances that answer take the
// new passwords before the engine uses them, the replica is re-pointed with the new
// replication password (it reconnects after the rotation), the instance that was down
// catches up when it returns, and no write fails or is lost.
func TestServerCredentialRotation(t *testing.T) {
	h := newHarness(t, 3)
	h.e.cfg.Credentials.Generation = "g1"
	h.converge("three instances healthy", healthyWith("db-0"))
	mustExec(t, h.sqlDB(0), "CREATE DATABASE app")
	mustExec(t, h.sqlDB(0), "CREATE TABLE app.rows (id BIGINT PRIMARY KEY, v VARCHAR(20))")
	h.createAppAccount()
	for name, rec := range h.e.State().Instances {
		if rec.Credentials != "g1" {
			t.Fatalf("%s recorded with generation %q before the rotation, want g1", name, rec.Credentials)
		}
	}

	w := startGapWriter(t, h.db.Instances[0].Addr())
	h.db.Instances[2].Stop(t) // down during the rotation

	rotated := testAccounts
	rotated.Operator.Password = "op-Rotated-1"
	rotated.Replication.Password = "repl-Rotated-2"
	rotated.Monitor.Password = "mon-Rotated-3"
	rotated.Root = dbsql.Account{User: "root", Password: "root-Rotated-4"}
	cfg := h.e.cfg
	cfg.Credentials = Credentials{Accounts: rotated, Generation: "g2",
		Previous: []CredentialGeneration{{ID: "g1", Accounts: testAccounts}}, Bootstrap: cfg.Credentials.Bootstrap}
	from := h.e.State()
	h.e.Close()
	h.e = New(cfg, from)
	t.Cleanup(h.e.Close)

	h.converge("rotated on the instances that answer", func(d Decision) bool {
		st := h.e.State().Instances
		return d.Primary == "db-0" && st["db-0"].Credentials == "g2" && st["db-1"].Credentials == "g2" &&
			st["db-1"].Replication == "g2" && len(d.Plan) == 0
	})
	if got := h.e.State().Instances["db-2"].Credentials; got != "g1" {
		t.Fatalf("db-2 was down but is recorded with %q; want g1 (it still has the old passwords)", got)
	}
	for _, i := range []int{0, 1} {
		if err := login(h, i, testAccounts.Operator); !dbsql.IsAccessDenied(err) {
			t.Errorf("%s: old operator password: %v, want access denied", h.db.Instances[i].Name, err)
		}
		if err := login(h, i, rotated.Operator); err != nil {
			t.Errorf("%s: new operator password: %v", h.db.Instances[i].Name, err)
		}
	}
	// The replica reconnects with the password it was re-pointed with: the primary refuses
	// the old one, so a receiver that kept it would fail with 1045.
	op1 := openOperatorAs(t, h, 1, rotated.Operator)
	mustExecCtx(t, op1, "STOP SLAVE IO_THREAD")
	mustExecCtx(t, op1, "START SLAVE IO_THREAD")
	waitReplicating(t, h, 1, rotated.Operator)

	h.db.Instances[2].Start(t, "--init-rpl-role=SLAVE")
	h.converge("the instance that was down catches up", func(d Decision) bool {
		st := h.e.State().Instances["db-2"]
		return d.State == StateHealthy && st.Credentials == "g2" && st.Replication == "g2"
	})
	op2 := openOperatorAs(t, h, 2, rotated.Operator)
	mustExecCtx(t, op2, "STOP SLAVE IO_THREAD")
	mustExecCtx(t, op2, "START SLAVE IO_THREAD")
	waitReplicating(t, h, 2, rotated.Operator)

	acked, failed, gap := w.finish()
	if failed > 0 {
		t.Errorf("%d writes failed during the rotation (the application account was never touched)", failed)
	}
	op0 := openOperatorAs(t, h, 0, rotated.Operator)
	for _, db := range []*sql.DB{op0, op1, op2} {
		var n int
		deadline := time.Now().Add(30 * time.Second)
		for {
			if err := db.QueryRow("SELECT COUNT(*) FROM app.rows").Scan(&n); err == nil && n >= acked {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d acknowledged rows present", n, acked)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("rotation under load: %d writes acknowledged, none failed, longest gap between acknowledgements %s", acked, gap.Round(time.Millisecond))
}

func login(h *harness, i int, a dbsql.Account) error {
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s", a.User, a.Password, h.db.Instances[i].Addr()))
	if err != nil {
		return err
	}
	defer db.Close()
	return db.Ping()
}

func openOperatorAs(t *testing.T, h *harness, i int, a dbsql.Account) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s&readTimeout=10s", a.User, a.Password, h.db.Instances[i].Addr()))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExecCtx(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// waitReplicating waits until the receiver of replica i runs again, failing on an
// authentication error.
func waitReplicating(t *testing.T, h *harness, i int, a dbsql.Account) {
	t.Helper()
	name := h.db.Instances[i].Name
	in, err := dbsql.Open(dbsql.Config{Flavor: dbsql.FlavorMariaDB, Addr: h.db.Instances[i].Addr(), User: a.User, Password: a.Password})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := in.Status(context.Background())
		if err == nil && st.Replica != nil {
			if st.Replica.LastIOErrno == errnoAccessDenied {
				t.Fatalf("%s: the source refused the replication password: %s", name, st.Replica.LastIOError)
			}
			if st.Replica.IORunning && st.Replica.SQLRunning {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not replicate again: %+v, %v", name, st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gapWriter inserts as the application account into one server and records the longest
// time between two acknowledgements.
type gapWriter struct {
	once          sync.Once
	stop          chan struct{}
	done          chan struct{}
	mu            sync.Mutex
	acked, failed int
	gap           time.Duration
}

func startGapWriter(t *testing.T, addr string) *gapWriter {
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s&readTimeout=10s&writeTimeout=10s", appAccount.User, appAccount.Password, addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w := &gapWriter{stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { w.finish() }) // a test that fails early still stops the writer before it ends
	go func() {
		defer close(w.done)
		last := time.Now()
		for id := int64(1); ; id++ {
			select {
			case <-w.stop:
				return
			default:
			}
			_, err := db.Exec("INSERT INTO app.rows (id, v) VALUES (?, 'r')", id)
			w.mu.Lock()
			if err != nil {
				w.failed++
				t.Logf("write %d failed: %v", id, err)
			} else {
				w.acked++
				if g := time.Since(last); g > w.gap {
					w.gap = g
				}
				last = time.Now()
			}
			w.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return w
}

func (w *gapWriter) finish() (acked, failed int, gap time.Duration) {
	w.once.Do(func() { close(w.stop) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.failed, w.gap
}

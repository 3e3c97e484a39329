package topology

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"
)

// What becomes of a commit that waits for a semi-sync acknowledgement when its primary is
// stopped — the lost primary of a partition, whose pod Dolphin deletes — restarted as pods
// start MariaDB (--init-rpl-role=SLAVE). A crash (SIGKILL) rolls the unacknowledged commit
// back (docs/design/0011 relies on it). A clean shutdown (SIGTERM, what a pod deletion sends
// first) commits it: the waiting session is released and the engine commit goes on, so the
// old primary comes back holding a transaction no replica has — errant. That is why the lost
// primary of a partition came back errant (issue 11); the fix has to keep SIGTERM from
// reaching such a server first (docs/design/0035).
func TestServerWaitingCommitAtShutdown(t *testing.T) {
	for _, kind := range []string{"SIGTERM", "SIGKILL"} {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, 2)
			h.converge("two instances healthy", healthyWith("db-0"))
			admin := h.sqlDB(0)
			mustExec(t, admin, "CREATE DATABASE app")
			mustExec(t, admin, "CREATE TABLE app.rows (id INT PRIMARY KEY)")
			h.createAppAccount()
			h.waitSameRows("db-0", "db-1")
			members := map[string]Member{}
			for _, in := range h.db.Instances {
				members[in.Name] = Member{Name: in.Name, Host: in.Host, Port: in.Port}
			}
			if err := h.e.run(context.Background(), members, members["db-1"], Step{Kind: StepStopIO, Instance: "db-1"}); err != nil {
				t.Fatal(err)
			}
			app, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s", appAccount.User, appAccount.Password, h.db.Instances[0].Addr()))
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close()
			insertErr := make(chan error, 1)
			go func() {
				_, err := app.Exec("INSERT INTO app.rows VALUES (1)")
				insertErr <- err
			}()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				var waiting int
				if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO app.rows%' AND STATE LIKE '%semi-sync%'").Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the insert does not wait for an acknowledgement")
				}
			}
			h.e.Close()
			in := h.db.Instances[0]
			began := time.Now()
			if kind == "SIGTERM" {
				in.Stop(t)
			} else {
				in.Kill(t)
			}
			took := time.Since(began)
			err = <-insertErr
			in.Start(t, "--init-rpl-role=SLAVE")
			var n int
			if err := h.sqlDB(0).QueryRow("SELECT COUNT(*) FROM app.rows").Scan(&n); err != nil {
				t.Fatal(err)
			}
			var gtid string
			_ = h.sqlDB(0).QueryRow("SELECT @@gtid_binlog_pos").Scan(&gtid)
			t.Logf("%s: stopped in %s; client got %v; after restart the unacknowledged row is there: %v (gtid_binlog_pos %s)", kind, took.Round(time.Millisecond), err, n == 1, gtid)
			if err == nil {
				t.Fatal("the client was told its unacknowledged commit succeeded")
			}
			if kept, want := n == 1, kind == "SIGTERM"; kept != want {
				t.Errorf("%s: unacknowledged commit kept after the restart: %v, want %v", kind, kept, want)
			}
		})
	}
}

package topology

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// podServerCommand is the server container's command of a 2-instance MariaDB cluster, exactly
// as the operator builds its StatefulSet (newest template generation).
func podServerCommand(t *testing.T) []string {
	t.Helper()
	c := resources.Defaulted(&dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "test"}})
	c.Spec.Instances = 2
	return resources.ServerCommand(c)
}

// Ways TestServerWaitingCommitAtShutdown stops the primary.
const (
	stopPlainSIGTERM = "SIGTERM"                      // mariadbd gets SIGTERM itself: a clean shutdown
	stopPlainSIGKILL = "SIGKILL"                      // mariadbd is killed: a crash
	stopPodCommand   = "SIGTERM to the pod's command" // the pod's container command gets SIGTERM
)

// What becomes of a commit that waits for a semi-sync acknowledgement when its primary is
// stopped — the lost primary of a partition, whose pod Dolphin deletes — restarted as pods
// start MariaDB (--init-rpl-role=SLAVE). A crash (SIGKILL) rolls the unacknowledged commit
// back (docs/design/0011 relies on it). A clean shutdown (SIGTERM to mariadbd) commits it:
// the waiting session is released and the engine commit goes on, so the old primary comes
// back holding a transaction no replica has — errant (docs/design/0035). The pod's own
// command (resources.crashOnStop around mariadbd, docs/design/0038) turns the SIGTERM a pod
// deletion sends into a crash: the commit is rolled back, gtid_binlog_pos is where it was
// before, and the container exits with the server's status (137, killed).
func TestServerWaitingCommitAtShutdown(t *testing.T) {
	for _, kind := range []string{stopPlainSIGTERM, stopPlainSIGKILL, stopPodCommand} {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, 2)
			in := h.db.Instances[0]
			if kind == stopPodCommand {
				in.Stop(t)
				in.StartCommand(t, podServerCommand(t))
			}
			h.converge("two instances healthy", healthyWith("db-0"))
			admin := h.sqlDB(0)
			mustExec(t, admin, "CREATE DATABASE app")
			mustExec(t, admin, "CREATE TABLE app.rows (id INT PRIMARY KEY)")
			h.createAppAccount()
			h.waitSameRows("db-0", "db-1")
			var before string
			if err := admin.QueryRow("SELECT @@gtid_binlog_pos").Scan(&before); err != nil {
				t.Fatal(err)
			}
			insertErr := h.commitWaitingForAnAck(t)
			h.e.Close()
			began := time.Now()
			switch kind {
			case stopPlainSIGTERM, stopPodCommand:
				in.Stop(t) // SIGTERM to the process dbtest started: mariadbd, or the pod's command
			case stopPlainSIGKILL:
				in.Kill(t)
			}
			took := time.Since(began)
			err := <-insertErr
			exit := in.LastExit()
			if kind == stopPodCommand {
				in.StartCommand(t, podServerCommand(t))
			} else {
				in.Start(t, "--init-rpl-role=SLAVE")
			}
			var n int
			if err := h.sqlDB(0).QueryRow("SELECT COUNT(*) FROM app.rows").Scan(&n); err != nil {
				t.Fatal(err)
			}
			var after string
			if err := h.sqlDB(0).QueryRow("SELECT @@gtid_binlog_pos").Scan(&after); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: stopped in %s (exit %v); client got %v; after restart the unacknowledged row is there: %v (gtid_binlog_pos %s, before the insert %s)",
				kind, took.Round(time.Millisecond), exit, err, n == 1, after, before)
			if err == nil {
				t.Fatal("the client was told its unacknowledged commit succeeded")
			}
			want := kind == stopPlainSIGTERM
			if kept := n == 1; kept != want {
				t.Errorf("%s: unacknowledged commit kept after the restart: %v, want %v", kind, kept, want)
			}
			if ahead := after != before; ahead != want {
				t.Errorf("%s: gtid_binlog_pos %s after the restart, %s before the insert: ahead %v, want %v", kind, after, before, ahead, want)
			}
			if kind == stopPodCommand && (exit == nil || exit.ExitCode() != 137) {
				t.Errorf("the pod's command exited %v, want status 137 (its server killed)", exit)
			}
		})
	}
}

// commitWaitingForAnAck stops db-1's receiver, so that no acknowledgement can come, and
// commits a row on the primary db-0 as the application; it returns once the commit waits for
// its acknowledgement, with the channel its outcome arrives on.
func (h *harness) commitWaitingForAnAck(t *testing.T) <-chan error {
	t.Helper()
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
	t.Cleanup(func() { app.Close() })
	insertErr := make(chan error, 1)
	go func() {
		_, err := app.Exec("INSERT INTO app.rows VALUES (1)")
		insertErr <- err
	}()
	admin := h.sqlDB(0)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var waiting int
		if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO app.rows%' AND STATE LIKE '%semi-sync%'").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 1 {
			return insertErr
		}
		if time.Now().After(deadline) {
			t.Fatal("the insert does not wait for an acknowledgement")
		}
	}
}

package dbsql

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// TestRotationServer shows that EnsureAccounts rotates passwords: run as the operator with
// the old password, every account takes the new one (root@localhost included), sessions
// already open keep working, old passwords stop working, and nothing reaches the binary log.
func TestRotationServer(t *testing.T) {
	dbtest.RequireMariaDB(t)
	c := dbtest.Start(t, dbtest.Options{Instances: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s := c.Instances[0]
	op := accountsAsRoot(ctx, t, []*dbtest.Instance{s})[0]
	before := status(ctx, t, op).Executed

	open := plainOperatorConn(ctx, t, s) // an operator session opened with the old password
	rotated := testAccounts
	rotated.Operator.Password = "op2-" + trickyPassword
	rotated.Replication.Password = "repl2-" + trickyPassword
	rotated.Monitor.Password = "mon2-" + trickyPassword
	rotated.Root.Password = "root2-" + trickyPassword
	if err := op.EnsureAccounts(ctx, rotated); err != nil {
		t.Fatalf("rotating as the operator with its old password: %v", err)
	}
	if _, err := open.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Errorf("a session opened before the rotation broke: %v", err)
	}
	for _, a := range []struct{ old, new Account }{
		{testAccounts.Operator, rotated.Operator},
		{testAccounts.Replication, rotated.Replication},
		{testAccounts.Monitor, rotated.Monitor},
	} {
		if err := tryLogin(ctx, s, a.new); err != nil {
			t.Errorf("%s with the new password: %v", a.new.User, err)
		}
		if err := tryLogin(ctx, s, a.old); !IsAccessDenied(err) {
			t.Errorf("%s with the old password: %v, want access denied", a.old.User, err)
		}
	}
	newOp := openAs(t, s, rotated.Operator)
	var rootOK int
	if err := newOp.(*instance).db.QueryRowContext(ctx,
		"SELECT COUNT(*) FROM mysql.user WHERE User='root' AND Host='localhost' AND authentication_string=PASSWORD(?)",
		rotated.Root.Password).Scan(&rootOK); err != nil || rootOK != 1 {
		t.Errorf("root@localhost carries the root password: %d, %v", rootOK, err)
	}
	if after := status(ctx, t, newOp).Executed; !after.Contains(before) || !before.Contains(after) {
		t.Errorf("rotation wrote to the binary log: %s -> %s", before, after)
	}
}

// tryLogin logs in like an application (no session setup) and runs one query.
func tryLogin(ctx context.Context, s *dbtest.Instance, a Account) error {
	mc := mysql.NewConfig()
	mc.Net, mc.Addr, mc.Timeout = "tcp", s.Addr(), 2*time.Second
	mc.User, mc.Passwd = a.User, a.Password
	mc.Logger = nopLogger{}
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	_, err = db.ExecContext(ctx, "SELECT 1")
	return err
}

func openAs(t *testing.T, s *dbtest.Instance, a Account) Instance {
	t.Helper()
	in, err := Open(Config{Flavor: FlavorMariaDB, Addr: s.Addr(), User: a.User, Password: a.Password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

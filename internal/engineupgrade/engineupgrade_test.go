package engineupgrade

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// TestServerRunUpgradesOnceAndWritesNoBinlog runs the real mariadb-upgrade against a real server
// whose data directory says an older series upgraded it last: the tool runs, records the
// server's version, and writes nothing to the binary log (a replica's upgrade must not become
// a transaction the others lack); a second run finds nothing to do; a wrong password fails
// with the tool's own words.
func TestServerRunUpgradesOnceAndWritesNoBinlog(t *testing.T) {
	dbtest.RequireMariaDB(t)
	c := dbtest.Start(t, dbtest.Options{Instances: 1})
	in := c.Instances[0]
	db, err := sql.Open("mysql", in.RootDSN("timeout=5s"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var version, before string
	if err := db.QueryRow("SELECT VERSION(), @@gtid_binlog_pos").Scan(&version, &before); err != nil {
		t.Fatal(err)
	}
	// As a data directory 10.6 upgraded last, whatever install-db recorded.
	for _, name := range infoFiles {
		_ = os.Remove(filepath.Join(in.DataDir, name))
	}
	if err := os.WriteFile(filepath.Join(in.DataDir, "mysql_upgrade_info"), []byte("10.6.1-MariaDB"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{DataDir: in.DataDir, Host: in.Host, Port: in.Port, User: "root"}
	res, err := Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first run: %+v", res)
	if !res.Ran || res.From != "10.6.1-MariaDB" || !strings.HasPrefix(version, strings.TrimSuffix(res.To, "-MariaDB")) {
		t.Errorf("first run %+v on server %s: want it to upgrade from 10.6.1-MariaDB to the server's version", res, version)
	}
	var after string
	if err := db.QueryRow("SELECT @@gtid_binlog_pos").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("gtid_binlog_pos %q -> %q: the upgrade wrote to the binary log", before, after)
	}

	again, err := Run(t.Context(), o)
	if err != nil || again.Ran || again.From != res.To || again.To != res.To {
		t.Errorf("second run %+v, %v: want nothing done, %s recorded", again, err, res.To)
	}

	o.Password = "not-the-password"
	if _, err := Run(t.Context(), o); err == nil || !strings.Contains(err.Error(), "Access denied") {
		t.Errorf("a wrong password: %v; want the tool's access denied", err)
	}
}

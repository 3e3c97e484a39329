package resources

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/freeport"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
)

// TestServerInitScriptOperatorAccount runs the generated MariaDB init script (the
// ConfigMap's init.sh, install.sh and my.cnf, with the pod's paths moved into a temporary directory) on
// a real mariadbd, with a password holding everything the escaping must survive, and logs
// in as Dolphin's operator over TCP, as the engine does from another host. (The MySQL
// script has only its exact-text test: no MySQL server can be installed here.)
func TestServerInitScriptOperatorAccount(t *testing.T) {
	dbtest.RequireMariaDB(t)
	const password = "🐬 (4 bytes in UTF-8), it's a \\ back\\slash; then\na new line, '' two quotes, %s, $HOME, `id` and a trailing \\\n"
	dir := t.TempDir()
	for _, d := range []string{"data", "run", "tmp"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ports, err := freeport.Pick(1) // mariadbd binds it later: outside the ephemeral range
	if err != nil {
		t.Fatal(err)
	}
	port := ports[0]

	cm, err := ConfigMap(minimal())
	if err != nil {
		t.Fatal(err)
	}
	myCnf, instanceCnf := filepath.Join(dir, "my.cnf"), filepath.Join(dir, "instance.cnf")
	cnf := strings.Replace(cm.Data[MyCnfKey], mycnf.InstanceConfigFile, instanceCnf, 1)
	cnf += fmt.Sprintf("\n[client]\nsocket=%[1]s/run/mysqld.sock\n\n[mysqld]\ndatadir=%[1]s/data\nsocket=%[1]s/run/mysqld.sock\n"+
		"pid_file=%[1]s/run/mysqld.pid\nbind_address=127.0.0.1\nport=%[2]d\nlog_error=%[1]s/error.log\ntmpdir=%[1]s/tmp\n", dir, port)
	if os.Geteuid() == 0 {
		cnf += "user=root\n" // as root, mariadbd refuses to run without it
	}
	paths := strings.NewReplacer(
		mycnf.InstanceConfigFile, instanceCnf,
		filepath.Join(mycnf.ConfigDir, MyCnfKey), myCnf,
		mycnf.DataDir, filepath.Join(dir, "data"),
		"/tmp/", filepath.Join(dir, "tmp")+"/", // the pod's emptyDir (the account's SQL file)
	)
	files := map[string]string{myCnf: cnf,
		filepath.Join(dir, InitShKey): paths.Replace(cm.Data[InitShKey]), filepath.Join(dir, InstallShKey): paths.Replace(cm.Data[InstallShKey])}
	for name, content := range files {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// As in the pod: the init container writes the instance config, then the seed container
	// runs the install script (the operator said "empty"), naming in $DOLPHIN_NOSYNC a binary
	// that offers `nosync` (this test binary: TestMain), through which the script runs
	// mariadb-install-db with its flushes skipped.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	nosyncLog := filepath.Join(dir, "nosync.log")
	for _, script := range []string{InitShKey, InstallShKey} {
		cmd := exec.Command("sh", filepath.Join(dir, script))
		cmd.Env = append(os.Environ(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "POD_NAME=orders-0", "POD_NAMESPACE=shop",
			"DOLPHIN_OPERATOR_USER="+OperatorUser, "DOLPHIN_OPERATOR_PASSWORD="+password, "DOLPHIN_NOSYNC="+self, "DOLPHIN_TEST_NOSYNC_LOG="+nosyncLog)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		if strings.Contains(string(out), "flushes not skipped") {
			t.Fatalf("%s ran mariadb-install-db with its flushes: %s", script, out)
		}
	}
	if b, err := os.ReadFile(nosyncLog); err != nil || string(b) != "sync\nmariadb-install-db\n" {
		t.Fatalf("the programs run through nosync: %q (%v), want the probe's sync, then mariadb-install-db", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", ".dolphin-initialized")); err != nil {
		t.Fatalf("the install script left no marker: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	server := exec.CommandContext(ctx, "mariadbd", "--defaults-file="+myCnf)
	server.Env = append(os.Environ(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	if err := server.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = server.Wait()
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "error.log")); err == nil {
				t.Logf("error.log:\n%s", b)
			}
		}
	})
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = OperatorUser, password, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if err = db.PingContext(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logging in as %s over TCP with the password of the Secret: %v", OperatorUser, err)
		}
	}
	var grants []string
	rows, err := db.QueryContext(ctx, "SHOW GRANTS")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(grants) == 0 || !strings.Contains(grants[0], "GRANT ALL PRIVILEGES ON *.* TO `dolphin`@`%`") || !strings.Contains(grants[0], "WITH GRANT OPTION") {
		t.Errorf("grants of the operator account: %q", grants)
	}
	// The bootstrap must leave no GTID behind: an instance with one of its own is errant.
	var gtids string
	if err := db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&gtids); err != nil || gtids != "" {
		t.Errorf("gtid_binlog_pos after initialisation = %q (%v), want empty", gtids, err)
	}
}

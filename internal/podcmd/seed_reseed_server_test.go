package podcmd

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/agentops"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/restore"
	"github.com/dolphin-operator/dolphin/internal/seed"
)

// TestServerSeedKeepsWhatWasCommittedAfterTheCopy: the agent kept a copy while the server
// ran; a transaction committed after it (by an account read_only does not stop) is in the
// binary log when the seed container runs, with the server stopped: it is kept as
// <name>-at-reseed before anything is discarded. A mark whose copy holds everything leaves
// no second copy.
func TestServerSeedKeepsWhatWasCommittedAfterTheCopy(t *testing.T) {
	inst := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	db, err := sql.Open("mysql", "root@unix("+inst.SocketPath()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string) {
		t.Helper()
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("SET GLOBAL read_only = OFF")
	exec("CREATE DATABASE app")
	exec("CREATE TABLE app.k (id INT PRIMARY KEY)")
	var primaryState string // the primary followed up to here
	if err := db.QueryRow("SELECT @@gtid_binlog_state").Scan(&primaryState); err != nil {
		t.Fatal(err)
	}
	exec("INSERT INTO app.k VALUES (1)")
	state, err := binlog.ParseServerState(primaryState)
	if err != nil {
		t.Fatal(err)
	}
	store, err := objectstore.NewDirectory(inst.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := binlog.Keep(ctx, binlog.KeepOptions{BinlogIndex: filepath.Join(inst.DataDir, restore.BinlogIndex), Primary: state,
		Store: store, Prefix: restore.KeptPrefix, Name: "db-0-x", Instance: "db-0", PrimaryName: "db-1"})
	if err != nil || first.Transactions != 1 {
		t.Fatalf("first copy: %+v, %v", first, err)
	}
	exec("INSERT INTO app.k VALUES (2)") // after the copy
	inst.Stop(t)

	mark := restore.ReseedMark{Reason: "errant", Keep: &agent.ReseedKeep{Name: first.Name, Instance: "db-0", Primary: "db-1",
		PrimaryState: primaryState, GTIDs: first.GTIDs}}
	if err := os.WriteFile(filepath.Join(inst.DataDir, restore.ReseedMarker), mark.Encode(), 0o600); err != nil {
		t.Fatal(err)
	}
	var log []string
	if err := seed.HonourReseed(ctx, inst.DataDir, func(f string, a ...any) { log = append(log, f) }); err != nil {
		t.Fatal(err)
	}
	second, err := binlog.GetKept(ctx, store, restore.KeptPrefix, "db-0-x-at-reseed")
	if err != nil || second.Transactions != 2 {
		t.Fatalf("the copy made at the re-seed: %+v, %v; want both transactions", second, err)
	}
	if _, err := os.Stat(filepath.Join(inst.DataDir, restore.InitializedMarker)); err == nil {
		t.Fatal("the data is still marked initialised")
	}
	if !strings.Contains(strings.Join(log, "\n"), "committed after the copy") {
		t.Fatalf("the log does not say so: %q", log)
	}

	// Nothing new: no second copy.
	mark.Keep.Name, mark.Keep.GTIDs = "db-0-y", second.GTIDs
	if err := os.WriteFile(filepath.Join(inst.DataDir, restore.ReseedMarker), mark.Encode(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := seed.HonourReseed(ctx, inst.DataDir, func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := binlog.GetKept(ctx, store, restore.KeptPrefix, "db-0-y-at-reseed"); err == nil {
		t.Fatal("a second copy holding nothing new was left")
	}
}

// TestServerAgentKeepUploadsToTheStore: the agent's keep writes the copy on the volume and,
// given the cluster's backup store, uploads it there too (object, then manifest, checked
// against each other); `dolphin kept list` finds it in either place.
func TestServerAgentKeepUploadsToTheStore(t *testing.T) {
	inst := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	db, err := sql.Open("mysql", "root@unix("+inst.SocketPath()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{"SET GLOBAL read_only = OFF", "CREATE DATABASE app", "CREATE TABLE app.k (id INT PRIMARY KEY)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var primaryState string
	if err := db.QueryRow("SELECT @@gtid_binlog_state").Scan(&primaryState); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"INSERT INTO app.k VALUES (1)", "INSERT INTO app.k VALUES (2)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	bucket := t.TempDir()
	cfg, _ := json.Marshal(objectstore.Config{Directory: bucket})
	w := agentops.Config{Flavor: "mariadb", DataDir: inst.DataDir}
	resp, err := w.KeepFunc()(context.Background(), agent.KeepRequest{Name: "db-0-x", Instance: "db-0", Primary: "db-1",
		PrimaryState: primaryState, Reason: "test", Store: cfg, StorePrefix: "ns/db/kept/"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Copy.Transactions != 2 || !strings.Contains(resp.Location, inst.DataDir) || !strings.Contains(resp.StoreLocation, bucket) {
		t.Fatalf("keep: %+v", resp)
	}
	for _, args := range [][]string{
		{"kept", "list", "--directory", inst.DataDir},
		{"kept", "list", "--directory", bucket, "--prefix", "ns/db/kept/"},
	} {
		cmd := newRootCmd()
		var out strings.Builder
		cmd.SetOut(&out)
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil || !strings.Contains(out.String(), "db-0-x") || !strings.Contains(out.String(), resp.Copy.GTIDs) {
			t.Fatalf("dolphin %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
}

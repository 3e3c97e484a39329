package backup

import (
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// TestServerTakeIntoFullVolume: a backup into a directory store whose volume (a tmpfs the size
// of one backup plus a little) fills up fails with ErrStoreFull and says what to do; it leaves
// no manifest and no partial object, the older backup on the volume still verifies, and the
// server took every write sent while the backup ran.
func TestServerTakeIntoFullVolume(t *testing.T) {
	c := dbtest.Start(t, dbtest.Options{Instances: 1})
	inst := c.Instances[0]
	db, err := sql.Open("mysql", inst.RootDSN("multiStatements=true"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE DATABASE app; CREATE TABLE app.rows (id INT PRIMARY KEY, pad LONGBLOB) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	opts := func(name string) TakeOptions {
		return TakeOptions{
			Prefix: "ns/c/" + name + "/", Name: name, SourceInstance: inst.Name, SourceRole: "primary",
			Socket: filepath.Join(inst.Dir, "mysqld.sock"), User: "root", TmpDir: t.TempDir(),
			DataDir: inst.DataDir, DefaultsFile: inst.ConfigFile, ExtraArgs: []string{"--log-copy-interval=100"},
		}
	}

	// How large is one backup of this server? Measure on an ordinary directory.
	sizer, _ := newStore(t)
	m, err := Take(t.Context(), opts("sizer"), sizer)
	if err != nil {
		t.Fatal(err)
	}
	var one int64
	for _, o := range m.Objects {
		one += o.Size
	}
	// A volume that holds that backup and 2 MiB more.
	vol := t.TempDir()
	size := one + 2<<20
	if err := syscall.Mount("tmpfs", vol, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("mounting a tmpfs needs root: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(vol, syscall.MNT_DETACH) })
	store, err := objectstore.NewDirectory(vol)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Take(t.Context(), opts("older"), store); err != nil {
		t.Fatalf("the first backup (%d bytes) on a %d-byte volume: %v", one, size, err)
	}

	// 8 MiB of incompressible rows: the next backup cannot fit.
	pad := make([]byte, 1<<20)
	for id := 1; id <= 8; id++ {
		_, _ = rand.Read(pad)
		if _, err := db.Exec("INSERT INTO app.rows VALUES (?, ?)", id, pad); err != nil {
			t.Fatal(err)
		}
	}
	// A writer runs during the backup; every write it is acknowledged must be there after.
	var (
		wg    sync.WaitGroup
		stop  = make(chan struct{})
		acked []int
		wErr  error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := 1000; ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := db.Exec("INSERT INTO app.rows VALUES (?, 'x')", id); err != nil {
				wErr = err
				return
			}
			acked = append(acked, id)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err = Take(t.Context(), opts("full"), store)
	close(stop)
	wg.Wait()
	if !errors.Is(err, objectstore.ErrStoreFull) || !strings.Contains(err.Error(), "enlarge") {
		t.Fatalf("Take on a full volume: %v, want ErrStoreFull saying what to do", err)
	}
	t.Logf("the backup failed as it should: %v", err)
	if wErr != nil {
		t.Fatalf("a write failed while the backup ran: %v", wErr)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM app.rows WHERE id >= 1000").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(acked) || n == 0 {
		t.Fatalf("%d writes acknowledged during the backup, %d in the table", len(acked), n)
	}
	if _, err := os.Stat(filepath.Join(vol, "ns/c/full", ManifestKey)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the failed backup's manifest: %v, want none", err)
	}
	for _, f := range storeFiles(t, vol) {
		if !strings.HasPrefix(f, "ns/c/older/") {
			t.Errorf("the failed backup left %s", f)
		}
	}
	if _, err := Verify(t.Context(), store, "ns/c/older/"); err != nil {
		t.Fatalf("the older backup no longer verifies: %v", err)
	}
}

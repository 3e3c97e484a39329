package restore

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

func TestVerifyRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(filepath.Join(full, "mysql"), 0o750); err != nil {
		t.Fatal(err)
	}
	base := VerifyOptions{Store: objectstore.Config{Directory: dir}, Path: "b/", ScratchDir: filepath.Join(dir, "s")}
	for _, c := range []struct {
		edit func(*VerifyOptions)
		want string
	}{
		{func(o *VerifyOptions) { o.Path = "" }, "missing the backup's path"},
		{func(o *VerifyOptions) { o.ScratchDir = "" }, "missing the scratch directory"},
		{func(o *VerifyOptions) { o.ServerOptions = []string{"a=1\nb=2"} }, `server option "a=1\nb=2"`},
		{func(o *VerifyOptions) { o.ServerOptions = []string{"[client]"} }, "server option"},
		// A directory that is not a verification's is never emptied.
		{func(o *VerifyOptions) { o.ScratchDir = full }, "is not empty (it holds mysql) and not an earlier verification's"},
	} {
		o := base
		c.edit(&o)
		if _, err := Verify(t.Context(), o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Verify: %v, want an error saying %q", err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(full, "mysql")); err != nil {
		t.Errorf("the refused scratch directory was touched: %v", err)
	}

	// A backup that is not there: the scratch directory Verify made is gone again.
	_, err := Verify(t.Context(), base)
	if !errors.Is(err, backup.ErrIncomplete) {
		t.Errorf("Verify of a missing backup: %v, want ErrIncomplete", err)
	}
	if _, err := os.Stat(base.ScratchDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the scratch directory is left: %v", err)
	}
}

func TestVerifyScratchDirKeepsLostAndFound(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{lostAndFound + "/x", VerifyMarker, "data/ibdata1", "verify.cnf"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	var logged []string
	created, err := claimScratch(dir, func(f string, a ...any) { logged = append(logged, f) })
	if err != nil || created {
		t.Fatalf("claimScratch: %v, created %v", err, created)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "earlier verification") {
		t.Errorf("logged %q", logged)
	}
	if err := releaseScratch(dir, created); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 || ents[0].Name() != lostAndFound {
		t.Errorf("after releaseScratch: %v %v, want only %s", ents, err, lostAndFound)
	}
}

func TestVerifyServerConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, backupConfig), []byte("[client]\ninnodb_page_size=1\n"+
		"[mysqld]\n# comment\ninnodb_checksum_algorithm=crc32\ninnodb-data-file-path = ibdata1:12M:autoextend\n"+
		"innodb_log_file_size=100663296\ninnodb_page_size=65536\ninnodb_undo_directory=/elsewhere\ninnodb_undo_tablespaces=3\n"+
		"innodb_buffer_pool_filename=ib_buffer_pool\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	conf, err := serverConfig(dir, "/tmp/v", VerifyOptions{UseMemory: "256M", ServerOptions: []string{" lower_case_table_names=1 "}})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(settings(conf))
	want := []string{"[mysqld]", "innodb_checksum_algorithm=crc32", "innodb_data_file_path=ibdata1:12M:autoextend",
		"innodb_page_size=65536", "innodb_undo_tablespaces=3", "skip_log_bin", "performance_schema=OFF",
		"innodb_log_file_size=32M", "innodb_buffer_pool_size=256M", "tmpdir=/tmp/v"}
	if os.Geteuid() == 0 {
		want = append(want, "user=root")
	}
	want = append(want, "lower_case_table_names=1")
	if !slices.Equal(got, want) {
		t.Errorf("option file settings\n got %q\nwant %q", got, want)
	}
}

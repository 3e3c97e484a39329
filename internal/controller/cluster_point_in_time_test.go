package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// fakeArchive stores segment manifests (and objects of their size) covering the given
// positions in order: segments [p0,p1], [p1,p2], … under prefix.
func fakeArchive(t *testing.T, store objectstore.Store, prefix string, positions ...string) {
	t.Helper()
	ctx := context.Background()
	put := func(key string, b []byte) {
		up, err := store.Create(ctx, prefix+key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := up.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := up.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < len(positions); i++ {
		name := fmt.Sprintf("epoch-0001/%010d", i)
		commit := time.Date(2026, 12, 1, 10, 0, i, 0, time.UTC)
		m := binlog.Manifest{Format: binlog.ManifestFormat, Epoch: 1, Number: int64(i), Object: name + ".binlog.zst",
			Start: positions[i-1], End: positions[i], FirstCommit: commit, LastCommit: commit, MaxCommit: commit,
			Transactions: 1, RawBytes: 10, StoredBytes: 4, SHA256: strings.Repeat("0", 64), Compression: binlog.CompressionZstd}
		put(m.Object, []byte("zstd"))
		b, _ := json.Marshal(m)
		put(name+".json", b)
	}
}

func TestResolvePointInTime(t *testing.T) {
	store, err := objectstore.NewDirectory(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fakeArchive(t, store, "ns/src/binlog/", "0-1-10", "0-1-20", "0-1-30")
	fakeArchive(t, store, "ns/late/binlog/", "0-1-15", "0-1-30")
	m := &backup.Manifest{GTIDPosition: "0-1-12", EndTime: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	ctx := context.Background()
	for _, c := range []struct {
		name, prefix string
		pit          dolphinv1.PointInTimeTarget
		want, err    string
	}{
		{"latest", "ns/src/binlog/", dolphinv1.PointInTimeTarget{Latest: true}, "0-1-30", ""},
		{"a GTID inside", "ns/src/binlog/", dolphinv1.PointInTimeTarget{GTID: "0-1-25"}, "0-1-25", ""},
		{"the backup's own position", "ns/src/binlog/", dolphinv1.PointInTimeTarget{GTID: "0-1-12"}, "0-1-12", ""},
		{"beyond the archive", "ns/src/binlog/", dolphinv1.PointInTimeTarget{GTID: "0-1-31"}, "", "is beyond the archive"},
		{"before the backup", "ns/src/binlog/", dolphinv1.PointInTimeTarget{GTID: "0-1-11"}, "", "before the backup's position"},
		{"a time before the backup", "ns/src/binlog/", dolphinv1.PointInTimeTarget{Time: &metav1.Time{Time: m.EndTime.Add(-time.Hour)}}, "", "before the backup ended"},
		{"an archive that starts after the backup", "ns/late/binlog/", dolphinv1.PointInTimeTarget{Latest: true}, "", "the archive starts after the backup"},
		{"no archive", "ns/none/binlog/", dolphinv1.PointInTimeTarget{Latest: true}, "", "holds nothing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := resolvePointInTime(ctx, store, c.prefix, m, &c.pit)
			var ue *userError
			switch {
			case c.err == "" && (err != nil || got != c.want):
				t.Errorf("resolvePointInTime = %q, %v; want %q", got, err, c.want)
			case c.err != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), c.err)):
				t.Errorf("resolvePointInTime = %q, %v; want a userError saying %q", got, err, c.err)
			case c.err != "" && c.prefix == "ns/src/binlog/" && !strings.Contains(err.Error(), `holds 0-1-10 to 0-1-30`):
				t.Errorf("the error does not give the window: %v", err)
			}
		})
	}
}

func TestChooseBase(t *testing.T) {
	at := func(name, cluster, gtid string, ended time.Time, phase dolphinv1.BackupPhase) dolphinv1.MySQLBackup {
		done := metav1.NewTime(ended)
		return dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: dolphinv1.MySQLBackupSpec{Cluster: cluster},
			Status: dolphinv1.MySQLBackupStatus{Phase: phase, GTIDPosition: gtid, CompletionTime: &done}}
	}
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	backups := []dolphinv1.MySQLBackup{
		at("old", "db", "0-1-10", t0, dolphinv1.BackupSucceeded),
		at("mid", "db", "0-1-20", t0.Add(time.Hour), dolphinv1.BackupSucceeded),
		at("new", "db", "0-1-30", t0.Add(2*time.Hour), dolphinv1.BackupSucceeded),
		at("failed", "db", "", t0.Add(3*time.Hour), dolphinv1.BackupFailed),
		at("other", "other", "0-1-99", t0.Add(4*time.Hour), dolphinv1.BackupSucceeded),
	}
	tm := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }
	for _, c := range []struct {
		name string
		pit  dolphinv1.PointInTimeTarget
		want string
		err  string
	}{
		{"latest", dolphinv1.PointInTimeTarget{Cluster: "db", Latest: true}, "new", ""},
		{"a time between two backups", dolphinv1.PointInTimeTarget{Cluster: "db", Time: tm(90 * time.Minute)}, "mid", ""},
		{"the moment a backup ended", dolphinv1.PointInTimeTarget{Cluster: "db", Time: tm(time.Hour)}, "mid", ""},
		{"a GTID between two backups", dolphinv1.PointInTimeTarget{Cluster: "db", GTID: "0-1-25"}, "mid", ""},
		{"a GTID in another domain", dolphinv1.PointInTimeTarget{Cluster: "db", GTID: "1-1-5"}, "new", ""},
		{"before every backup", dolphinv1.PointInTimeTarget{Cluster: "db", Time: tm(-time.Minute)}, "", "none of the 3 successful backups"},
		{"no backup of that cluster", dolphinv1.PointInTimeTarget{Cluster: "nope", Latest: true}, "", "has no successful backup"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := chooseBase(backups, &c.pit)
			if c.err == "" && (err != nil || got != c.want) || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("chooseBase = %q, %v; want %q %q", got, err, c.want, c.err)
			}
		})
	}
}

package restore

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// PointInTime takes a restore past its backup: after the fix-up has set the backup's GTID
// position, the archived binary log is replayed onto the temporary server up to To, and the
// instance continues from there.
type PointInTime struct {
	// Archive is the store holding the binlog archive, and Prefix the archive's key prefix
	// in it (e.g. "ns/cluster/binlog/", see resources.BinlogArchivePrefix).
	Archive objectstore.Config
	Prefix  string
	// To is the GTID position to stop at, inclusive (a time is resolved to one beforehand,
	// binlog.ResolveTime); "" replays everything archived.
	To string
	// MariaDBBinlog and MariaDB are the tools' paths; looked up on PATH when empty.
	MariaDBBinlog, MariaDB string
}

// replay applies the archive after from up to o.PointInTime.To onto the temporary server
// (binlog.Replay: segments checked against their sha256, the server's position checked
// before and after) and returns the position reached. The replayed transactions keep their
// GTIDs in the server's binary log.
func (o *Options) replay(ctx context.Context, srv *tempServer, from string) (string, error) {
	p := o.PointInTime
	store, err := objectstore.New(ctx, p.Archive)
	if err != nil {
		return "", fmt.Errorf("opening the binlog archive's store: %w", err)
	}
	log := o.logf()
	to := p.To
	if to == "" {
		to = "the end of the archive"
	}
	log("replaying the binlog archive %s from %q to %s", objectstore.Locate(store, p.Prefix), from, to)
	// The fix-up loaded the grant tables (FLUSH PRIVILEGES): the client logs in as root with
	// the new password, from an option file only this process can read.
	pwFile, err := backup.WriteClientPasswordFile(o.TmpDir, o.RootPassword)
	if err != nil {
		return "", fmt.Errorf("writing the replay's option file: %w", err)
	}
	defer os.Remove(pwFile)
	began := time.Now()
	res, err := binlog.Replay(ctx, binlog.ReplayOptions{
		Store: store, Prefix: p.Prefix, From: from, To: p.To,
		MySQLArgs: []string{"--defaults-file=" + pwFile, "--user=root", "--socket=" + srv.socket},
		TmpDir:    o.TmpDir, MariaDBBinlog: p.MariaDBBinlog, MariaDB: p.MariaDB,
	})
	if err != nil {
		return "", err
	}
	log("replayed %d segment(s), %d bytes, in %v: the data is at %q", len(res.Segments), res.RawBytes,
		time.Since(began).Round(time.Millisecond), res.Position)
	return res.Position, nil
}

package restore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// A restore check with continuous archiving replays the archive after the backup (see
// VerifyOptions.Archive).

// VerifyArchive is a binlog archive a verification replays (see Verify).
type VerifyArchive struct {
	// Store holds the archive (a cluster's is in its backup store) and Prefix is the archive's
	// key prefix in it (resources.BinlogArchivePrefix).
	Store  objectstore.Config
	Prefix string
	// MariaDBBinlog and MariaDB are the tools' paths; looked up on PATH when empty.
	MariaDBBinlog, MariaDB string
}

// replayArchive replays the archive onto the temporary server from the backup's position
// holds to the archive's end (binlog.Replay: every segment's sha256 checked, the server's
// GTID position checked before and after, so it lands exactly on the end). An archive that
// does not reach back to the backup is noted, not failed: the backup itself is fine, it just
// cannot start a point-in-time restore. A gap, a damaged segment or a transaction the server
// refuses fails the check.
func replayArchive(ctx context.Context, conn *sql.Conn, srv *tempServer, o *Options, a *VerifyArchive, holds string, rep *VerifyReport) error {
	log := o.logf()
	store, err := objectstore.New(ctx, a.Store)
	if err != nil {
		return fmt.Errorf("opening the binlog archive's store: %w", err)
	}
	where := objectstore.Locate(store, a.Prefix)
	// The binary log is new: it must start at the data's position for the replay to continue it.
	for _, q := range []string{"RESET MASTER", "SET GLOBAL gtid_binlog_state = '" + holds + "'"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("preparing the replay of the binlog archive: %s: %w", q, err)
		}
	}
	log("replaying the binlog archive %s from %q to its end", where, holds)
	began := time.Now()
	res, err := binlog.Replay(ctx, binlog.ReplayOptions{
		Store: store, Prefix: a.Prefix, From: holds,
		MySQLArgs: []string{"--no-defaults", "--user=root", "--socket=" + srv.socket},
		TmpDir:    o.TmpDir, MariaDBBinlog: a.MariaDBBinlog, MariaDB: a.MariaDB,
	})
	if errors.Is(err, binlog.ErrOutsideArchive) {
		rep.ArchiveNote = "the binlog archive " + where + " does not reach back to this backup: " + err.Error()
		log("%s", rep.ArchiveNote)
		return nil
	}
	if err != nil {
		return fmt.Errorf("replaying the binlog archive %s after the backup: %w", where, err)
	}
	rep.ArchiveReplayedTo, rep.ArchiveSegments = res.Position, len(res.Segments)
	log("replayed %d segment(s) of %s, %d bytes, in %v: the server is at the archive's end %q",
		len(res.Segments), where, res.RawBytes, time.Since(began).Round(time.Millisecond), res.Position)
	return nil
}

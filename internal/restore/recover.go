package restore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// What mariadbd 10.11 prints when it resolves prepared transactions by heuristic: the count
// InnoDB found, then, once they are rolled back, that it will not go on (it exits with
// "Can't init tc log" when the binary log is on).
var foundPreparedRE = regexp.MustCompile(`Found (\d+) prepared transaction\(s\) in InnoDB`)

const heuristicRecoveryDone = "Please restart without --tc-heuristic-recover"

// recoveryBinlog is the base name, in Options.TmpDir, of the binary log the recovery pass
// runs with (and that is removed after it): the data directory's own is left alone.
const recoveryBinlog = "recovery-binlog"

// rollBackPrepared rolls back the InnoDB transactions the prepared data holds in the XA
// prepared state, so that a server can start on it.
//
// A backup can copy a transaction between its InnoDB prepare and its commit: mariadb-backup
// 10.11 does so on a replica under writes (MDEV-36025, measured here: two in one backup in a
// few dozen taken under full-speed writes), and --prepare leaves them prepared. Their fate is
// the server's to decide from its binary log, which a backup does not hold, so mariadbd
// refuses to start ("Found 2 prepared transactions! … You have to start server with
// --tc-heuristic-recover"). Rolling them back is right: a transaction that is only prepared
// had not reached the binary log when BACKUP STAGE BLOCK_COMMIT was taken, so it is after
// the backup's position, and replication from that position applies it again.
//
// mariadbd runs once with the temporary server's options, a binary log of its own in
// TmpDir and --tc-heuristic-recover=ROLLBACK: InnoDB recovers, the prepared transactions are
// rolled back and the server exits, as it always does in that mode, saying "Please restart
// without --tc-heuristic-recover". It fails unless the server said so.
func (o *Options) rollBackPrepared(ctx context.Context, bin string) error {
	log := o.logf()
	binlog := filepath.Join(o.TmpDir, recoveryBinlog)
	defer removeGlob(binlog + "*")
	args := append(o.tempServerArgs(),
		"--log-bin="+binlog, "--log-bin-index="+binlog+".index", "--tc-heuristic-recover=ROLLBACK",
		"--skip-log-error") // to stderr, where the lines are looked for, whatever the option file says
	var found string
	done := false
	out := &lineLog{log: log, prefix: "mariadbd (recovery): ", onLine: func(s string) {
		if m := foundPreparedRE.FindStringSubmatch(s); m != nil {
			found = m[1]
		}
		if strings.Contains(s, heuristicRecoveryDone) {
			done = true
		}
	}}
	rctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr, cmd.SysProcAttr = o.DataDir, out, out, sysProcAttr()
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGKILL) }
	cmd.WaitDelay = 30 * time.Second
	began := time.Now()
	runErr := cmd.Run() // non-nil by design: the server exits 1 after the recovery
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("cancelled while rolling back prepared transactions: %w", ctx.Err())
	case rctx.Err() != nil:
		return fmt.Errorf("rolling back prepared transactions: the server did not finish within %v; its last output:\n%s", o.StartTimeout, out.tail())
	case !done:
		return fmt.Errorf("rolling back prepared transactions: the temporary server exited during startup (%v) without saying %q; its last output:\n%s",
			runErr, heuristicRecoveryDone, out.tail())
	}
	if found == "" || found == "0" {
		log("no prepared transaction in the data (checked in %v)", time.Since(began).Round(time.Millisecond))
	} else {
		log("rolled back %s transaction(s) the backup had copied between their prepare and their commit (after the backup's position) in %v",
			found, time.Since(began).Round(time.Millisecond))
	}
	return nil
}

// removeGlob removes the files matching pattern, ignoring errors: they are leftovers in a
// temporary directory.
func removeGlob(pattern string) {
	matches, _ := filepath.Glob(pattern)
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/engineupgrade"
)

// PeerOptions configures FromPeer: the peer's agent to clone, and the same data directory,
// server and account options as Options (without a store).
type PeerOptions struct {
	// URL is the peer's agent, "https://<pod IP>:9443". Required.
	URL string
	// ServerName is the name the peer's certificate must carry (agent.AgentServerName);
	// empty means URL's host.
	ServerName string
	// Token is the agent's bearer token and CACertPEM its CA: the cluster's agent Secret, the
	// same files this instance's own server uses. Both required.
	Token     string
	CACertPEM []byte
	// SourceDB is the account the peer's agent backs its server up with (user and password;
	// the peer's agent knows its server's socket).
	SourceDB agent.DBConn

	// DataDir, DefaultsFile, ServerBinary, BackupTool, MBStream, Flavor, OperatorUser,
	// OperatorPassword, RootPassword, TmpDir, UseMemory, StartTimeout, StopTimeout, Progress
	// (the bytes received), Log and Logger are as in Options.
	DataDir, DefaultsFile, ServerBinary, BackupTool, MBStream, Flavor string
	OperatorUser, OperatorPassword, RootPassword                      string
	TmpDir, UseMemory                                                 string
	StartTimeout, StopTimeout                                         time.Duration
	Progress                                                          func(bytes int64)
	Log                                                               func(format string, args ...any)
	Logger                                                            logr.Logger
}

// options are the Options the shared steps run with.
func (p *PeerOptions) options() Options {
	return Options{
		DataDir: p.DataDir, DefaultsFile: p.DefaultsFile, ServerBinary: p.ServerBinary,
		BackupTool: p.BackupTool, MBStream: p.MBStream, Flavor: p.Flavor,
		OperatorUser: p.OperatorUser, OperatorPassword: p.OperatorPassword, RootPassword: p.RootPassword,
		TmpDir: p.TmpDir, UseMemory: p.UseMemory, StartTimeout: p.StartTimeout, StopTimeout: p.StopTimeout,
		Progress: p.Progress, Log: p.Log, Logger: p.Logger,
	}
}

// FromPeer seeds opts.DataDir with a clone of a healthy peer, unless DataDir holds
// InitializedMarker (then nothing is touched: Result.Skipped). It asks the peer's agent for
// its backup stream (agent.Client.Clone, POST /v1/clone) and extracts it as it arrives —
// zstd-decoded into `mbstream -x` in StagingDir — then prepares it, moves it into DataDir and
// fixes it up exactly as IntoDataDir does a backup (operator account with OperatorPassword,
// root@localhost with RootPassword, RESET SLAVE ALL, RESET MASTER, gtid_binlog_state =
// gtid_slave_pos = the position of the prepared data's binlog info file), then writes
// RestoredMarker (source "clone from <URL>") and InitializedMarker. The instance then
// replicates from the primary from that position with MASTER_USE_GTID = slave_pos: nothing of
// the primary's older binary logs is needed.
//
// A stream that fails — the peer reports an error at its end, the byte count disagrees, the
// connection breaks, a zstd frame is damaged — leaves DataDir empty (but for lost+found) and
// no server is started; the error says what happened. Leftovers of a crashed attempt are
// removed by the next, as IntoDataDir does.
func FromPeer(ctx context.Context, opts PeerOptions) (Result, error) {
	o := opts.options()
	mysql := fmt.Errorf("cloning a MySQL instance is %w: only MariaDB instances can be cloned", ErrNotSupported)
	required := []field{{"the peer's URL", opts.URL}, {"the agent token", opts.Token},
		{"the agent CA", string(opts.CACertPEM)}, {"the source database user", opts.SourceDB.User}}
	return o.seed(ctx, "clone", mysql, required, func(ctx context.Context) (Marker, error) {
		return o.clone(ctx, &opts)
	})
}

// cloneAttempts bounds the clones FromPeer asks for when the peer's mariadb-backup fell
// behind copying its redo log (backup.ErrRedoLogCopy), which a new attempt usually gets past.
const cloneAttempts = 3

// clone runs cloneOnce, again when the peer's tool failed with backup.ErrRedoLogCopy. The
// peer's error arrives as text (a trailer of the stream), hence the match on its message.
func (o *Options) clone(ctx context.Context, p *PeerOptions) (Marker, error) {
	for attempt := 1; ; attempt++ {
		mk, err := o.cloneOnce(ctx, p)
		if err == nil || attempt == cloneAttempts || ctx.Err() != nil || !strings.Contains(err.Error(), backup.ErrRedoLogCopy.Error()) {
			return mk, err
		}
		o.logf()("clone attempt %d of %d failed: %v; trying again", attempt, cloneAttempts, err)
	}
}

// cloneOnce extracts and prepares the peer's stream into StagingDir and moves it into DataDir.
func (o *Options) cloneOnce(ctx context.Context, p *PeerOptions) (Marker, error) {
	log := o.logf()
	c, err := agent.NewClient(agent.ClientOptions{BaseURL: p.URL, Token: p.Token, CACertPEM: p.CACertPEM, ServerName: p.ServerName})
	if err != nil {
		return Marker{}, fmt.Errorf("clone: %w", err)
	}
	defer c.CloseIdleConnections()
	staging := filepath.Join(o.DataDir, StagingDir)
	if err := os.RemoveAll(staging); err != nil {
		return Marker{}, fmt.Errorf("clone: removing %s: %w", staging, err)
	}
	log("cloning %s as %s into %s", c.Agent(), p.SourceDB.User, o.DataDir)
	began := time.Now()
	// The stream's context: cancelled when the extraction fails, so that the peer stops.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rc, err := c.Clone(sctx, agent.CloneRequest{DB: agent.DBConn{User: p.SourceDB.User, Password: p.SourceDB.Password,
		Socket: p.SourceDB.Socket, Host: p.SourceDB.Host, Port: p.SourceDB.Port}})
	if err != nil {
		return Marker{}, fmt.Errorf("clone: %w; nothing was cloned (the data directory is left empty)", err)
	}
	defer rc.Close()
	last := time.Now()
	bi, err := backup.RestoreStream(sctx, rc, backup.RestoreOptions{
		TargetDir: staging, Tool: o.BackupTool, MBStream: o.MBStream, UseMemory: o.UseMemory, DefaultsFile: o.DefaultsFile,
		Progress: func(n int64) {
			if o.Progress != nil {
				o.Progress(n)
			}
			if time.Since(last) >= progressEvery {
				last = time.Now()
				log("received %d bytes in %v", n, time.Since(began).Round(time.Second))
			}
		},
	})
	if err != nil {
		if rmErr := os.RemoveAll(staging); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", staging, rmErr))
		}
		return Marker{}, fmt.Errorf("clone from %s: %w; nothing was cloned (the data directory is left empty)", c.Agent(), err)
	}
	log("received, extracted and prepared the clone in %v: GTID position %q (binlog %s:%d of the peer)",
		time.Since(began).Round(time.Millisecond), bi.GTID, bi.File, bi.Position)
	if err := moveUp(staging, o.DataDir); err != nil {
		return Marker{}, fmt.Errorf("clone: moving the cloned files from %s into %s: %w; the next attempt starts over", staging, o.DataDir, err)
	}
	o.keepUpgradeRecord(rc.UpgradeRecord())
	return Marker{Source: "clone from " + c.Agent(), GTIDPosition: bi.GTID}, nil
}

// keepUpgradeRecord writes the source's mariadb-upgrade record (enc, from a clone's stream or
// a backup's manifest; "" for none) into the data directory: mariadb-backup does not copy it,
// the system tables are as upgraded as the source's, and without the record the engine
// upgrade would check every table of the new instance (9 s under load) before the operator
// counts it. A record that cannot be written is logged, not an error: the tool then checks
// every table, as it would without one.
func (o *Options) keepUpgradeRecord(enc string) {
	if enc == "" {
		return
	}
	rec, err := engineupgrade.DecodeRecord(enc)
	written := false
	if err == nil {
		written, err = engineupgrade.WriteRecord(o.DataDir, rec)
	}
	switch {
	case err != nil:
		o.logf()("not recording the source's upgrade record (the engine upgrade checks every table instead): %v", err)
	case written:
		o.logf()("recorded the source's mariadb-upgrade record: %s", rec.Version())
	default:
		o.logf()("kept the upgrade record the data directory holds already (the source's says %s)", rec.Version())
	}
}

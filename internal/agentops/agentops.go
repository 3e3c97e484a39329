// Package agentops is what the instance agent does for each request, in terms of the
// packages that do the work: backups and clone streams (internal/backup), kept copies
// (internal/binlog), re-seed marks (internal/restore), engine upgrades
// (internal/engineupgrade). internal/agent serves the requests; `dolphin agent`
// (internal/podcmd) passes a Config to it.
package agentops

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/engineupgrade"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/podlayout"
	"github.com/dolphin-operator/dolphin/internal/restore"
)

// Config says where the data and the server of this pod are (the pod spec,
// internal/resources/agent.go, passes them as `dolphin agent` flags).
type Config struct {
	// Flavor is the database flavor ("mariadb" or "mysql"); DataDir the server's data
	// directory; Socket its Unix socket, used when a request names no server.
	Flavor, DataDir, Socket string
}

// Functions returns the agent's Backup and Clone functions.
func (w Config) Functions(log logr.Logger) (agent.BackupFunc, agent.CloneFunc) {
	backupFn := func(ctx context.Context, req agent.BackupRequest, progress func(int64)) (*backup.Manifest, error) {
		var cfg objectstore.Config
		if err := json.Unmarshal(req.Store, &cfg); err != nil {
			return nil, fmt.Errorf("decoding the store configuration: %w", err)
		}
		store, err := objectstore.New(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("opening the backup store: %w", err)
		}
		if err := objectstore.Check(ctx, store); err != nil {
			return nil, err
		}
		socket := req.DB.Socket
		if socket == "" && req.DB.Host == "" {
			socket = w.Socket
		}
		return backup.Take(ctx, backup.TakeOptions{
			Prefix: req.Prefix,
			Name:   req.Meta.Name, Namespace: req.Meta.Namespace, Cluster: req.Meta.Cluster,
			SourceInstance: req.Meta.SourceInstance, SourceRole: req.Meta.SourceRole,
			Flavor: firstNonEmpty(req.Meta.Flavor, w.Flavor),
			Socket: socket, Host: req.DB.Host, Port: req.DB.Port,
			User: req.DB.User, Password: req.DB.Password,
			DataDir:  w.DataDir,
			Progress: progress,
			Log:      func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) },
		}, store)
	}
	// Clone streams this instance's backup to a new instance (restore.FromPeer).
	cloneFn := func(ctx context.Context, req agent.CloneRequest, out io.Writer) error {
		if w.Flavor != "mariadb" {
			return fmt.Errorf("flavor %q: clones are implemented for mariadb only", w.Flavor)
		}
		socket := req.DB.Socket
		if socket == "" && req.DB.Host == "" {
			socket = w.Socket
		}
		rep, err := backup.Stream(ctx, backup.StreamOptions{
			Socket: socket, Host: req.DB.Host, Port: req.DB.Port, User: req.DB.User, Password: req.DB.Password,
			DataDir: w.DataDir,
			Log:     func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) },
		}, out)
		if err != nil {
			return err
		}
		log.Info("Clone stream complete", "gtidPosition", rep.GTIDPosition, "rawBytes", rep.RawBytes, "bytes", rep.Bytes)
		return nil
	}
	return backupFn, cloneFn
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ReseedFunc writes restore.ReseedMarker (the operator's reason, and the copy it kept) into
// the data directory: the next seed container makes the copy again with the server stopped,
// then discards the data and seeds the instance again. The running server is not touched.
func (w Config) ReseedFunc() agent.ReseedFunc {
	return func(_ context.Context, req agent.ReseedRequest) error {
		mark := restore.ReseedMark{Reason: req.Reason, Keep: req.Keep}
		file := filepath.Join(w.DataDir, restore.ReseedMarker)
		if err := os.WriteFile(file, mark.Encode(), 0o640); err != nil {
			return fmt.Errorf("writing %s: %w", file, err)
		}
		return nil
	}
}

// KeepFunc keeps the copy in the data directory's root (restore.KeptPrefix), on the
// instance's volume: it survives the re-clone that follows.
func (w Config) KeepFunc() agent.KeepFunc {
	return func(ctx context.Context, req agent.KeepRequest) (*agent.KeepResponse, error) {
		if w.Flavor != "mariadb" {
			return nil, fmt.Errorf("flavor %q: kept copies are implemented for mariadb only", w.Flavor)
		}
		state, err := binlog.ParseServerState(req.PrimaryState)
		if err != nil {
			return nil, fmt.Errorf("the primary's state: %w", err)
		}
		store, err := objectstore.NewDirectory(w.DataDir)
		if err != nil {
			return nil, err
		}
		cp, err := binlog.Keep(ctx, binlog.KeepOptions{
			BinlogIndex: filepath.Join(w.DataDir, restore.BinlogIndex), Primary: state,
			Store: store, Prefix: restore.KeptPrefix, Name: req.Name,
			Instance: req.Instance, PrimaryName: req.Primary, Reason: req.Reason,
		})
		if err != nil {
			return nil, err
		}
		resp := &agent.KeepResponse{Copy: *cp}
		if cp.Transactions == 0 {
			return resp, nil
		}
		resp.Location = objectstore.Locate(store, restore.KeptPrefix+cp.Object)
		if len(req.Store) > 0 {
			var cfg objectstore.Config
			if err := json.Unmarshal(req.Store, &cfg); err != nil {
				return nil, fmt.Errorf("decoding the store configuration: %w", err)
			}
			remote, err := objectstore.New(ctx, cfg)
			if err != nil {
				return nil, fmt.Errorf("opening the backup store: %w", err)
			}
			if err := binlog.CopyKept(ctx, store, restore.KeptPrefix, remote, req.StorePrefix, cp); err != nil {
				return nil, fmt.Errorf("uploading the copy to the backup store (it is kept on the volume): %w", err)
			}
			resp.StoreLocation = objectstore.Locate(remote, req.StorePrefix+cp.Object)
		}
		return resp, nil
	}
}

// CloneUpgradeRecordFunc reads the data directory's mariadb-upgrade record for a clone to send
// along (agent.ServerOptions.CloneUpgradeRecord); "" when there is none or it cannot be read.
func (w Config) CloneUpgradeRecordFunc() func() string {
	return func() string { return engineupgrade.TransferableRecord(w.DataDir) }
}

// EngineUpgradeFunc runs mariadb-upgrade against the local server with the caller's account
// (the image's tool: the server's own version).
func (w Config) EngineUpgradeFunc() agent.EngineUpgradeFunc {
	return func(ctx context.Context, db agent.DBConn) (agent.EngineUpgradeResponse, error) {
		socket := db.Socket
		if socket == "" && db.Host == "" {
			socket = w.Socket
		}
		res, err := engineupgrade.Run(ctx, engineupgrade.Options{DataDir: w.DataDir, Socket: socket, Host: db.Host, Port: db.Port,
			User: db.User, Password: db.Password})
		return agent.EngineUpgradeResponse{From: res.From, To: res.To, Ran: res.Ran, Seconds: res.Took.Seconds()}, err
	}
}

// GTIDStateFunc reads the local server's @@gtid_binlog_state with the caller's account.
func (w Config) GTIDStateFunc() agent.GTIDStateFunc {
	return func(ctx context.Context, db agent.DBConn) (string, error) {
		socket := db.Socket
		if socket == "" && db.Host == "" {
			socket = w.Socket
		}
		return backup.GTIDBinlogState(ctx, backup.StreamOptions{Socket: socket, Host: db.Host, Port: db.Port, User: db.User, Password: db.Password})
	}
}

// StopReleasedFile is the file that releases the server container's preStop hold, in the run
// directory beside the server's socket (podlayout.StopReleasedFileName); "" without a socket.
func (w Config) StopReleasedFile() string {
	if w.Socket == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(w.Socket), podlayout.StopReleasedFileName)
}

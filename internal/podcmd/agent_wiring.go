package podcmd

// This file connects `dolphin agent` to the code that does the work (internal/backup,
// internal/objectstore). It is owned by whoever wires those packages in; agent.go only calls
// addFlags and functions.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/engineupgrade"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/podlayout"
	"github.com/dolphin-operator/dolphin/internal/restore"
)

// agentWiring holds the flags that say where the data and the server of this pod are. The pod
// spec (internal/resources/agent.go) passes them.
type agentWiring struct {
	flavor, dataDir, socket string
}

// addFlags registers the wiring's flags on fs.
func (w *agentWiring) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&w.flavor, "flavor", "mariadb", `database flavor: "mariadb" or "mysql"`)
	fs.StringVar(&w.dataDir, "datadir", "/var/lib/mysql", "the server's data directory")
	fs.StringVar(&w.socket, "socket", "", "the server's Unix socket, when a request names none")
}

// functions returns the agent's Backup and Clone functions.
func (w *agentWiring) functions(log logr.Logger) (agent.BackupFunc, agent.CloneFunc) {
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
			socket = w.socket
		}
		return backup.Take(ctx, backup.TakeOptions{
			Prefix: req.Prefix,
			Name:   req.Meta.Name, Namespace: req.Meta.Namespace, Cluster: req.Meta.Cluster,
			SourceInstance: req.Meta.SourceInstance, SourceRole: req.Meta.SourceRole,
			Flavor: firstNonEmpty(req.Meta.Flavor, w.flavor),
			Socket: socket, Host: req.DB.Host, Port: req.DB.Port,
			User: req.DB.User, Password: req.DB.Password,
			DataDir:  w.dataDir,
			Progress: progress,
			Log:      func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) },
		}, store)
	}
	// Clone streams this instance's backup to a new instance (restore.FromPeer).
	cloneFn := func(ctx context.Context, req agent.CloneRequest, out io.Writer) error {
		if w.flavor != "mariadb" {
			return fmt.Errorf("flavor %q: clones are implemented for mariadb only", w.flavor)
		}
		socket := req.DB.Socket
		if socket == "" && req.DB.Host == "" {
			socket = w.socket
		}
		rep, err := backup.Stream(ctx, backup.StreamOptions{
			Socket: socket, Host: req.DB.Host, Port: req.DB.Port, User: req.DB.User, Password: req.DB.Password,
			DataDir: w.dataDir,
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

// reseedFunc writes restore.ReseedMarker (the operator's reason, and the copy it kept) into
// the data directory: the next seed container makes the copy again with the server stopped,
// then discards the data and seeds the instance again. The running server is not touched.
func (w *agentWiring) reseedFunc() agent.ReseedFunc {
	return func(_ context.Context, req agent.ReseedRequest) error {
		mark := restore.ReseedMark{Reason: req.Reason, Keep: req.Keep}
		file := filepath.Join(w.dataDir, restore.ReseedMarker)
		if err := os.WriteFile(file, mark.Encode(), 0o640); err != nil {
			return fmt.Errorf("writing %s: %w", file, err)
		}
		return nil
	}
}

// keepFunc keeps the copy in the data directory's root (restore.KeptPrefix), on the
// instance's volume: it survives the re-clone that follows.
func (w *agentWiring) keepFunc() agent.KeepFunc {
	return func(ctx context.Context, req agent.KeepRequest) (*agent.KeepResponse, error) {
		if w.flavor != "mariadb" {
			return nil, fmt.Errorf("flavor %q: kept copies are implemented for mariadb only", w.flavor)
		}
		state, err := binlog.ParseServerState(req.PrimaryState)
		if err != nil {
			return nil, fmt.Errorf("the primary's state: %w", err)
		}
		store, err := objectstore.NewDirectory(w.dataDir)
		if err != nil {
			return nil, err
		}
		cp, err := binlog.Keep(ctx, binlog.KeepOptions{
			BinlogIndex: filepath.Join(w.dataDir, restore.BinlogIndex), Primary: state,
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

// engineUpgradeFunc runs mariadb-upgrade against the local server with the caller's account
// (the image's tool: the server's own version).
func (w *agentWiring) engineUpgradeFunc() agent.EngineUpgradeFunc {
	return func(ctx context.Context, db agent.DBConn) (agent.EngineUpgradeResponse, error) {
		socket := db.Socket
		if socket == "" && db.Host == "" {
			socket = w.socket
		}
		res, err := engineupgrade.Run(ctx, engineupgrade.Options{DataDir: w.dataDir, Socket: socket, Host: db.Host, Port: db.Port,
			User: db.User, Password: db.Password})
		return agent.EngineUpgradeResponse{From: res.From, To: res.To, Ran: res.Ran, Seconds: res.Took.Seconds()}, err
	}
}

// gtidStateFunc reads the local server's @@gtid_binlog_state with the caller's account.
func (w *agentWiring) gtidStateFunc() agent.GTIDStateFunc {
	return func(ctx context.Context, db agent.DBConn) (string, error) {
		socket := db.Socket
		if socket == "" && db.Host == "" {
			socket = w.socket
		}
		return backup.GTIDBinlogState(ctx, backup.StreamOptions{Socket: socket, Host: db.Host, Port: db.Port, User: db.User, Password: db.Password})
	}
}

// stopReleasedFile is the file that releases the server container's preStop hold, in the run
// directory beside the server's socket (podlayout.StopReleasedFileName); "" without a socket.
func (w *agentWiring) stopReleasedFile() string {
	if w.socket == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(w.socket), podlayout.StopReleasedFileName)
}

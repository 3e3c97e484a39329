package main

// This file connects `dolphin agent` to the code that does the work (internal/backup,
// internal/objectstore). It is owned by whoever wires those packages in; agent.go only calls
// addFlags and functions.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// errNotWired is what the agent answers to a clone request: seeding replicas from a peer is
// not built yet.
var errNotWired = errors.New("clone is not built yet: replicas are seeded by replication from the primary")

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
func (w *agentWiring) functions(log logr.Logger) (agent.BackupFunc, agent.CloneFunc, error) {
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
		}, store)
	}
	// Clone (seeding a replica from a peer) is not built yet: it answers with an error.
	cloneFn := func(context.Context, agent.CloneRequest, io.Writer) error {
		return errNotWired
	}
	return backupFn, cloneFn, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

package main

// This file connects `dolphin agent` to the code that does the work (internal/backup,
// internal/objectstore). It is owned by whoever wires those packages in; agent.go only calls
// addFlags and functions.

import (
	"context"
	"errors"
	"io"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/backup"
)

// errNotWired is what the agent answers until the backup code is wired in.
var errNotWired = errors.New("not wired yet: the agent's backup and clone are not connected to internal/backup")

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
	// wired in agent_wiring.go: decode req.Store into an objectstore.Config, open it with
	// objectstore.New, and call backup.Take with TakeOptions built from req (Prefix, Meta,
	// DB) and w (DataDir, Flavor, Socket); Clone runs the backup tool's stream into w.
	backupFn := func(context.Context, agent.BackupRequest, func(int64)) (*backup.Manifest, error) {
		return nil, errNotWired
	}
	cloneFn := func(context.Context, agent.CloneRequest, io.Writer) error {
		return errNotWired
	}
	log.Info("The backup and clone functions are not wired yet; requests will fail")
	return backupFn, cloneFn, nil
}

// Package seed is the seed init container of every instance pod (`dolphin seed`,
// internal/podcmd parses its flags): it fills an uninitialised data directory the way the
// operator says, over the agent's HTTPS API (POST /v1/seed): "empty" runs the install script,
// "backup" restores a backup (restore.IntoDataDir), "clone" streams a peer's data
// (restore.FromPeer). A data directory the operator marked for re-seeding is first turned into
// an uninitialised one, keeping a copy of what it holds (HonourReseed).
package seed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/migrate"
	"github.com/dolphin-operator/dolphin/internal/restore"
	"github.com/dolphin-operator/dolphin/internal/termination"
)

// Options say where this instance's data, server and agent credentials are.
type Options struct {
	// Listen is the address of the seed API; TokenFile, CertFile and KeyFile the agent's
	// token and certificate, CAFile the CA a peer's agent must chain to (default: ca.crt
	// beside CertFile).
	Listen, TokenFile, CertFile, KeyFile, CAFile string
	// InitScript, when set, is run with /bin/sh before anything else, on every start: it
	// writes the per-instance config (resources.InitScript), which a separate init container
	// wrote before template generation 6.
	InitScript string
	// InstallScript initialises an empty data directory (mode empty), run with /bin/sh.
	InstallScript string
	// Nosync is a dolphin binary offering `dolphin nosync` (internal/nosync), given to the
	// install script as $DOLPHIN_NOSYNC: it runs the engine's initialisation through it with
	// the flushes skipped, then syncs the data directory once. Empty: flushes as usual.
	Nosync string
	// DataDir is the server's data directory; Flavor the database flavor.
	DataDir, Flavor string
	// Backup returns how to restore this instance's backup (mode backup), or why it has none.
	Backup func() (restore.Options, error)
	// Peer is a clone's options but what the instruction says (the peer, the source account).
	Peer restore.PeerOptions
	// PasswordsFrom says where the passwords come from, added to an error when one is missing.
	PasswordsFrom string
	// WaitLogEvery is how often Run says it waits; Linger how long it keeps answering GET
	// /v1/seed with Succeeded before it returns (so that the operator can read it).
	WaitLogEvery, Linger time.Duration
}

// instructionResult is how an instruction ended.
type instructionResult struct {
	status agent.SeedStatus
	err    error
}

// Run seeds the data directory unless it holds restore.InitializedMarker (after honouring a
// re-seed mark): it serves the agent's seed API until an instruction succeeded or failed (or
// ctx ends), logging to output with termination.SeedPrefix, and returns the instruction's
// error. It never returns nil without an initialised data directory.
func Run(ctx context.Context, o Options, output io.Writer) error {
	w := &syncWriter{w: output}
	if o.WaitLogEvery <= 0 {
		o.WaitLogEvery = 30 * time.Second
	}
	logf := func(format string, args ...any) { _, _ = fmt.Fprintf(w, termination.SeedPrefix+format+"\n", args...) }
	if o.InitScript != "" {
		cmd := exec.CommandContext(ctx, "/bin/sh", o.InitScript)
		cmd.Stdout, cmd.Stderr = w, w
		cmd.WaitDelay = 10 * time.Second
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("the init script %s failed: %w", o.InitScript, err)
		}
	}
	marker := filepath.Join(o.DataDir, restore.InitializedMarker)
	if err := HonourReseed(ctx, o.DataDir, logf); err != nil {
		return err
	}
	switch _, err := os.Stat(marker); {
	case err == nil:
		logf("%s exists: the instance has its data already, nothing to seed", marker)
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("checking %s: %w", marker, err)
	}
	switch {
	case o.TokenFile == "":
		return errors.New("--token-file is required")
	case o.CertFile == "" || o.KeyFile == "":
		return errors.New("--tls-cert and --tls-key are required")
	}
	if o.CAFile == "" {
		o.CAFile = filepath.Join(filepath.Dir(o.CertFile), "ca.crt")
	}
	log := funcr.New(func(prefix, args string) {
		_, _ = fmt.Fprintln(w, termination.SeedPrefix+strings.TrimSpace(prefix+" "+args))
	}, funcr.Options{})
	results := make(chan instructionResult, 1)
	srv, err := agent.NewServer(agent.ServerOptions{
		TokenFile: o.TokenFile, CertFile: o.CertFile, KeyFile: o.KeyFile, Logger: log,
		Seed: func(ctx context.Context, req agent.SeedRequest, progress func(int64)) error {
			return o.seed(ctx, req, progress, logf, w)
		},
		SeedCheck: o.check,
		SeedDone: func(st agent.SeedStatus, err error) {
			select {
			case results <- instructionResult{st, err}:
			default: // the first outcome decides
			}
		},
	})
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, o.Listen) }()

	logf("waiting for the operator to say how to seed this instance")
	tick := time.NewTicker(o.WaitLogEvery)
	defer tick.Stop()
	var res instructionResult
	for waiting := true; waiting; {
		select {
		case <-tick.C:
			if st := srv.SeedStatus(); st.Phase != agent.SeedRunning {
				logf("waiting for the operator to say how to seed this instance")
			}
		case res = <-results:
			waiting = false
		case err := <-served:
			return err
		case <-ctx.Done():
			// Shut down: a running instruction is cancelled, and waited for. Never exit 0
			// here: the server would start on an uninitialised data directory.
			stop()
			err := <-served
			select {
			case res = <-results:
				if res.err == nil {
					return nil
				}
				return res.err
			default:
			}
			return errors.Join(errors.New("stopped before the operator said how to seed this instance"), err)
		}
	}
	if res.err == nil {
		logf("done: %s was seeded (mode %s)", o.DataDir, res.status.Mode)
		select {
		case <-time.After(o.Linger):
		case <-ctx.Done():
		}
	}
	stop()
	if err := <-served; err != nil && res.err == nil {
		return err
	}
	return res.err
}

// check refuses, before anything runs, an instruction this instance cannot carry out.
func (o Options) check(req agent.SeedRequest) error {
	if o.Flavor == restore.FlavorMySQL && req.Mode != agent.SeedModeEmpty {
		return fmt.Errorf("seeding a MySQL instance by %s is %w: only mode empty is", req.Mode, restore.ErrNotSupported)
	}
	switch req.Mode {
	case agent.SeedModeEmpty:
		if _, err := os.Stat(o.InstallScript); err != nil {
			return fmt.Errorf("the install script: %w", err)
		}
	case agent.SeedModeBackup:
		if _, err := o.Backup(); err != nil {
			return fmt.Errorf("this instance was not given a backup to restore: %w", err)
		}
	case agent.SeedModeClone:
		if _, err := os.ReadFile(o.CAFile); err != nil {
			return fmt.Errorf("the agent CA: %w", err)
		}
	}
	return nil
}

// seed carries out one instruction.
func (o Options) seed(ctx context.Context, req agent.SeedRequest, progress func(int64), logf func(string, ...any), w io.Writer) error {
	switch req.Mode {
	case agent.SeedModeEmpty:
		// What a failed clone or restore left must not be mistaken for an install's result.
		removed, err := restore.ClearUninitialized(o.DataDir)
		if err != nil {
			return fmt.Errorf("clearing the data directory before the install script: %w", err)
		}
		if len(removed) > 0 {
			logf("removed what a failed attempt left in %s (it had no %s): %s", o.DataDir, restore.InitializedMarker, strings.Join(removed, ", "))
		}
		return o.install(ctx, w)
	case agent.SeedModeBackup:
		opts, err := o.Backup()
		if err != nil {
			return err
		}
		opts.Log, opts.Progress = logf, progress
		_, err = restore.IntoDataDir(ctx, opts)
		return o.passwordHint(err, opts.OperatorPassword, opts.RootPassword)
	case agent.SeedModeClone:
		opts, err := o.peerOptions(req)
		if err != nil {
			return err
		}
		opts.Log, opts.Progress = logf, progress
		_, err = restore.FromPeer(ctx, opts)
		return o.passwordHint(err, opts.OperatorPassword, opts.RootPassword)
	case agent.SeedModeExternal:
		opts, cleanup, err := o.externalOptions(req)
		if err != nil {
			return err
		}
		defer cleanup()
		opts.Log, opts.Progress = logf, progress
		_, err = restore.FromExternal(ctx, opts)
		return o.passwordHint(err, opts.OperatorPassword, opts.RootPassword)
	}
	return fmt.Errorf("unknown mode %q", req.Mode)
}

// peerOptions maps a clone instruction, the flags and the environment to restore.PeerOptions.
func (o Options) peerOptions(req agent.SeedRequest) (restore.PeerOptions, error) {
	token, err := os.ReadFile(o.TokenFile)
	if err != nil {
		return restore.PeerOptions{}, fmt.Errorf("reading the agent token: %w", err)
	}
	ca, err := os.ReadFile(o.CAFile)
	if err != nil {
		return restore.PeerOptions{}, fmt.Errorf("reading the agent CA: %w", err)
	}
	p := o.Peer
	p.URL, p.ServerName, p.Token, p.CACertPEM = req.Clone.URL, req.Clone.ServerName, strings.TrimSpace(string(token)), ca
	p.SourceDB = req.SourceDB
	return p, nil
}

// externalOptions maps an external instruction and the flags to restore.ExternalOptions; the
// source's CA, when given, goes to a file in the temporary directory that cleanup removes.
func (o Options) externalOptions(req agent.SeedRequest) (restore.ExternalOptions, func(), error) {
	e, p := req.External, o.Peer
	opts := restore.ExternalOptions{
		Source:  migrate.Endpoint{Host: e.Host, Port: e.Port, User: e.User, Password: e.Password},
		DataDir: p.DataDir, DefaultsFile: p.DefaultsFile, ServerBinary: p.ServerBinary, Flavor: p.Flavor,
		OperatorUser: p.OperatorUser, OperatorPassword: p.OperatorPassword, RootPassword: p.RootPassword,
		TmpDir: p.TmpDir, StartTimeout: p.StartTimeout, StopTimeout: p.StopTimeout,
	}
	if len(e.CACertPEM) == 0 {
		return opts, func() {}, nil
	}
	f, err := os.CreateTemp(p.TmpDir, "external-ca-*.crt")
	if err != nil {
		return opts, nil, fmt.Errorf("writing the source's CA: %w", err)
	}
	_, werr := f.Write(e.CACertPEM)
	if err := errors.Join(werr, f.Close()); err != nil {
		os.Remove(f.Name())
		return opts, nil, fmt.Errorf("writing the source's CA: %w", err)
	}
	opts.Source.CAFile = f.Name()
	return opts, func() { os.Remove(f.Name()) }, nil
}

// install runs the install script with this process's environment, its output to w, and
// checks that it initialised the data directory.
func (o Options) install(ctx context.Context, w io.Writer) error {
	cmd := exec.CommandContext(ctx, "/bin/sh", o.InstallScript)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Env = installEnv(os.Environ(), o.Nosync)
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("the install script %s failed: %w", o.InstallScript, err)
	}
	marker := filepath.Join(o.DataDir, restore.InitializedMarker)
	if _, err := os.Stat(marker); err != nil {
		return fmt.Errorf("the install script %s exited 0 but did not write %s: %w", o.InstallScript, marker, err)
	}
	return nil
}

// installEnv is the install script's environment: this process's, with DOLPHIN_NOSYNC set
// to nosync (removed when nosync is empty).
func installEnv(environ []string, nosync string) []string {
	env := slices.DeleteFunc(slices.Clone(environ), func(kv string) bool { return strings.HasPrefix(kv, NosyncEnv+"=") })
	if nosync != "" {
		env = append(env, NosyncEnv+"="+nosync)
	}
	return env
}

// NosyncEnv names the dolphin binary the install script runs the engine's initialisation
// through (`$DOLPHIN_NOSYNC nosync -- …`); resources.InstallScript reads it.
const NosyncEnv = "DOLPHIN_NOSYNC"

// passwordHint adds where the passwords come from (PasswordsFrom) to err when one is missing.
func (o Options) passwordHint(err error, passwords ...string) error {
	for _, p := range passwords {
		if err != nil && p == "" && o.PasswordsFrom != "" {
			return fmt.Errorf("%w (the passwords come from %s)", err, o.PasswordsFrom)
		}
	}
	return err
}

// syncWriter serialises writes from the log, the server and the install script.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// HonourReseed turns a data directory the operator marked for re-seeding (restore.ReseedMarker,
// written by the agent) into an uninitialised one: the copy the operator kept is made again
// with the server stopped (restore.KeepAgain: what was committed since is kept too; on failure
// nothing is discarded), then the markers go, so the data left is removed as a failed
// attempt's leftovers by whichever seeding follows. The marker itself is removed last, with
// the rest.
func HonourReseed(ctx context.Context, dataDir string, logf func(string, ...any)) error {
	b, err := os.ReadFile(filepath.Join(dataDir, restore.ReseedMarker))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", restore.ReseedMarker, err)
	}
	mark := restore.ParseReseedMark(b)
	logf("the operator asked to discard this instance's data and seed it again: %s", mark.Reason)
	if mark.Keep != nil {
		if err := restore.KeepAgain(ctx, dataDir, *mark.Keep, logf); err != nil {
			return fmt.Errorf("%w; the data is not discarded", err)
		}
	}
	for _, m := range []string{restore.InitializedMarker, restore.RestoredMarker} {
		if err := os.Remove(filepath.Join(dataDir, m)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("discarding %s: %w", m, err)
		}
	}
	return nil
}

package podcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/spf13/cobra"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/restore"
	"github.com/dolphin-operator/dolphin/internal/termination"
)

// How often `dolphin seed` says it waits, and how long it keeps answering GET /v1/seed with
// Succeeded before it exits (so that the operator can read it). Tests shorten them.
var (
	seedWaitLogEvery = 30 * time.Second
	seedLinger       = 2 * time.Second
)

// seedExit ends the process after a failure has been reported; tests replace it.
var seedExit = os.Exit

// seedFlags are the flags of `dolphin seed`: the agent's server flags, the install script,
// and `dolphin restore`'s flags (data directory, server, backup store).
type seedFlags struct {
	listen, tokenFile, tlsCert, tlsKey, caFile, installScript string
	restore                                                   restoreFlags
}

// newSeedCmd returns `dolphin seed`, the init container of every instance pod (in the
// database image, after the init container that writes the per-instance config): it fills
// an uninitialised data directory the way the operator says, over the agent's HTTPS API.
func newSeedCmd() *cobra.Command {
	var f seedFlags
	cmd := &cobra.Command{
		Use:   "seed",
		Short: "Fill this instance's uninitialised data directory the way the operator says (init container)",
		Long: "Exit at once when the data directory holds .dolphin-initialized. Otherwise serve the\n" +
			"agent's HTTPS API (the same token and certificate as `dolphin agent`) and wait for the\n" +
			"operator's instruction, POST /v1/seed: \"empty\" runs the install script, \"backup\"\n" +
			"restores the backup of --path (as `dolphin restore`), \"clone\" clones a peer's agent.\n" +
			"GET /v1/seed reports the phase. On success it exits 0; on failure the last line is\n" +
			"\"" + termination.SeedPrefix + "<error>\" and it exits 1 (the next start waits for a new instruction).\n\n" +
			"Secrets come from the environment: " + envOperatorUser + " (default " + defaultOperatorUser + "), " +
			envOperatorPassword + ",\n" + envRootPassword + ", and " + envS3AccessKeyID + " and " + envS3SecretAccessKey + " for a backup.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := &syncWriter{w: cmd.ErrOrStderr()}
			err := f.run(cmd.Context(), w)
			if err != nil {
				termination.Report(w, termination.SeedPrefix, err)
				seedExit(1)
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", fmt.Sprintf(":%d", agent.DefaultPort), "address the HTTPS API listens on")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token requests must carry, and clones send (required)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM server certificate (required)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM server key (required)")
	fs.StringVar(&f.caFile, "ca-file", "", "PEM CA a peer's agent certificate must chain to (default: ca.crt beside --tls-cert)")
	fs.StringVar(&f.installScript, "install-script", path.Join(mycnf.ConfigDir, "install.sh"),
		"script that initialises an empty data directory (mode empty), run with /bin/sh")
	f.restore.addFlags(fs)
	return cmd
}

// seedOutcome is how an instruction ended.
type seedOutcome struct {
	status agent.SeedStatus
	err    error
}

// run serves the seed API until an instruction succeeded or failed (or ctx ends), logging
// to w. It returns the instruction's error.
func (f *seedFlags) run(ctx context.Context, w io.Writer) error {
	logf := func(format string, args ...any) { _, _ = fmt.Fprintf(w, termination.SeedPrefix+format+"\n", args...) }
	marker := filepath.Join(f.restore.dataDir, restore.InitializedMarker)
	if err := honourReseed(ctx, f.restore.dataDir, logf); err != nil {
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
	case f.tokenFile == "":
		return errors.New("--token-file is required")
	case f.tlsCert == "" || f.tlsKey == "":
		return errors.New("--tls-cert and --tls-key are required")
	}
	if f.caFile == "" {
		f.caFile = filepath.Join(filepath.Dir(f.tlsCert), "ca.crt")
	}
	log := funcr.New(func(prefix, args string) {
		_, _ = fmt.Fprintln(w, termination.SeedPrefix+strings.TrimSpace(prefix+" "+args))
	}, funcr.Options{})
	outcome := make(chan seedOutcome, 1)
	srv, err := agent.NewServer(agent.ServerOptions{
		TokenFile: f.tokenFile, CertFile: f.tlsCert, KeyFile: f.tlsKey, Logger: log,
		Seed: func(ctx context.Context, req agent.SeedRequest, progress func(int64)) error {
			return f.seed(ctx, req, progress, logf, w)
		},
		SeedCheck: f.check,
		SeedDone: func(st agent.SeedStatus, err error) {
			select {
			case outcome <- seedOutcome{st, err}:
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
	go func() { served <- srv.Serve(sctx, f.listen) }()

	logf("waiting for the operator to say how to seed this instance")
	tick := time.NewTicker(seedWaitLogEvery)
	defer tick.Stop()
	var out seedOutcome
	for waiting := true; waiting; {
		select {
		case <-tick.C:
			if st := srv.SeedStatus(); st.Phase != agent.SeedRunning {
				logf("waiting for the operator to say how to seed this instance")
			}
		case out = <-outcome:
			waiting = false
		case err := <-served:
			return err
		case <-ctx.Done():
			// Shut down: a running instruction is cancelled, and waited for. Never exit 0
			// here: the server would start on an uninitialised data directory.
			stop()
			err := <-served
			select {
			case out = <-outcome:
				if out.err == nil {
					return nil
				}
				return out.err
			default:
			}
			return errors.Join(errors.New("stopped before the operator said how to seed this instance"), err)
		}
	}
	if out.err == nil {
		logf("done: %s was seeded (mode %s)", f.restore.dataDir, out.status.Mode)
		select {
		case <-time.After(seedLinger):
		case <-ctx.Done():
		}
	}
	stop()
	if err := <-served; err != nil && out.err == nil {
		return err
	}
	return out.err
}

// check refuses, before anything runs, an instruction this instance cannot carry out.
func (f *seedFlags) check(req agent.SeedRequest) error {
	if f.restore.flavor == restore.FlavorMySQL && req.Mode != agent.SeedModeEmpty {
		return fmt.Errorf("seeding a MySQL instance by %s is %w: only mode empty is", req.Mode, restore.ErrNotSupported)
	}
	switch req.Mode {
	case agent.SeedModeEmpty:
		if _, err := os.Stat(f.installScript); err != nil {
			return fmt.Errorf("the install script: %w", err)
		}
	case agent.SeedModeBackup:
		if _, err := f.restore.options(os.Getenv, os.ReadFile); err != nil {
			return fmt.Errorf("this instance was not given a backup to restore: %w", err)
		}
	case agent.SeedModeClone:
		if _, err := os.ReadFile(f.caFile); err != nil {
			return fmt.Errorf("the agent CA: %w", err)
		}
	}
	return nil
}

// seed carries out one instruction.
func (f *seedFlags) seed(ctx context.Context, req agent.SeedRequest, progress func(int64), logf func(string, ...any), w io.Writer) error {
	switch req.Mode {
	case agent.SeedModeEmpty:
		// What a failed clone or restore left must not be mistaken for an install's result.
		removed, err := restore.ClearUninitialized(f.restore.dataDir)
		if err != nil {
			return fmt.Errorf("clearing the data directory before the install script: %w", err)
		}
		if len(removed) > 0 {
			logf("removed what a failed attempt left in %s (it had no %s): %s", f.restore.dataDir, restore.InitializedMarker, strings.Join(removed, ", "))
		}
		return f.install(ctx, w)
	case agent.SeedModeBackup:
		opts, err := f.restore.options(os.Getenv, os.ReadFile)
		if err != nil {
			return err
		}
		opts.Log, opts.Progress = logf, progress
		_, err = restore.IntoDataDir(ctx, opts)
		return passwordHint(err, opts.OperatorPassword, opts.RootPassword)
	case agent.SeedModeClone:
		opts, err := f.peerOptions(req)
		if err != nil {
			return err
		}
		opts.Log, opts.Progress = logf, progress
		_, err = restore.FromPeer(ctx, opts)
		return passwordHint(err, opts.OperatorPassword, opts.RootPassword)
	}
	return fmt.Errorf("unknown mode %q", req.Mode)
}

// peerOptions maps a clone instruction, the flags and the environment to restore.PeerOptions.
func (f *seedFlags) peerOptions(req agent.SeedRequest) (restore.PeerOptions, error) {
	token, err := os.ReadFile(f.tokenFile)
	if err != nil {
		return restore.PeerOptions{}, fmt.Errorf("reading the agent token: %w", err)
	}
	ca, err := os.ReadFile(f.caFile)
	if err != nil {
		return restore.PeerOptions{}, fmt.Errorf("reading the agent CA: %w", err)
	}
	r := &f.restore
	o := restore.PeerOptions{
		URL: req.Clone.URL, ServerName: req.Clone.ServerName, Token: strings.TrimSpace(string(token)), CACertPEM: ca,
		SourceDB: req.SourceDB,
		DataDir:  r.dataDir, DefaultsFile: r.defaultsFile, TmpDir: r.tmpDir, Flavor: r.flavor, UseMemory: r.useMemory,
		OperatorUser: os.Getenv(envOperatorUser), OperatorPassword: os.Getenv(envOperatorPassword),
		RootPassword: os.Getenv(envRootPassword),
	}
	if o.OperatorUser == "" {
		o.OperatorUser = defaultOperatorUser
	}
	return o, nil
}

// install runs the install script with this process's environment, its output to w, and
// checks that it initialised the data directory.
func (f *seedFlags) install(ctx context.Context, w io.Writer) error {
	cmd := exec.CommandContext(ctx, "/bin/sh", f.installScript)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("the install script %s failed: %w", f.installScript, err)
	}
	marker := filepath.Join(f.restore.dataDir, restore.InitializedMarker)
	if _, err := os.Stat(marker); err != nil {
		return fmt.Errorf("the install script %s exited 0 but did not write %s: %w", f.installScript, marker, err)
	}
	return nil
}

// passwordHint adds where the passwords come from to err when one is missing.
func passwordHint(err error, passwords ...string) error {
	for _, p := range passwords {
		if err != nil && p == "" {
			return fmt.Errorf("%w (the passwords come from %s and %s)", err, envOperatorPassword, envRootPassword)
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

// honourReseed turns a data directory the operator marked for re-seeding (restore.ReseedMarker,
// written by the agent) into an uninitialised one: the copy the operator kept is made again
// with the server stopped (restore.KeepAgain: what was committed since is kept too; on failure
// nothing is discarded), then the markers go, so the data left is removed as a failed
// attempt's leftovers by whichever seeding follows. The marker itself is removed last, with
// the rest.
func honourReseed(ctx context.Context, dataDir string, logf func(string, ...any)) error {
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

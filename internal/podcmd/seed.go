package podcmd

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"github.com/spf13/cobra"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/nosync"
	"github.com/dolphin-operator/dolphin/internal/restore"
	"github.com/dolphin-operator/dolphin/internal/seed"
	"github.com/dolphin-operator/dolphin/internal/termination"
)

// How often `dolphin seed` says it waits, and how long it keeps answering GET /v1/seed with
// Succeeded before it exits. The operator needs no such answer (the init container's exit 0,
// and its termination message, say the same), so it exits at once: 2 s of every new
// instance's start went to it (issue 35). Tests set both to read the answer.
var (
	seedWaitLogEvery = 30 * time.Second
	seedLinger       = time.Duration(0)
)

// seedExit ends the process after a failure has been reported; tests replace it.
var seedExit = os.Exit

// seedFlags are the flags of `dolphin seed`: the agent's server flags, the install script,
// and `dolphin restore`'s flags (data directory, server, backup store).
type seedFlags struct {
	listen, tokenFile, tlsCert, tlsKey, caFile, initScript, installScript string
	restore                                                               restoreFlags
}

// newSeedCmd returns `dolphin seed`, the init container of every instance pod (in the
// database image): it writes the per-instance config (--init-script; before template
// generation 6 an init container of its own did), then fills an uninitialised data
// directory the way the operator says, over the agent's HTTPS API.
func newSeedCmd() *cobra.Command {
	var f seedFlags
	cmd := &cobra.Command{
		Use:   "seed",
		Short: "Fill this instance's uninitialised data directory the way the operator says (init container)",
		Long: "Run --init-script first when it is set (the per-instance config). Then exit at once when\n" +
			"the data directory holds .dolphin-initialized. Otherwise serve the\n" +
			"agent's HTTPS API (the same token and certificate as `dolphin agent`) and wait for the\n" +
			"operator's instruction, POST /v1/seed: \"empty\" runs the install script, \"backup\"\n" +
			"restores the backup of --path (as `dolphin restore`), \"clone\" clones a peer's agent.\n" +
			"GET /v1/seed reports the phase. On success it exits 0; on failure the last line is\n" +
			"\"" + termination.SeedPrefix + "<error>\" and it exits 1 (the next start waits for a new instruction).\n\n" +
			"Secrets come from the environment: " + envOperatorUser + " (default " + defaultOperatorUser + "), " +
			envOperatorPassword + ",\n" + envRootPassword + ", and " + envS3AccessKeyID + " and " + envS3SecretAccessKey + " for a backup.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.ErrOrStderr()
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
	fs.StringVar(&f.initScript, "init-script", "",
		"script that writes the per-instance config, run with /bin/sh first on every start (empty: none)")
	fs.StringVar(&f.installScript, "install-script", path.Join(mycnf.ConfigDir, "install.sh"),
		"script that initialises an empty data directory (mode empty), run with /bin/sh")
	f.restore.addFlags(fs)
	return cmd
}

// nosyncBinary is this executable's path when it can skip the install's flushes (`dolphin
// nosync`), else empty.
func nosyncBinary() string {
	if !nosync.Supported() {
		return ""
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return exe
}

// run seeds this instance (seed.Run) with the flags and the environment, logging to w.
func (f *seedFlags) run(ctx context.Context, w io.Writer) error {
	r := &f.restore
	peer := restore.PeerOptions{
		DataDir: r.dataDir, DefaultsFile: r.defaultsFile, TmpDir: r.tmpDir, Flavor: r.flavor, UseMemory: r.useMemory,
		OperatorUser: cmp.Or(os.Getenv(envOperatorUser), defaultOperatorUser), OperatorPassword: os.Getenv(envOperatorPassword),
		RootPassword: os.Getenv(envRootPassword),
	}
	return seed.Run(ctx, seed.Options{
		Listen: f.listen, TokenFile: f.tokenFile, CertFile: f.tlsCert, KeyFile: f.tlsKey, CAFile: f.caFile,
		InitScript: f.initScript, InstallScript: f.installScript, Nosync: nosyncBinary(), DataDir: r.dataDir, Flavor: r.flavor,
		Backup:        func() (restore.Options, error) { return r.options(os.Getenv, os.ReadFile) },
		Peer:          peer,
		PasswordsFrom: envOperatorPassword + " and " + envRootPassword,
		WaitLogEvery:  seedWaitLogEvery, Linger: seedLinger,
	}, w)
}

package podcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/podlayout"
	"github.com/dolphin-operator/dolphin/internal/restore"
)

// keptFlags are the flags every `dolphin kept` subcommand takes: where the copies are.
type keptFlags struct {
	store  storeFlags
	prefix string
	tmpDir string
	after  string
}

// newKeptCmd returns `dolphin kept`: the copies of transactions Dolphin kept before it
// discarded an instance's data (docs/mysqlcluster.md, "Kept transactions").
func newKeptCmd() *cobra.Command {
	f := &keptFlags{}
	cmd := &cobra.Command{
		Use:   "kept",
		Short: "List, review and replay the transactions Dolphin kept before re-cloning an instance",
		Long: "Before Dolphin discards an instance's data (a re-clone), it keeps a copy of the transactions\n" +
			"the instance holds and the primary lacks — writes a client may have been told are committed —\n" +
			"as files in the root of the instance's data volume (" + restore.KeptPrefix + "<name>.binlog.zst and .json).\n" +
			"status.keptTransactions of the MySQLCluster lists them. Point --directory at that volume (in the\n" +
			"pod: kubectl exec <pod> -c " + podlayout.ContainerAgent + " -- " + podlayout.AgentBinary + " kept list --directory " + mycnf.DataDir + ").\n\n" +
			"  list            the copies, oldest first\n" +
			"  show NAME       a copy's manifest and its transactions as mariadb-binlog --verbose prints them\n" +
			"  replay NAME -- <mariadb client options>\n" +
			"                  apply the copy to the primary as new transactions (the primary gives them its own\n" +
			"                  GTIDs); the password comes from MYSQL_PWD or a --defaults-file",
	}
	pf := cmd.PersistentFlags()
	f.store.registerOn(pf)
	pf.StringVar(&f.prefix, "prefix", restore.KeptPrefix, "how the copies' names begin in the store")
	pf.StringVar(&f.tmpDir, "tmp-dir", "", "directory for a copy being reviewed or replayed (default: the system's)")
	replay := &cobra.Command{
		Use: "replay NAME -- [mariadb client options]", Short: "Apply a kept copy to the primary as new transactions",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.replay(cmd.Context(), cmd.OutOrStdout(), args[0], args[1:])
		},
	}
	replay.Flags().StringVar(&f.after, "after", "", "replay only the transactions after this original GTID of the copy (the rest of a replay that stopped at a conflict)")
	cmd.AddCommand(replay, &cobra.Command{
		Use: "list", Short: "List the kept copies", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.list(cmd.Context(), cmd.OutOrStdout()) },
	}, &cobra.Command{
		Use: "show NAME", Short: "Print a kept copy's manifest and transactions", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.show(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0])
		},
	})
	return cmd
}

func (f *keptFlags) open(ctx context.Context) (objectstore.Store, error) {
	cfg, err := f.store.config(os.Getenv, os.ReadFile)
	if err != nil {
		return nil, err
	}
	return objectstore.New(ctx, cfg)
}

func (f *keptFlags) list(ctx context.Context, out io.Writer) error {
	store, err := f.open(ctx)
	if err != nil {
		return err
	}
	copies, err := binlog.ListKept(ctx, store, f.prefix)
	if err != nil {
		return err
	}
	if len(copies) == 0 {
		_, err := fmt.Fprintf(out, "no kept copies in %s\n", objectstore.Locate(store, f.prefix))
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tINSTANCE\tPRIMARY\tTRANSACTIONS\tGTIDS\tCOMMITTED\tCREATED")
	for _, c := range copies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s..%s\t%s\n", c.Name, c.Instance, c.Primary, c.Transactions, c.GTIDs,
			c.FirstCommit.Format(time.RFC3339), c.LastCommit.Format(time.RFC3339), c.Created.Format(time.RFC3339))
	}
	return tw.Flush()
}

func (f *keptFlags) show(ctx context.Context, out, errOut io.Writer, name string) error {
	store, err := f.open(ctx)
	if err != nil {
		return err
	}
	m, err := binlog.GetKept(ctx, store, f.prefix, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "# %s: %d transactions %s of %s (server %d), which the primary %s (state %s) lacked\n# committed %s to %s; kept %s: %s\n",
		m.Name, m.Transactions, m.GTIDs, m.Instance, m.ServerID, m.Primary, m.PrimaryState,
		m.FirstCommit.Format(time.RFC3339), m.LastCommit.Format(time.RFC3339), m.Created.Format(time.RFC3339), m.Reason)
	dir, err := os.MkdirTemp(f.tmpDir, "kept-show-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, m.Name+".binlog")
	if err := binlog.FetchKept(ctx, store, f.prefix, m, file); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "mariadb-binlog", "--verbose", "--base64-output=decode-rows", file)
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mariadb-binlog: %w", err)
	}
	return nil
}

func (f *keptFlags) replay(ctx context.Context, out io.Writer, name string, mysqlArgs []string) error {
	if len(mysqlArgs) == 0 {
		return errors.New("give the mariadb client's options for the primary after --, e.g. -- --host=db-primary --user=root (password in MYSQL_PWD)")
	}
	store, err := f.open(ctx)
	if err != nil {
		return err
	}
	res, err := binlog.ReplayKept(ctx, binlog.KeptReplayOptions{Store: store, Prefix: f.prefix, Name: name, MySQLArgs: mysqlArgs, TmpDir: f.tmpDir, After: f.after})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "replayed %s: %d transactions; the primary moved from %s to %s\n", name, res.Transactions, res.Before, res.After)
	return err
}

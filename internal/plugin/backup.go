package plugin

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

func newBackupCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Take a backup now, or list a cluster's backups",
	}
	var wait time.Duration
	var target string
	create := &cobra.Command{
		Use:   "create CLUSTER [--wait DURATION]",
		Short: "Take a backup now (a MySQLBackup <cluster>-manual-<time>) to the cluster's backup store",
		Args:  cobra.ExactArgs(1),
		RunE: e.onCluster(func(ctx context.Context, mc *dolphinv1.MySQLCluster, args []string) error {
			if mc.Spec.Backup == nil {
				return fmt.Errorf("%s has no spec.backup: set a store first (docs/backup.md)", mc.Name)
			}
			b := &dolphinv1.MySQLBackup{
				ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: fmt.Sprintf("%s-manual-%s", mc.Name, time.Now().UTC().Format("20060102-150405"))},
				Spec:       dolphinv1.MySQLBackupSpec{Cluster: mc.Name, Target: dolphinv1.BackupTarget(target)},
			}
			if err := e.c.Create(ctx, b); err != nil {
				return fmt.Errorf("creating MySQLBackup %s: %w", b.Name, err)
			}
			fmt.Fprintf(e.out, "backup %s created\n", b.Name)
			if wait == 0 {
				return nil
			}
			return e.waitBackup(ctx, b, wait)
		}),
	}
	create.Flags().DurationVar(&wait, "wait", 0, "Wait this long for the backup to end (0: return once created).")
	create.Flags().StringVar(&target, "target", "", "PreferReplica or Primary (default: the cluster's spec.backup.target).")
	list := &cobra.Command{
		Use:   "list CLUSTER",
		Short: "List a cluster's backups, oldest first, with their phase, size, GTID position and verification",
		Args:  cobra.ExactArgs(1),
		RunE: e.onCluster(func(ctx context.Context, mc *dolphinv1.MySQLCluster, args []string) error {
			backups, err := e.backupsOf(ctx, mc)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPHASE\tSOURCE\tSIZE\tDURATION\tGTID\tCOMPLETED\tVERIFIED")
			for _, b := range backups {
				verified := "-"
				if v := b.Status.Verification; v != nil {
					verified = string(v.Phase)
				}
				completed := "-"
				if t := b.Status.CompletionTime; t != nil {
					completed = t.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.Name, orDash(string(b.Status.Phase)), orDash(b.Status.SourceInstance),
					orDash(b.Status.StoredSize), orDash(b.Status.Duration), orDash(b.Status.GTIDPosition), completed, verified)
			}
			return tw.Flush()
		}),
	}
	cmd.AddCommand(create, list)
	return cmd
}

// waitBackup waits until the backup has ended, and fails unless it succeeded.
func (e *env) waitBackup(ctx context.Context, b *dolphinv1.MySQLBackup, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(b), b); err == nil {
			switch b.Status.Phase {
			case dolphinv1.BackupSucceeded:
				fmt.Fprintf(e.out, "backup %s succeeded: %s at GTID %s in %s\n", b.Name, orDash(b.Status.StoredSize), orDash(b.Status.GTIDPosition), orDash(b.Status.Duration))
				return nil
			case dolphinv1.BackupFailed:
				return fmt.Errorf("backup %s failed: %s", b.Name, b.Status.Error)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("backup %s has not ended within %s (phase %s)", b.Name, within, orDash(string(b.Status.Phase)))
		case <-time.After(time.Second):
		}
	}
}

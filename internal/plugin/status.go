package plugin

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

func newStatusCmd(e *env) *cobra.Command {
	var watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "status CLUSTER",
		Short: "Show a cluster at a glance: topology, roles, lag, GTID positions, semi-sync, backups, recoverability, conditions",
		Long: "Show a cluster at a glance: its instances with their role, replication and GTID position,\n" +
			"how commits are acknowledged, what waits for a person (lines starting with !), the last\n" +
			"promotion, backups and the point-in-time recovery window, and the conditions.\n" +
			"--watch prints it again, with the time, whenever it changes.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !watch {
				v, err := e.statusView(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return v.render(e.out)
			}
			return e.watchStatus(cmd.Context(), args[0], interval)
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "Print the status again whenever it changes, until interrupted.")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "How often --watch reads the cluster.")
	return cmd
}

// statusView reads the cluster and its backups.
func (e *env) statusView(ctx context.Context, name string) (statusView, error) {
	mc, err := e.cluster(ctx, name)
	if err != nil {
		return statusView{}, err
	}
	backups, err := e.backupsOf(ctx, mc)
	if err != nil {
		return statusView{}, err
	}
	return statusView{Cluster: mc, Backups: backups, Now: time.Now()}, nil
}

// backupsOf lists the cluster's MySQLBackups, oldest first.
func (e *env) backupsOf(ctx context.Context, mc *dolphinv1.MySQLCluster) ([]dolphinv1.MySQLBackup, error) {
	var list dolphinv1.MySQLBackupList
	if err := e.c.List(ctx, &list, client.InNamespace(mc.Namespace)); err != nil {
		return nil, fmt.Errorf("listing MySQLBackups: %w", err)
	}
	var out []dolphinv1.MySQLBackup
	for _, b := range list.Items {
		if b.Spec.Cluster == mc.Name {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b dolphinv1.MySQLBackup) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// watchStatus prints the status whenever what it shows (times aside) changes.
func (e *env) watchStatus(ctx context.Context, name string, interval time.Duration) error {
	var last string
	for {
		v, err := e.statusView(ctx, name)
		if err != nil {
			fmt.Fprintf(e.errOut, "%s %v\n", time.Now().Format("15:04:05.000"), err)
		} else {
			// Compared without the ages, which change every second.
			v.Now = time.Time{}
			var key bytes.Buffer
			if err := v.render(&key); err != nil {
				return err
			}
			if key.String() != last {
				last = key.String()
				v.Now = time.Now()
				fmt.Fprintf(e.out, "--- %s\n", v.Now.Format("15:04:05.000"))
				if err := v.render(e.out); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

package plugin

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// annotate sets (value non-empty) or removes an annotation of the cluster with a merge patch.
func (e *env) annotate(ctx context.Context, mc *dolphinv1.MySQLCluster, key, value string) error {
	patch := client.MergeFrom(mc.DeepCopy())
	if value == "" {
		delete(mc.Annotations, key)
	} else {
		if mc.Annotations == nil {
			mc.Annotations = map[string]string{}
		}
		mc.Annotations[key] = value
	}
	if err := e.c.Patch(ctx, mc, patch); err != nil {
		return fmt.Errorf("annotating MySQLCluster %s/%s: %w", mc.Namespace, mc.Name, err)
	}
	return nil
}

func newSwitchoverCmd(e *env) *cobra.Command {
	var to string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "switchover CLUSTER [--to INSTANCE]",
		Short: "Move the primary to another instance, without losing a write (a planned switchover)",
		Long: "Request a planned switchover (annotation " + dolphinv1.SwitchoverAnnotation + "): Dolphin fences writes\n" +
			"on the primary, waits until the new primary has every transaction, and moves the primary\n" +
			"Service. --to names the instance (a pod); without it Dolphin chooses the most advanced\n" +
			"replica. With --wait, waits until the cluster is Ready with the new primary.",
		Args: cobra.ExactArgs(1),
		RunE: e.onCluster(func(ctx context.Context, mc *dolphinv1.MySQLCluster, args []string) error {
			if mc.Spec.Paused {
				return fmt.Errorf("%s is paused (spec.paused): Dolphin carries out no switchover until it is resumed, and would then at a moment nobody chose; resume it first (kubectl dolphin resume %s)", mc.Name, mc.Name)
			}
			from := mc.Status.CurrentPrimary
			if to != "" {
				if to == from {
					return fmt.Errorf("%s is the primary already", to)
				}
				if !slices.Contains(instanceNames(mc), to) {
					return fmt.Errorf("%s is no instance of %s (instances: %v)", to, mc.Name, instanceNames(mc))
				}
			}
			target := to
			if target == "" {
				target = "auto"
			}
			if err := e.annotate(ctx, mc, dolphinv1.SwitchoverAnnotation, target); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "switchover of %s requested: %s -> %s\n", mc.Name, orDash(from), target)
			if wait == 0 {
				return nil
			}
			return e.waitFor(ctx, mc.Name, wait, "a new primary, Ready", func(c *dolphinv1.MySQLCluster) bool {
				p := c.Status.CurrentPrimary
				return p != "" && p != from && (to == "" || p == to) && c.Annotations[dolphinv1.SwitchoverAnnotation] == "" && ready(c)
			})
		}),
	}
	cmd.Flags().StringVar(&to, "to", "", "The instance (pod name) to promote; default: the most advanced replica.")
	cmd.Flags().DurationVar(&wait, "wait", 0, "Wait this long for the switchover to finish (0: return once requested).")
	return cmd
}

// waitFor polls the cluster until done holds.
func (e *env) waitFor(ctx context.Context, name string, within time.Duration, what string, done func(*dolphinv1.MySQLCluster) bool) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		mc, err := e.cluster(ctx, name)
		if err == nil && done(mc) {
			fmt.Fprintf(e.out, "%s: primary %s, Ready\n", name, mc.Status.CurrentPrimary)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: no %s within %s (kubectl dolphin status %s)", name, what, within, name)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func newAcceptLossCmd(e *env) *cobra.Command {
	var instance string
	cmd := &cobra.Command{
		Use:   "accept-loss CLUSTER --instance LOST-PRIMARY",
		Short: "Let a failover that waits for writes only the lost primary held promote a replica anyway",
		Long: "A failover waits when the lost primary acknowledged writes no replica received\n" +
			"(status says so, with the GTIDs). If that server cannot come back, this gives those\n" +
			"writes up (annotation " + dolphinv1.FailoverAcceptLossAnnotation + "): Dolphin promotes\n" +
			"the best replica. It acts only on a failover from that instance that is in progress.",
		Args: cobra.ExactArgs(1),
		RunE: e.onCluster(func(ctx context.Context, mc *dolphinv1.MySQLCluster, args []string) error {
			t := mc.Status.Topology
			if t == nil || t.FailoverInProgress == nil || t.FailoverInProgress.From != instance {
				return fmt.Errorf("no failover from %q is in progress in %s: nothing to accept (kubectl dolphin status %s)", instance, mc.Name, mc.Name)
			}
			if err := e.annotate(ctx, mc, dolphinv1.FailoverAcceptLossAnnotation, instance); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "the writes only %s held are given up: Dolphin promotes the best replica of %s\n", instance, mc.Name)
			return nil
		}),
	}
	cmd.Flags().StringVar(&instance, "instance", "", "The lost primary whose unreplicated writes are given up (required).")
	_ = cmd.MarkFlagRequired("instance")
	return cmd
}

func newRecloneCmd(e *env) *cobra.Command {
	var instance string
	var manual, auto bool
	cmd := &cobra.Command{
		Use:   "reclone CLUSTER (--instance INSTANCE | --manual | --auto)",
		Short: "Approve re-cloning a held-out former primary, or turn automatic re-cloning off or on",
		Long: "--instance approves re-cloning an errant instance that an unplanned failover replaced as\n" +
			"the primary (annotation " + dolphinv1.RecloneApprovedAnnotation + "): its extra\n" +
			"transactions are kept in the backup store first (status.keptTransactions).\n" +
			"--manual stops Dolphin from re-cloning any errant replica by itself; --auto undoes it\n" +
			"(annotation " + dolphinv1.RecloneAnnotation + ").",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			n := 0
			for _, b := range []bool{instance != "", manual, auto} {
				if b {
					n++
				}
			}
			if n != 1 {
				return fmt.Errorf("give exactly one of --instance, --manual, --auto")
			}
			mc, err := e.cluster(ctx, args[0])
			if err != nil {
				return err
			}
			switch {
			case manual:
				if err := e.annotate(ctx, mc, dolphinv1.RecloneAnnotation, "manual"); err != nil {
					return err
				}
				fmt.Fprintf(e.out, "%s: errant replicas are reported and left alone\n", mc.Name)
			case auto:
				if err := e.annotate(ctx, mc, dolphinv1.RecloneAnnotation, ""); err != nil {
					return err
				}
				fmt.Fprintf(e.out, "%s: errant replicas are re-cloned automatically\n", mc.Name)
			default:
				// Dolphin holds out errant former primaries, and instances whose history
				// diverged or whose source purged what they need (the Degraded condition names
				// them): the approval is for it to decide on; only the primary is refused.
				if !slices.Contains(instanceNames(mc), instance) {
					return fmt.Errorf("%s is no instance of %s (instances: %v)", instance, mc.Name, instanceNames(mc))
				}
				if instance == mc.Status.CurrentPrimary {
					return fmt.Errorf("%s is the primary: it is never re-cloned", instance)
				}
				if err := e.annotate(ctx, mc, dolphinv1.RecloneApprovedAnnotation, instance); err != nil {
					return err
				}
				fmt.Fprintf(e.out, "%s: re-cloning %s approved; Dolphin acts on it if it holds %s out (what no other instance has is kept first)\n", mc.Name, instance, instance)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&instance, "instance", "", "The held-out instance to re-clone.")
	cmd.Flags().BoolVar(&manual, "manual", false, "Stop automatic re-cloning of errant replicas.")
	cmd.Flags().BoolVar(&auto, "auto", false, "Re-clone errant replicas automatically again (the default).")
	return cmd
}

// newPauseCmd is `pause` (pause=true) or `resume`.
func newPauseCmd(e *env, pause bool) *cobra.Command {
	use, short := "resume CLUSTER", "Turn reconciliation of a cluster back on"
	if pause {
		use, short = "pause CLUSTER", "Stop reconciling a cluster (spec.paused) for manual maintenance: no object changed, nothing repaired or switched over until resumed; failover of a lost primary stays on"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: e.onCluster(func(ctx context.Context, mc *dolphinv1.MySQLCluster, args []string) error {
			patch := client.MergeFrom(mc.DeepCopy())
			mc.Spec.Paused = pause
			if err := e.c.Patch(ctx, mc, patch); err != nil {
				return fmt.Errorf("setting spec.paused of %s: %w", mc.Name, err)
			}
			state := "resumed"
			if pause {
				state = "paused"
			}
			fmt.Fprintf(e.out, "%s %s\n", mc.Name, state)
			if to := mc.Annotations[dolphinv1.SwitchoverAnnotation]; !pause && to != "" {
				fmt.Fprintf(e.errOut, "warning: a switchover request (%s=%s) was waiting: Dolphin carries it out now\n", dolphinv1.SwitchoverAnnotation, to)
			}
			if c := meta.FindStatusCondition(mc.Status.Conditions, dolphinv1.ConditionReady); pause && c != nil && c.Status != "True" {
				fmt.Fprintf(e.errOut, "warning: %s was not Ready (%s): nothing repairs it while paused\n", mc.Name, c.Reason)
			}
			return nil
		}),
	}
}

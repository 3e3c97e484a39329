package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

func newCutoverCmd(e *env) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "cutover CLUSTER [--wait DURATION]",
		Short: "Move writes from the server a cluster follows to the cluster (the end of a migration)",
		Long: "Request the cutover of a cluster that follows the server it was copied from\n" +
			"(spec.bootstrap.external with replicate: true; annotation " + dolphinv1.CutoverAnnotation + "):\n" +
			"Dolphin fences the server (read_only, its clients' sessions ended), waits until the\n" +
			"cluster's primary holds the server's final position, stops following and opens the\n" +
			"primary for writes. Point the application at the cluster's primary Service. With --wait,\n" +
			"waits until the cluster is cut over and Ready, and prints the final position and the\n" +
			"write pause (docs/migrate.md).",
		Args: cobra.ExactArgs(1),
		RunE: e.onCluster(func(ctx context.Context, mc *dolphinv1.MySQLCluster, _ []string) error {
			if err := stillFollowing(mc, "there is nothing to cut over"); err != nil {
				return err
			}
			if mc.Spec.Paused {
				return fmt.Errorf("%s is paused (spec.paused): Dolphin carries out no cutover until it is resumed; resume it first (kubectl dolphin resume %s)", mc.Name, mc.Name)
			}
			// A new value each time: a cutover that failed is tried again only for a new one.
			if err := e.annotate(ctx, mc, dolphinv1.CutoverAnnotation, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "cutover of %s requested: writes move from %s to the cluster\n", mc.Name, mc.Spec.Bootstrap.External.Host)
			if wait == 0 {
				return nil
			}
			var done *dolphinv1.CutoverRecord
			err := e.waitFor(ctx, mc.Name, wait, "the cutover, Ready", func(c *dolphinv1.MySQLCluster) bool {
				done = cutOver(c)
				return done != nil && ready(c)
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.out, "cut over to %s at %s, write pause %d ms\n", done.Instance, orDash(done.Position), done.WritePauseMilliseconds)
			if done.Warning != "" {
				fmt.Fprintf(e.out, "warning: %s\n", done.Warning)
			}
			return nil
		}),
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "Wait this long for the cutover to finish (0: return once requested).")
	return cmd
}

// cutOver is the cluster's cutover record, nil before one.
func cutOver(c *dolphinv1.MySQLCluster) *dolphinv1.CutoverRecord {
	if t := c.Status.Topology; t != nil && t.ExternalSource != nil {
		return t.ExternalSource.CutOver
	}
	return nil
}

func newVerifyCopyCmd(e *env) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "verify-copy CLUSTER [--wait DURATION]",
		Short: "Compare a cluster that follows a server with that server, table by table",
		Long: "Request a comparison of a cluster that follows the server it was copied from with that\n" +
			"server (annotation " + dolphinv1.VerifyExternalAnnotation + "): every user table's checksum on\n" +
			"both sides at one GTID position of the server, while it keeps taking writes. Nothing is\n" +
			"written on either side. With --wait, waits for the outcome and prints it; it fails when a\n" +
			"table differs or the comparison could not be made (docs/migrate.md).",
		Args: cobra.ExactArgs(1),
		RunE: e.onCluster(func(ctx context.Context, mc *dolphinv1.MySQLCluster, _ []string) error {
			if err := stillFollowing(mc, "there is nothing to compare it with"); err != nil {
				return err
			}
			request := time.Now().UTC().Format(time.RFC3339Nano)
			if err := e.annotate(ctx, mc, dolphinv1.VerifyExternalAnnotation, request); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "comparison of %s with %s requested (%s)\n", mc.Name, mc.Spec.Bootstrap.External.Host, request)
			if wait == 0 {
				return nil
			}
			var v *dolphinv1.CopyVerification
			if err := e.waitFor(ctx, mc.Name, wait, "the comparison's outcome", func(c *dolphinv1.MySQLCluster) bool {
				if t := c.Status.Topology; t != nil && t.ExternalSource != nil && t.ExternalSource.LastVerification != nil {
					v = t.ExternalSource.LastVerification
				}
				return v != nil && v.Request == request
			}); err != nil {
				return err
			}
			switch {
			case v.Error != "":
				return fmt.Errorf("the comparison could not be made: %s", v.Error)
			case len(v.Mismatched) > 0:
				return fmt.Errorf("%d of %d tables differ at %s: %s", len(v.Mismatched), v.Tables, v.Position, strings.Join(v.Mismatched, ", "))
			}
			fmt.Fprintf(e.out, "all %d tables equal at %s\n", v.Tables, v.Position)
			return nil
		}),
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "Wait this long for the outcome (0: return once requested).")
	return cmd
}

// stillFollowing refuses a request about the server mc follows when mc follows none (why says
// what that leaves to do) or was cut over already.
func stillFollowing(mc *dolphinv1.MySQLCluster, why string) error {
	if b := mc.Spec.Bootstrap; b == nil || b.External == nil || !b.External.Replicate {
		return fmt.Errorf("%s does not follow a server (spec.bootstrap.external with replicate: true): %s", mc.Name, why)
	}
	if co := cutOver(mc); co != nil {
		return fmt.Errorf("%s was cut over already, to %s at %s (%s): it no longer follows the server", mc.Name, co.Instance,
			co.At.UTC().Format(time.RFC3339), orDash(co.Position))
	}
	return nil
}

func newFallBackCmd(e *env) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "fall-back CLUSTER [--wait DURATION]",
		Short: "Move writes back from a cut-over cluster to the server it was copied from",
		Long: "Request the fall back of a cluster cut over with a way back (spec.bootstrap.external.fallback;\n" +
			"annotation " + dolphinv1.FallBackAnnotation + "): once the server follows the cluster less than\n" +
			"5 s behind, Dolphin fences the cluster's primary (read_only, its clients' sessions ended),\n" +
			"waits until the server holds its final position, detaches the server and opens it. The\n" +
			"cluster then stays read-only and takes no clients (phase FellBack): point the application\n" +
			"at the server again. With --wait, waits until it fell back and prints the position and the\n" +
			"write pause (docs/migrate.md).",
		Args: cobra.ExactArgs(1),
		RunE: e.onCluster(func(ctx context.Context, mc *dolphinv1.MySQLCluster, _ []string) error {
			b := mc.Spec.Bootstrap
			switch {
			case b == nil || b.External == nil || b.External.Fallback == nil:
				return fmt.Errorf("%s keeps no way back (spec.bootstrap.external.fallback, set when a cluster is created): there is nothing to fall back to", mc.Name)
			case cutOver(mc) == nil:
				return fmt.Errorf("%s was not cut over: it still follows the server, which takes the writes", mc.Name)
			case fellBack(mc) != nil:
				fb := fellBack(mc)
				return fmt.Errorf("%s fell back already, to %s at %s (%s)", mc.Name, fb.Instance, fb.At.UTC().Format(time.RFC3339), orDash(fb.Position))
			case mc.Spec.Paused:
				return fmt.Errorf("%s is paused (spec.paused): Dolphin carries out no fall back until it is resumed; resume it first (kubectl dolphin resume %s)", mc.Name, mc.Name)
			}
			request := time.Now().UTC().Format(time.RFC3339Nano)
			if err := e.annotate(ctx, mc, dolphinv1.FallBackAnnotation, request); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "fall back of %s requested: writes move back to %s\n", mc.Name, b.External.Host)
			if wait == 0 {
				return nil
			}
			var done *dolphinv1.CutoverRecord
			var failed *dolphinv1.CutoverFailure
			if err := e.waitFor(ctx, mc.Name, wait, "the fall back", func(c *dolphinv1.MySQLCluster) bool {
				done = fellBack(c)
				if t := c.Status.Topology; t != nil && t.ExternalSource != nil && t.ExternalSource.LastFallBackFailure != nil &&
					t.ExternalSource.LastFallBackFailure.Request == request {
					failed = t.ExternalSource.LastFallBackFailure
				}
				return done != nil || failed != nil
			}); err != nil {
				return err
			}
			if done == nil {
				return fmt.Errorf("the fall back failed (undone, the cluster takes writes): %s", failed.Error)
			}
			fmt.Fprintf(e.out, "fell back to %s at %s, write pause %d ms; %s is read-only from now on\n", done.Instance, orDash(done.Position),
				done.WritePauseMilliseconds, mc.Name)
			if done.Warning != "" {
				fmt.Fprintf(e.out, "warning: %s\n", done.Warning)
			}
			return nil
		}),
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "Wait this long for the fall back to finish (0: return once requested).")
	return cmd
}

// fellBack is the cluster's fall back record, nil before one.
func fellBack(c *dolphinv1.MySQLCluster) *dolphinv1.CutoverRecord {
	if t := c.Status.Topology; t != nil && t.ExternalSource != nil {
		return t.ExternalSource.FellBack
	}
	return nil
}

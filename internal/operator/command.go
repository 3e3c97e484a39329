package operator

import (
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

// operatorLong is the help text of the operator command, whichever binary runs it.
const operatorLong = "Run the Kubernetes operator that manages MySQLClusters.\n\n" +
	"Replicas elect a leader through a Lease; only the leader reconciles. On SIGTERM the\n" +
	"operator stops reconciling, waits up to --graceful-shutdown-timeout for running\n" +
	"reconciles and releases the Lease so that another replica takes over at once."

// NewCommand returns the command that parses the operator's flags into Options
// and runs it: `dolphin operator` (use "operator") or the root of `dolphin-operator`.
func NewCommand(use string) *cobra.Command {
	var opts Options
	cmd := &cobra.Command{
		Use:   use,
		Short: "Run the Kubernetes operator that manages MySQLClusters",
		Long:  operatorLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// client-go (leader election, informers) logs through klog: send it to the same
			// structured log. Done here, before anything logs, because klog.SetLogger is not
			// safe to call while other goroutines log.
			opts.Logger = opts.NewLogger()
			klog.SetLogger(opts.Logger)
			if opts.GCPercent > 0 {
				debug.SetGCPercent(opts.GCPercent)
			}
			setMemoryLimit(opts.MemoryLimitRatio, memlimit.FromCgroup, opts.Logger)
			return Run(cmd.Context(), opts)
		},
	}
	opts.AddFlags(cmd.Flags())
	return cmd
}

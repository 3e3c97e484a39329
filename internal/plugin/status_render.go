package plugin

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// statusView is what `kubectl dolphin status` shows of one cluster: the MySQLCluster and its
// MySQLBackups, read at Now.
type statusView struct {
	Cluster *dolphinv1.MySQLCluster
	Backups []dolphinv1.MySQLBackup
	Now     time.Time
}

// render writes the view as text: a headline, what needs a person's attention, the
// instances, the last promotion, backups and the recoverability window, the conditions.
// It is a pure function of the view (tests compare it with golden files).
func (v statusView) render(w io.Writer) error {
	c := v.Cluster
	st := c.Status
	var b strings.Builder
	engine := string(c.Spec.Engine.Flavor)
	if engine == "" {
		engine = "mariadb"
	}
	if c.Spec.Engine.Version != "" {
		engine += " " + c.Spec.Engine.Version
	}
	tls := "TLS off"
	if c.Spec.TLS.Enabled {
		tls = "TLS on"
	}
	fmt.Fprintf(&b, "Cluster %s/%s: %s, %d/%d ready, %s, %s", c.Namespace, c.Name, orDash(string(st.Phase)), st.ReadyInstances, c.Spec.Instances, engine, tls)
	if c.Spec.Paused {
		b.WriteString(", PAUSED (reconciliation off: kubectl dolphin resume " + c.Name + ")")
	}
	b.WriteString("\n")

	topo := st.Topology
	if topo != nil {
		fmt.Fprintf(&b, "Topology: %s, primary %s, %s\n", orDash(topo.State), orDash(topo.Primary), semiSync(topo))
		if topo.Message != "" {
			fmt.Fprintf(&b, "  %s\n", topo.Message)
		}
	} else {
		b.WriteString("Topology: not observed yet\n")
	}
	for _, line := range attention(c) {
		fmt.Fprintf(&b, "! %s\n", line)
	}

	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tROLE\tREADY\tREACHABLE\tREPLICATING\tLAG\tGTID EXECUTED\tVERSION\tNOTE")
	for _, name := range instanceNames(c) {
		in, tp := instance(c, name)
		role, ready := "-", "no"
		if in != nil {
			role = orDash(string(in.Role))
			if in.Ready {
				ready = "yes"
			}
		}
		reachable, replicating, lag, gtid, version, note := "-", "-", "-", "-", "-", ""
		if tp != nil {
			reachable = yesNo(tp.Reachable)
			if role != string(dolphinv1.RolePrimary) {
				replicating = yesNo(tp.Replicating)
			}
			if tp.ReplicationLagSeconds != nil {
				lag = fmt.Sprintf("%ds", *tp.ReplicationLagSeconds)
			}
			gtid, version = orDash(tp.GTIDExecuted), orDash(tp.Version)
			note = tp.Error
			if tp.Unpublished != "" {
				note = strings.TrimSpace(note + " unpublished " + tp.Unpublished)
			}
		}
		if topo != nil && slices.Contains(topo.ErrantInstances, name) {
			note = strings.TrimSpace("errant " + note)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, role, ready, reachable, replicating, lag, gtid, version, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if topo != nil {
		b.WriteString(externalLines(topo.ExternalSource, v.Now))
		if s := topo.SwitchoverInProgress; s != nil {
			fenced := ""
			if s.Fenced {
				fenced = ", writes fenced"
			}
			fmt.Fprintf(&b, "\nSwitchover in progress: %s -> %s%s\n", orDash(s.From), orDash(s.To), fenced)
		}
		if f := topo.FailoverInProgress; f != nil {
			fmt.Fprintf(&b, "\nFailover in progress from %s (fenced %v)\n", f.From, f.Fenced)
		}
		if p := topo.LastPromotion; p != nil {
			kind := "failover"
			if p.Planned {
				kind = "switchover"
			}
			fmt.Fprintf(&b, "\nLast promotion: %s -> %s (%s, %s, %s ago)", p.From, p.To, kind, p.Duration.Duration.Round(time.Millisecond), ago(v.Now, p.Time))
			if p.Reason != "" {
				fmt.Fprintf(&b, ": %s", p.Reason)
			}
			b.WriteString("\n")
		}
	}

	b.WriteString("\n")
	b.WriteString(backupLines(c, v.Backups, v.Now))

	b.WriteString("\nConditions:\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	conds := slices.Clone(st.Conditions)
	slices.SortFunc(conds, func(a, b metav1.Condition) int { return strings.Compare(a.Type, b.Type) })
	for _, cd := range conds {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s ago\t%s\n", cd.Type, cd.Status, cd.Reason, ago(v.Now, cd.LastTransitionTime), cd.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// tabwriter pads the last column too: no line ends in spaces.
	lines := strings.Split(b.String(), "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n"))
	return err
}

// attention lists what a person should look at: what Dolphin waits on them for first.
func attention(c *dolphinv1.MySQLCluster) []string {
	var out []string
	topo := c.Status.Topology
	if topo == nil {
		return nil
	}
	if t := topo.FailoverTail; t != nil {
		out = append(out, fmt.Sprintf("a failover from %s waits for writes only %s held (%s): to give them up, kubectl dolphin accept-loss %s --instance %s",
			t.From, t.HeldBy, t.Received, c.Name, t.From))
	}
	if a := topo.AcknowledgedAlone; a != nil {
		out = append(out, fmt.Sprintf("writes up to %s were acknowledged by %s alone since %s: no replica holds them yet", a.UpTo, a.Primary, a.Since.UTC().Format(time.RFC3339)))
	}
	if topo.SemiSyncFallback {
		out = append(out, "semi-sync fell back to asynchronous replication: a failover now may lose acknowledged writes")
	}
	heldOut := false
	for _, name := range topo.ReplacedPrimaries {
		if slices.Contains(topo.ErrantInstances, name) {
			heldOut = true
			out = append(out, fmt.Sprintf("%s, a replaced primary, holds writes no other instance has and is held out: look at status.keptTransactions, then kubectl dolphin reclone %s --instance %s", name, c.Name, name))
		}
	}
	// Held out for a reason the topology record does not show (a former primary whose history
	// diverged, a source that purged what an instance needs, no copy possible): the Degraded
	// condition says which and why.
	if d := meta.FindStatusCondition(c.Status.Conditions, dolphinv1.ConditionDegraded); d != nil && d.Status == metav1.ConditionTrue &&
		(d.Reason == "RecloneWaits" || (d.Reason == "ErrantFormerPrimary" && !heldOut)) {
		out = append(out, fmt.Sprintf("%s (then kubectl dolphin reclone %s --instance <pod>)", d.Message, c.Name))
	}
	for _, k := range c.Status.KeptTransactions {
		out = append(out, fmt.Sprintf("transactions of %s that no other instance had (%d: %s) were kept at %s before it was re-cloned", k.Instance, k.Transactions, k.GTIDs, k.Location))
	}
	return out
}

// semiSync says how commits are acknowledged.
func semiSync(t *dolphinv1.TopologyStatus) string {
	switch {
	case t.SemiSyncFallback:
		return "semi-sync FALLEN BACK to async"
	case t.NoSemiSyncReplica:
		return "semi-sync: no replica to acknowledge"
	case t.CommitsWaiting:
		return "semi-sync on, commits waiting for an acknowledgement"
	}
	return "semi-sync on"
}

// backupLines summarises the cluster's backups and its point-in-time recovery window.
func backupLines(c *dolphinv1.MySQLCluster, backups []dolphinv1.MySQLBackup, now time.Time) string {
	var b strings.Builder
	bs := c.Status.Backup
	if c.Spec.Backup == nil && len(backups) == 0 {
		return "Backups: none configured (spec.backup)\n"
	}
	succeeded, failed := 0, 0
	for _, bk := range backups {
		switch bk.Status.Phase {
		case dolphinv1.BackupSucceeded:
			succeeded++
		case dolphinv1.BackupFailed:
			failed++
		}
	}
	fmt.Fprintf(&b, "Backups: %d (%d succeeded, %d failed)", len(backups), succeeded, failed)
	if c.Spec.Backup != nil && c.Spec.Backup.Schedule != nil {
		fmt.Fprintf(&b, ", schedule %q", c.Spec.Backup.Schedule.Cron)
		if c.Spec.Backup.Schedule.Suspend {
			b.WriteString(" (suspended)")
		}
	}
	b.WriteString("\n")
	if bs != nil {
		if bs.LastSuccessfulBackup != "" {
			fmt.Fprintf(&b, "  last succeeded: %s, %s ago\n", bs.LastSuccessfulBackup, agoPtr(now, bs.LastSuccessTime))
		}
		if bs.LastFailedBackup != "" {
			fmt.Fprintf(&b, "  last failed: %s\n", bs.LastFailedBackup)
		}
		if bs.LastVerifiedBackup != "" {
			fmt.Fprintf(&b, "  last verified by a restore: %s, %s ago\n", bs.LastVerifiedBackup, agoPtr(now, bs.LastVerifiedTime))
		}
		if a := bs.Archive; a != nil {
			if a.FirstRecoverableTime != nil && a.LastRecoverableTime != nil {
				fmt.Fprintf(&b, "Point-in-time recovery: %s to %s (archive %ds behind, up to GTID %s)\n",
					a.FirstRecoverableTime.UTC().Format(time.RFC3339), a.LastRecoverableTime.UTC().Format(time.RFC3339), a.LagSeconds, orDash(a.LastArchivedGTID))
			} else {
				b.WriteString("Point-in-time recovery: no window yet\n")
			}
			if a.LastError != "" {
				fmt.Fprintf(&b, "  archive error: %s\n", a.LastError)
			}
		}
	}
	return b.String()
}

// instanceNames are the cluster's instances: <name>-0 … <name>-(n-1), and any other the
// status reports.
func instanceNames(c *dolphinv1.MySQLCluster) []string {
	var names []string
	for i := range c.Spec.Instances {
		names = append(names, fmt.Sprintf("%s-%d", c.Name, i))
	}
	add := func(n string) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, in := range c.Status.Instances {
		add(in.Name)
	}
	if c.Status.Topology != nil {
		for _, in := range c.Status.Topology.Instances {
			add(in.Name)
		}
	}
	return names
}

func instance(c *dolphinv1.MySQLCluster, name string) (*dolphinv1.InstanceStatus, *dolphinv1.InstanceTopology) {
	var in *dolphinv1.InstanceStatus
	var tp *dolphinv1.InstanceTopology
	for i := range c.Status.Instances {
		if c.Status.Instances[i].Name == name {
			in = &c.Status.Instances[i]
		}
	}
	if c.Status.Topology != nil {
		for i := range c.Status.Topology.Instances {
			if c.Status.Topology.Instances[i].Name == name {
				tp = &c.Status.Topology.Instances[i]
			}
		}
	}
	return in, tp
}

// ready reports whether the cluster's Ready condition is True.
func ready(c *dolphinv1.MySQLCluster) bool {
	return meta.IsStatusConditionTrue(c.Status.Conditions, dolphinv1.ConditionReady)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// ago is how long before now t was, in the units a person reads it in: 12s, 5m, 4h28m, 3d.
func ago(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t.Time)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func agoPtr(now time.Time, t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return ago(now, *t)
}

// externalLines describe the server the cluster follows or was cut over from ("" when none).
func externalLines(x *dolphinv1.ExternalReplication, now time.Time) string {
	if x == nil {
		return ""
	}
	var b strings.Builder
	switch co := x.CutOver; {
	case co != nil:
		fmt.Fprintf(&b, "\nCut over from %s to %s %s ago at %s, write pause %d ms\n", x.Source, co.Instance, ago(now, co.At), orDash(co.Position), co.WritePauseMilliseconds)
		if co.Warning != "" {
			fmt.Fprintf(&b, "! %s\n", co.Warning)
		}
	case x.Replicating:
		lag := "lag unknown"
		if x.LagSeconds != nil {
			lag = fmt.Sprintf("%d s behind", *x.LagSeconds)
		}
		fmt.Fprintf(&b, "\nFollowing %s: %s replicates, %s, received %s; no writes until the cutover (kubectl dolphin cutover)\n", x.Source, x.Instance, lag, orDash(x.Received))
	default:
		fmt.Fprintf(&b, "\nFollowing %s: not replicating", x.Source)
		if x.Error != "" {
			fmt.Fprintf(&b, ": %s", x.Error)
		}
		b.WriteString("\n")
	}
	if v := x.LastVerification; v != nil {
		switch {
		case v.Error != "":
			fmt.Fprintf(&b, "! Verification %q could not be made: %s\n", v.Request, v.Error)
		case len(v.Mismatched) > 0:
			fmt.Fprintf(&b, "! Verification %q: %d of %d tables differ at %s: %s\n", v.Request, len(v.Mismatched), v.Tables, v.Position, strings.Join(v.Mismatched, ", "))
		default:
			fmt.Fprintf(&b, "Verification %q: all %d tables equal at %s, %s ago\n", v.Request, v.Tables, v.Position, ago(now, v.At))
		}
	}
	if f := x.LastCutoverFailure; f != nil && x.CutOver == nil {
		fmt.Fprintf(&b, "! Cutover %q failed %s ago: %s (kubectl dolphin cutover asks again)\n", f.Request, ago(now, f.At), f.Error)
	}
	fallbackLines(&b, x, now)
	return b.String()
}

// fallbackLines describe the way back after a cutover: the server following the cluster, a
// failed fall back, the fall back.
func fallbackLines(b *strings.Builder, x *dolphinv1.ExternalReplication, now time.Time) {
	switch fb, f := x.FellBack, x.Fallback; {
	case fb != nil:
		fmt.Fprintf(b, "Fell back to %s %s ago at %s, write pause %d ms: this cluster is read-only and takes no clients\n", fb.Instance, ago(now, fb.At), orDash(fb.Position), fb.WritePauseMilliseconds)
		if fb.Warning != "" {
			fmt.Fprintf(b, "! %s\n", fb.Warning)
		}
		return
	case f == nil:
	case f.Replicating:
		lag := "lag unknown"
		if f.LagSeconds != nil {
			lag = fmt.Sprintf("%d s behind", *f.LagSeconds)
		}
		fmt.Fprintf(b, "Way back: %s follows the cluster, %s (kubectl dolphin fall-back)\n", x.Source, lag)
	default:
		fmt.Fprintf(b, "! Way back: %s does not follow the cluster: %s\n", x.Source, orDash(f.Error))
	}
	if lf := x.LastFallBackFailure; lf != nil {
		fmt.Fprintf(b, "! Fall back %q failed %s ago: %s (kubectl dolphin fall-back asks again)\n", lf.Request, ago(now, lf.At), lf.Error)
	}
}

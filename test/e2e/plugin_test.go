package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestPluginOperatesACluster (issue 33): `kubectl dolphin`, found by kubectl on PATH as a
// user installs it, operates a 3-instance TLS cluster an application writes to: status
// shows it, a switchover requested with it moves the primary while `status --watch` shows the
// switchover happen, `connect` opens a mariadb session as the application's account through
// a port-forward (verifying the server's CA), `credentials` prints that account's, and
// `report` writes a bundle with the instances' and the operator's logs; and the operator's
// metrics and each instance's own (from its agent, with the cluster's metrics Secret), scraped
// as Prometheus does, serve every metric the dashboard queries. No acknowledged
// write is lost. DOLPHIN_E2E_TRANSCRIPT=<file> keeps the commands and their output (the
// transcript in docs/operations-plugin.md).
func TestPluginOperatesACluster(t *testing.T) {
	s := upStack(t)
	if s.node != nodeReal {
		t.Skip("connect forwards a port through the kubelet: the real node's")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "kubectl-dolphin"), "./cmd/kubectl-dolphin")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building kubectl-dolphin: %v\n%s", err, out)
	}
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Skipf("kubectl of the control plane: %v", err)
	}
	var transcript strings.Builder
	dolphin := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"dolphin", "--kubeconfig", filepath.Join(s.dir, "kubeconfig"), "-n", s.ns}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		return cmd
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := dolphin(context.Background(), args...).CombinedOutput()
		transcript.WriteString("$ kubectl dolphin " + strings.Join(args, " ") + "\n" + string(out))
		if err != nil {
			t.Fatalf("kubectl dolphin %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	const name = "plug"
	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 3, TLS: dolphinv1.TLSSpec{Enabled: true},
			Storage:     dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"}}}
	if err := s.c.Create(s.ctx, cluster); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cluster)
	s.waitHealthy(key)
	s.primaryWithTable(name)
	w := s.startSteadyAppWriter(name)

	if out := run("status", name); !strings.Contains(out, "Cluster e2e/plug: Running, 3/3 ready") || !strings.Contains(out, "primary plug-0") {
		t.Errorf("status of a healthy cluster:\n%s", out)
	}

	// status --watch through a switchover.
	ctx, stop := context.WithCancel(context.Background())
	watchOut := filepath.Join(t.TempDir(), "watch")
	f, err := os.Create(watchOut)
	if err != nil {
		t.Fatal(err)
	}
	watch := dolphin(ctx, "status", name, "--watch", "--interval", "200ms")
	watch.Stdout, watch.Stderr = f, f
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	out := run("switchover", name, "--to", name+"-1", "--wait", "2m")
	if !strings.Contains(out, "plug: primary plug-1, Ready") {
		t.Errorf("switchover --wait:\n%s", out)
	}
	time.Sleep(2 * time.Second)
	stop()
	_ = watch.Wait()
	f.Close()
	watched, _ := os.ReadFile(watchOut)
	transcript.WriteString("$ kubectl dolphin status " + name + " --watch --interval 200ms   # beside the switchover, until interrupted\n" + string(watched))
	// A switchover takes a fraction of a second: the watch sees it in progress, or at least the
	// Progressing condition it leaves for a moment.
	if !regexp.MustCompile(`Topology: Switchover|Switchover in progress: plug-0 -> plug-1|Progressing\s+True\s+SwitchingOver`).Match(watched) {
		t.Errorf("status --watch did not show the switchover:\n%s", watched)
	}
	if !strings.Contains(string(watched), "Last promotion: plug-0 -> plug-1 (switchover") {
		t.Errorf("status --watch did not show the promotion:\n%s", watched)
	}

	out = run("connect", name, appUser, "--", "-N", "-e", "SELECT @@hostname, COUNT(*) > 0 FROM app.rows; SHOW STATUS LIKE 'Ssl_version'")
	if !strings.Contains(out, "plug-1\t1") || !strings.Contains(out, "TLSv1.3") {
		t.Errorf("connect as %s to the new primary over TLS:\n%s", appUser, out)
	}
	if out := run("credentials", name, appUser); !strings.Contains(out, "password: "+appPassword) || !strings.Contains(out, "host: plug-primary.e2e.svc") {
		t.Errorf("credentials:\n%s", out)
	}

	bundle := filepath.Join(t.TempDir(), "report.tar.gz")
	run("report", name, "-o", bundle)
	files := readTarGz(t, bundle)
	for _, want := range []string{"logs/plug-0/mysqld.log", "logs/plug-1/mysqld.log", "events.txt", "mysqlcluster.yaml"} {
		if len(files[want]) == 0 {
			t.Errorf("the bundle has no %s", want)
		}
	}
	operatorLogs := 0
	for f, body := range files {
		if strings.HasPrefix(f, "operator/") && strings.HasSuffix(f, ".log") && len(body) > 0 {
			operatorLogs++
		}
	}
	if operatorLogs == 0 {
		t.Error("the bundle holds no operator log")
	}
	// The operator's metrics as Prometheus scrapes them: every metric the dashboard queries is
	// served, but for those only an event this test does not cause creates.
	exposition := s.scrapeOperator()
	notYet := []string{
		"mysql_cluster_backup_last_success_timestamp_seconds", "mysql_cluster_backup_last_size_bytes", "mysql_cluster_backup_failures_total", // no backup
		"mysql_cluster_binlog_archive_lag_seconds", "mysql_cluster_binlog_archive_up", // no archive
		"mysql_cluster_failover_duration_seconds_bucket", // no failover
		"mysql_cluster_engine_errors_total",              // no engine error
	}
	// Each instance's own metrics as the dolphin-cluster chart's PodMonitor scrapes them, from
	// the agent with the metrics Secret: the server answers (mysql_up 1), the primary after the
	// switchover is writable and replicates from nobody, the replicas are read-only and
	// replicate; every instance metric the dashboard queries is served.
	instances := s.scrapeInstances(name)
	if len(instances) != 3 {
		t.Fatalf("scraped %d instances, want 3", len(instances))
	}
	for pod, exp := range instances {
		primary := pod == "plug-1"
		for metric, want := range map[string]string{
			"mysql_up": "1", "mysql_global_variables_read_only": map[bool]string{true: "0", false: "1"}[primary],
		} {
			if got := seriesOf(exp, metric); len(got) != 1 || !strings.HasSuffix(got[0], " "+want) {
				t.Errorf("%s: %s %v, want %s", pod, metric, got, want)
			}
		}
		receiving := seriesOf(exp, "mysql_slave_status_slave_io_running")
		if primary && len(receiving) != 0 || !primary && (len(receiving) != 1 || !strings.HasSuffix(receiving[0], " 1")) {
			t.Errorf("%s: mysql_slave_status_slave_io_running %v (primary: %t)", pod, receiving, primary)
		}
	}
	if missing, err := dashboardMetricsMissing(exposition, instances["plug-0"], notYet); err != nil || len(missing) > 0 {
		t.Errorf("the dashboard queries metrics neither the operator nor an instance serves: %v %v", missing, err)
	}
	if got := seriesOf(exposition, "mysql_cluster_instance_replicating", `name="plug"`, `namespace="e2e"`); len(got) != 2 ||
		!strings.HasSuffix(got[0], " 1") || !strings.HasSuffix(got[1], " 1") || slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, `instance="plug-1"`) }) {
		t.Errorf("mysql_cluster_instance_replicating of plug: %v, want plug-0 and plug-2 at 1 (plug-1 is the primary)", got)
	}
	if got := seriesOf(exposition, "mysql_cluster_condition", `name="plug"`, `type="Ready"`); len(got) != 1 || !strings.Contains(got[0], `status="True"`) {
		t.Errorf("mysql_cluster_condition Ready of plug: %v", got)
	}
	if got := seriesOf(exposition, "mysql_cluster_promotions_total", `name="plug"`, `kind="switchover"`); len(got) != 1 || !strings.HasSuffix(got[0], " 1") {
		t.Errorf("mysql_cluster_promotions_total switchover of plug: %v, want 1", got)
	}

	w.finish()
	acked, failed := s.wantEveryAckedWrite(key, name, w)
	t.Logf("kubectl dolphin: status, switchover (watched), connect over TLS, credentials, report (%d files); %d writes acknowledged, %d failed, 0 lost", len(files), len(acked), failed)
	if file := os.Getenv("DOLPHIN_E2E_TRANSCRIPT"); file != "" {
		if err := os.WriteFile(file, []byte(transcript.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func readTarGz(t *testing.T, file string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, f := range testenv.ReadTarGz(t, file) {
		out[name] = string(f.Data)
	}
	return out
}

package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// sysbenchUser and sysbenchPassword are the application account sysbench runs as (declared
// as a MySQLUser by declareSysbenchAccount): read_only stops it, as it stops any application.
const sysbenchUser, sysbenchPassword = "sysbench", "Sysb3nch-Secret-77q"

// declareSysbenchAccount declares the application account sysbench uses on database app
// (declareAppAccount declares the database), with what oltp_read_write and its prepare step
// need, and waits until Dolphin reports it applied.
func (s *stack) declareSysbenchAccount(cluster string) {
	s.t.Helper()
	pw := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cluster + "-sysbench-password"},
		StringData: map[string]string{"password": sysbenchPassword}}
	user := &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cluster + "-sysbench"},
		Spec: dolphinv1.MySQLUserSpec{Cluster: cluster, Name: sysbenchUser,
			PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: pw.Name},
			Grants:               []dolphinv1.Grant{{Privileges: []dolphinv1.Privilege{"SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "INDEX"}, Database: "app"}}}}
	for _, o := range []client.Object{pw, user} {
		if err := s.c.Create(s.ctx, o); err != nil {
			s.t.Fatal(err)
		}
	}
	testenv.Eventually(s.t, 60*time.Second, "MySQLUser sysbench of "+cluster+" applied", func() error {
		if err := s.c.Get(s.ctx, client.ObjectKeyFromObject(user), user); err != nil {
			return err
		}
		if r := meta.FindStatusCondition(user.Status.Conditions, "Ready"); r == nil || r.Status != metav1.ConditionTrue {
			return fmt.Errorf("not applied: %+v", r)
		}
		return nil
	})
}

// sysbenchRun is Debian's sysbench running oltp_read_write through the primary Service
// (through sysbenchScript, which reconnects after a lost connection, as an application that
// survives failovers does) and a report every second.
type sysbenchRun struct {
	t       *testing.T
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	// netns is the client network namespace sysbench runs in on the real node ("" elsewhere).
	netns string

	mu      sync.Mutex
	reports []sysbenchReport
	output  []string // the last lines, for a failure message
}

// sysbenchReport is one of sysbench's per-second lines.
type sysbenchReport struct {
	at  time.Time // wall time of the end of the second it reports
	tps float64
}

var sysbenchLine = regexp.MustCompile(`^\[ *(\d+)s \] thds: \d+ tps: ([0-9.]+)`)

// sysbenchScript is Debian's oltp_read_write with a reconnect that works with libmariadb:
// sysbench 1.0.20's own reconnect reuses a closed MYSQL handle and never succeeds
// (akopytov/sysbench#527; see the script and docs/design/0017).
const sysbenchScript = "../sysbench/oltp_read_write_reconnect.lua"

// sysbenchIgnoredErrors is sysbench's default list (deadlocks, lock wait timeouts): the driver
// must report lost connections to the script instead of attempting its broken reconnect; the
// script restarts the transaction on every other error, as --mysql-ignore-errors=all would.
const sysbenchIgnoredErrors = "--mysql-ignore-errors=1213,1205,1020"

func sysbenchArgs(addr string, threads int) []string {
	script, err := filepath.Abs(sysbenchScript)
	if err != nil {
		panic(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		panic(err)
	}
	return []string{script, "--db-driver=mysql", "--mysql-host=" + host,
		"--mysql-port=" + port, "--mysql-user=" + sysbenchUser, "--mysql-password=" + sysbenchPassword,
		"--mysql-db=app", "--tables=1", "--table-size=2000", "--threads=" + strconv.Itoa(threads)}
}

// startSysbench prepares the sysbench table through the primary Service and starts the run.
func (s *stack) startSysbench(cluster string, threads int) *sysbenchRun {
	s.t.Helper()
	if _, err := exec.LookPath("sysbench"); err != nil {
		s.t.Fatal("sysbench is not installed: hack/install-mariadb.sh installs it (make mariadb)")
	}
	args := sysbenchArgs(s.serviceAddr(cluster+"-primary"), threads)
	// On the real node sysbench runs as a client pod would (clientNetns): it has no read
	// timeout of its own, and a connection kube-proxy keeps to a lost primary ends only by the
	// kernel's TCP settings of the client.
	sysbench := func(args ...string) *exec.Cmd { return exec.Command("sysbench", args...) }
	ns := ""
	if s.node == nodeReal {
		ns = s.clientNetns()
		sysbench = func(args ...string) *exec.Cmd {
			return exec.Command("ip", append([]string{"netns", "exec", ns, "sysbench"}, args...)...)
		}
	}
	testenv.Eventually(s.t, 60*time.Second, "sysbench prepare through the primary Service", func() error {
		_ = sysbench(append(args, "cleanup")...).Run()
		out, err := sysbench(append(args, "prepare")...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, tail(string(out), 5))
		}
		return nil
	})
	r := &sysbenchRun{t: s.t, done: make(chan struct{}), netns: ns}
	r.cmd = sysbench(append(args, "--time=0", "--report-interval=1", sysbenchIgnoredErrors, "run")...)
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	r.cmd.Stderr = r.cmd.Stdout
	if err := r.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	r.started = time.Now() // again at "Threads started!": sysbench's report clock starts there
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			r.mu.Lock()
			if line == "Threads started!" {
				r.started = time.Now()
			}
			r.output = append(r.output, line)
			if len(r.output) > 40 {
				r.output = r.output[1:]
			}
			if m := sysbenchLine.FindStringSubmatch(line); m != nil {
				sec, _ := strconv.Atoi(m[1])
				tps, _ := strconv.ParseFloat(m[2], 64)
				r.reports = append(r.reports, sysbenchReport{at: r.started.Add(time.Duration(sec) * time.Second), tps: tps})
			}
			r.mu.Unlock()
		}
		_ = r.cmd.Wait()
	}()
	s.t.Cleanup(r.stop)
	testenv.Eventually(s.t, 30*time.Second, "sysbench commits", func() error {
		r.mu.Lock()
		started := r.started
		r.mu.Unlock()
		if _, ok := r.firstCommitAfter(started); !ok {
			return fmt.Errorf("no second with tps > 0 yet: %s", r.lastLines(3))
		}
		return nil
	})
	return r
}

// firstCommitAfter returns the end of the first reported second that began at or after t and
// committed transactions.
func (r *sysbenchRun) firstCommitAfter(t time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rep := range r.reports {
		if !rep.at.Add(-time.Second).Before(t) && rep.tps > 0 {
			return rep.at, true
		}
	}
	return time.Time{}, false
}

// recovery waits up to within for sysbench to commit again after a fault at t and returns how
// long that took (the end of the first second with commits, so up to a second more than the
// real gap); ok is false when it did not recover.
func (r *sysbenchRun) recovery(t time.Time, within time.Duration) (time.Duration, bool) {
	for deadline := time.Now().Add(within + 2*time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if at, ok := r.firstCommitAfter(t); ok {
			return at.Sub(t), at.Sub(t) <= within+time.Second
		}
	}
	return 0, false
}

func (r *sysbenchRun) lastLines(n int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.output[max(0, len(r.output)-n):], "\n")
}

// sockets lists sysbench's TCP connections in its client network namespace with their
// timers and retransmissions (`ss -tnoi`), for a failure message: where a stalled sysbench
// waits (an established connection to a lost server, a SYN into a cut-off pod, …).
func (r *sysbenchRun) sockets() string {
	if r.netns == "" {
		return "(sysbench runs in the host network namespace)"
	}
	out, err := exec.Command("ip", "netns", "exec", r.netns, "ss", "-tnoi").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("ss in %s: %v: %s", r.netns, err, out)
	}
	return "sysbench's connections (ss -tnoi):\n" + string(out)
}

func (r *sysbenchRun) stop() {
	if r.cmd.Process != nil {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// runMainEnv makes the test binary act as the dolphin-operator binary (see TestMain), so the
// envtest test below runs the real main with its signal handling, without building anything.
const runMainEnv = "DOLPHIN_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serviceAccountToken creates a ServiceAccount in default and returns a token for it.
func serviceAccountToken(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ServiceAccount %s: %v", name, err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for %s: %v", name, err)
	}
	return tr.Status.Token
}

// TestEnvtestOperatorBinary runs `dolphin-operator` (what a real install runs) as a process
// against a real API server: probes answer, metrics are served over HTTPS only to callers
// allowed to GET /metrics, and SIGTERM makes the process exit 0.
func TestEnvtestOperatorBinary(t *testing.T) {
	tenv := testenv.StartForTest(t)
	cfg := tenv.Config
	kubeconfigPath := testenv.AdminKubeconfig(t, tenv.Environment)

	// A scraper allowed to GET /metrics, and a ServiceAccount without that right.
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-scraper"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "scraper"}},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scraper, nobody := serviceAccountToken(t, cs, "scraper"), serviceAccountToken(t, cs, "nobody")

	metricsAddr, probeAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	var logs strings.Builder
	cmd := exec.Command(os.Args[0], "--kubeconfig="+kubeconfigPath,
		"--leader-election-namespace=default", "--graceful-shutdown-timeout=10s",
		"--metrics-bind-address="+metricsAddr, "--health-probe-bind-address="+probeAddr)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting dolphin-operator: %v", err)
	}
	var waitErr error
	waited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // no-op once it has exited
		<-waited               // output is complete only then
		if t.Failed() {
			t.Logf("dolphin-operator output:\n%s", logs.String())
		}
	})

	httpc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// The metrics endpoint serves a self-signed certificate by default.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test against a self-signed cert
	}}
	get := func(url, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	metricsURL := "https://" + metricsAddr + "/metrics"
	// The probe and metrics servers start concurrently: wait for both to answer.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready, _ := get("http://"+probeAddr+"/readyz", "")
		metrics, _ := get(metricsURL, "")
		if ready == http.StatusOK && metrics != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer within 30s: /readyz status %d, /metrics status %d", ready, metrics)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := get("http://"+probeAddr+"/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz = %d %q, want 200", code, body)
	}

	if code, _ := get(metricsURL, ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token = %d, want 401", code)
	}
	if code, _ := get(metricsURL, nobody); code != http.StatusForbidden {
		t.Errorf("/metrics as a ServiceAccount without RBAC = %d, want 403", code)
	}
	code, body := get(metricsURL, scraper)
	if code != http.StatusOK || !strings.Contains(body, "mysql_operator_reconcile_total") {
		t.Errorf("/metrics as the scraper = %d (mysql_operator_reconcile_total present: %v), want 200 with it",
			code, strings.Contains(body, "mysql_operator_reconcile_total"))
	}
	if code, _ := get("http://"+metricsAddr+"/metrics", ""); code == http.StatusOK {
		t.Error("/metrics answered plain HTTP, want HTTPS only")
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited:
		if waitErr != nil {
			t.Errorf("dolphin-operator exited with %v after SIGTERM, want 0", waitErr)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("dolphin-operator did not exit within 15s of SIGTERM")
	}
}

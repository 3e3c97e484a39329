package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/freeport"
	"github.com/dolphin-operator/dolphin/internal/passwords"
	"github.com/dolphin-operator/dolphin/internal/pki"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// freePort is a port for a server the test starts later, outside the ephemeral range that
// the other tests' client connections take their local ports from (package freeport).
func freePort(t *testing.T) int {
	t.Helper()
	ports, err := freeport.Pick(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// configuration is the ValidatingWebhookConfiguration of config/webhook, pointed at a server
// on this host (the API server runs here too) instead of the Service.
func configuration(name string, port int) *admissionregistrationv1.ValidatingWebhookConfiguration {
	url := func(path string) *string { return ptr.To("https://127.0.0.1:" + strconv.Itoa(port) + path) }
	rule := func(group, resource string) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: []string{resource}},
		}}
	}
	none := ptr.To(admissionregistrationv1.SideEffectClassNone)
	notDeleting := []admissionregistrationv1.MatchCondition{{Name: "not-being-deleted", Expression: "!has(object.metadata.deletionTimestamp)"}}
	fail, ignore := ptr.To(admissionregistrationv1.Fail), ptr.To(admissionregistrationv1.Ignore)
	return &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "mysqlusers.mysql.dolphin.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: url(MySQLUserPath)},
				Rules: rule("mysql.dolphin.dev", "mysqlusers"), FailurePolicy: fail, SideEffects: none, AdmissionReviewVersions: []string{"v1"}, MatchConditions: notDeleting},
			{Name: "mysqlclusters.mysql.dolphin.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: url(MySQLClusterPath)},
				Rules: rule("mysql.dolphin.dev", "mysqlclusters"), FailurePolicy: fail, SideEffects: none, AdmissionReviewVersions: []string{"v1"}, MatchConditions: notDeleting},
			{Name: "mysqlbackupstores.mysql.dolphin.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: url(MySQLBackupStorePath)},
				Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"mysql.dolphin.dev"}, APIVersions: []string{"*"}, Resources: []string{"mysqlbackupstores"}}}},
				FailurePolicy: ignore, SideEffects: none, AdmissionReviewVersions: []string{"v1"}},
			{Name: "credential-secrets.mysql.dolphin.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: url(SecretPath)},
				Rules: rule("", "secrets"), FailurePolicy: ignore, SideEffects: none, AdmissionReviewVersions: []string{"v1"},
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{resources.CredentialsLabel: "true"}}},
		}}
}

// servedCert is the certificate the webhook server presents, verified against the bundle.
func servedCert(port int, bundle []byte) (*x509.Certificate, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// TestEnvtestPasswordWebhook runs the webhook server and its certificate manager against a
// real API server: it answers only once its certificate is ready (before, TLS fails and the
// readiness check says why); weak passwords in a MySQLUser's or a MySQLCluster's Secret, and
// a weak password written into such a Secret later, are rejected by the API server with the
// rule; the certificate is renewed, and later the CA, without the webhook missing a request.
func TestEnvtestPasswordWebhook(t *testing.T) {
	env := testenv.StartForTest(t)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = dolphinv1.AddToScheme(scheme)
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port, probePort := freePort(t), freePort(t)
	if err := c.Create(ctx, configuration("dolphin-validating", port)); err != nil {
		t.Fatal(err)
	}
	// Short lives, to see both renewals: the certificate every 4 s; a next CA trusted at
	// ~18 s, signing at ~24 s.
	const caLife, certLife = 30 * time.Second, 6 * time.Second
	certs := &CertManager{Namespace: "dolphin-system", SecretName: "dolphin-webhook-cert", IPs: []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames: []string{"dolphin-webhook.dolphin-system.svc"}, Configurations: []string{"dolphin-validating"},
		Interval: 300 * time.Millisecond, CAValidity: caLife, CertValidity: certLife, Log: testr.New(t)}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "127.0.0.1:" + strconv.Itoa(probePort),
		WebhookServer:          NewServer(crwebhook.Options{Host: "127.0.0.1", Port: port}, certs)})
	if err != nil {
		t.Fatal(err)
	}
	certs.Client, certs.Reader = mgr.GetClient(), mgr.GetAPIReader()
	if err := Register(mgr, certs, ""); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()

	// The Secret's namespace does not exist yet, so no certificate can be issued: the server
	// listens but completes no handshake, readiness fails saying why, and the API server
	// refuses MySQLUsers (failurePolicy Fail) rather than admitting one unchecked.
	readyz := func() (int, string, error) {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(probePort) + "/readyz?verbose")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String(), nil
	}
	testenv.Eventually(t, 30*time.Second, "the webhook server listening, not ready", func() error {
		code, body, err := readyz()
		if err != nil {
			return err
		}
		if code == http.StatusOK || !strings.Contains(body, "webhook") {
			return fmt.Errorf("readyz %d: %s", code, body)
		}
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err != nil {
			return fmt.Errorf("not listening: %w", err)
		}
		conn.Close()
		return nil
	})
	if _, err := servedCert(port, nil); err == nil || !strings.Contains(err.Error(), "handshake") && !strings.Contains(err.Error(), "remote error") {
		t.Fatalf("a TLS handshake before the certificate is ready: %v, want a failed handshake", err)
	}
	apps := "apps"
	for _, ns := range []string{apps} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	user := func(name, secret string) *dolphinv1.MySQLUser {
		return &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: apps, Name: name},
			Spec: dolphinv1.MySQLUserSpec{Cluster: "shop", PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: secret}}}
	}
	secret := func(name string, data map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: apps, Name: name,
			Labels: map[string]string{resources.CredentialsLabel: "true"}}, StringData: data}
	}
	if err := c.Create(ctx, secret("weak", map[string]string{"password": "Password123!"})); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, user("early", "weak")); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("a MySQLUser while the webhook has no certificate: %v, want refused (failed calling webhook)", err)
	}

	// The namespace appears: the certificate is issued, injected, served; readiness passes.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dolphin-system"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the webhook ready", func() error {
		code, body, err := readyz()
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("readyz %d %v: %s", code, err, body)
		}
		return nil
	})
	bundle := func() []byte {
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: "dolphin-system", Name: "dolphin-webhook-cert"}, &s); err != nil {
			t.Fatal(err)
		}
		return s.Data[CABundleKey]
	}
	first, err := servedCert(port, bundle())
	if err != nil {
		t.Fatalf("the served certificate does not verify against the CA in the Secret: %v", err)
	}

	// Weak passwords are rejected with the rule; strong ones and missing Secrets pass.
	expectRejected := func(what string, err error, parts ...string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s accepted", what)
			return
		}
		for _, p := range append(parts, passwords.Requirement) {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("%s rejected with\n  %v\nwant it to contain %q", what, err, p)
			}
		}
	}
	expectRejected("a MySQLUser with a weak password", c.Create(ctx, user("weakling", "weak")),
		`spec.passwordSecretKeyRef: key "password" of Secret "weak"`, "common password")
	if err := c.Create(ctx, secret("strong", map[string]string{"password": "q8#Lm2vX!pR4-long"})); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, user("sturdy", "strong")); err != nil {
		t.Errorf("a MySQLUser with a strong password: %v", err)
	}
	if err := c.Create(ctx, user("later", "not-there-yet")); err != nil {
		t.Errorf("a MySQLUser whose Secret does not exist yet: %v (want accepted, with a warning)", err)
	}
	// A weak password written into a Secret in use later is rejected too; a change of labels
	// only (Dolphin labelling a Secret) is not checked again.
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: apps, Name: "strong"}, &s); err != nil {
		t.Fatal(err)
	}
	s.Data["password"] = []byte("short")
	expectRejected("a weak password written into the Secret of MySQLUser sturdy", c.Update(ctx, &s),
		`MySQLUser sturdy spec.passwordSecretKeyRef: key "password" of Secret "strong"`, "it has 5 characters")
	var w corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: apps, Name: "weak"}, &w); err != nil {
		t.Fatal(err)
	}
	w.Labels["team"] = "shop"
	if err := c.Update(ctx, &w); err != nil {
		t.Errorf("a label added to a Secret: %v", err)
	}
	// A cluster's own credentials Secret.
	creds := secret("shop-creds", map[string]string{resources.OperatorPasswordKey: "dolphin2024!", resources.ReplicationPasswordKey: "R3pl-Secret-Long-1",
		resources.MonitorPasswordKey: "M0n-Secret-Long-1", resources.RootPasswordKey: "R00t-Secret-Long-1"})
	if err := c.Create(ctx, creds); err != nil {
		t.Fatal(err)
	}
	expectRejected("a MySQLCluster whose credentials Secret has a weak operator password", c.Create(ctx, &dolphinv1.MySQLCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: apps, Name: "shop"},
		Spec:       dolphinv1.MySQLClusterSpec{Credentials: dolphinv1.CredentialsSpec{SecretName: "shop-creds"}}}),
		`spec.credentials.secretName: key "operator-password" of Secret "shop-creds"`)

	// A user-supplied server certificate that would not serve the cluster is rejected with
	// what is wrong: malformed, for other names, expired.
	userCA, userCAKey, err := pki.NewCA("users-ca", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certSecret := func(name string, leaf *pki.Leaf, issued time.Time) {
		t.Helper()
		data := map[string][]byte{"tls.crt": []byte("not a certificate"), "tls.key": []byte("no key"), "ca.crt": userCA}
		if leaf != nil {
			cert, key, err := pki.Issue(userCA, userCAKey, *leaf, issued)
			if err != nil {
				t.Fatal(err)
			}
			data["tls.crt"], data["tls.key"] = cert, key
		}
		if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: apps, Name: name}, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	certSecret("garbage", nil, time.Now())
	certSecret("other-names", &pki.Leaf{CommonName: "x", DNSNames: []string{"elsewhere.example"}, Validity: time.Hour}, time.Now())
	certSecret("expired", &pki.Leaf{CommonName: "x", DNSNames: []string{"*.db-instances.apps.svc", "db-primary.apps.svc"}, Validity: time.Minute}, time.Now().Add(-30*time.Minute))
	for secretName, want := range map[string]string{
		"garbage":     "is not a PEM certificate",
		"other-names": "does not verify for db-primary.apps.svc",
		"expired":     "expired on",
	} {
		err := c.Create(ctx, &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: apps, Name: "db"},
			Spec: dolphinv1.MySQLClusterSpec{TLS: dolphinv1.TLSSpec{Enabled: true, CertificateSecret: secretName}}})
		if err == nil {
			t.Errorf("a MySQLCluster with the certificate of Secret %q accepted", secretName)
			_ = c.Delete(ctx, &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: apps, Name: "db"}})
			continue
		}
		if !strings.Contains(err.Error(), `spec.tls.certificateSecret: the certificate in Secret "`+secretName+`" `+want) ||
			!strings.Contains(err.Error(), "use one for *.db-instances.apps.svc") {
			t.Errorf("certificate of %q rejected with\n  %v\nwant %q and the names to use", secretName, err, want)
		}
	}

	// Schedules CEL lets through (five fields, @every) but that do not parse, or an unknown
	// time zone: rejected with the field and what to write.
	store := &dolphinv1.BackupStore{S3: &dolphinv1.S3Store{Endpoint: "https://s3.example", Bucket: "backups", CredentialsSecret: "s3"}}
	for i, tc := range []struct {
		backup dolphinv1.BackupSpec
		want   string
	}{
		{dolphinv1.BackupSpec{Store: store, Schedule: &dolphinv1.BackupSchedule{Cron: "61 2 * * *"}}, `spec.backup.schedule.cron "61 2 * * *" does not parse`},
		{dolphinv1.BackupSpec{Store: store, Schedule: &dolphinv1.BackupSchedule{Cron: "@daily", TimeZone: "Mars/Olympus"}}, `spec.backup.schedule.timeZone "Mars/Olympus" is not a known IANA time zone`},
		{dolphinv1.BackupSpec{Store: store, Verification: &dolphinv1.BackupVerification{Schedule: dolphinv1.BackupSchedule{Cron: "0 25 * * *"}}}, `spec.backup.verification.schedule.cron "0 25 * * *" does not parse`},
	} {
		backup := tc.backup
		err := c.Create(ctx, &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: apps, Name: fmt.Sprintf("sched-%d", i)},
			Spec: dolphinv1.MySQLClusterSpec{Backup: &backup}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("schedule case %d: %v, want a rejection with %q", i, err, tc.want)
		}
	}
	good := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: apps, Name: "sched-ok"},
		Spec: dolphinv1.MySQLClusterSpec{Backup: &dolphinv1.BackupSpec{Store: store, Schedule: &dolphinv1.BackupSchedule{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"}}}}
	if err := c.Create(ctx, good); err != nil {
		t.Fatalf("a valid schedule: %v", err)
	}
	good.Spec.Backup.Schedule.Cron = "30 2 * * 8"
	if err := c.Update(ctx, good); err == nil || !strings.Contains(err.Error(), `spec.backup.schedule.cron "30 2 * * 8" does not parse`) {
		t.Errorf("an update to an unparseable schedule: %v", err)
	}

	backupStores(ctx, t, env.Config, scheme, apps)

	// Renewal: past two thirds of the certificate's life a new one is issued under the same
	// CA and served, and the webhook keeps answering.
	var renewed *x509.Certificate
	testenv.Eventually(t, 30*time.Second, "a renewed certificate served", func() error {
		c, err := servedCert(port, bundle())
		if err != nil {
			return err
		}
		if c.SerialNumber.Cmp(first.SerialNumber) == 0 {
			return fmt.Errorf("still the first certificate")
		}
		renewed = c
		return nil
	})
	if string(renewed.RawIssuer) != string(first.RawIssuer) {
		t.Error("the certificate was renewed under another CA although the CA is good for years")
	}
	expectRejected("a weak password after the renewal", c.Create(ctx, user("weakling2", "weak")), "common password")

	// CA renewal: the next CA is in the bundle (and the configuration) before it signs the
	// certificate served; then it signs, and the old one stays in the bundle while valid.
	var sawNextFirst bool
	testenv.Eventually(t, 40*time.Second, "the next CA trusted before it signs", func() error {
		b := bundle()
		if strings.Count(string(b), "BEGIN CERTIFICATE") != 2 {
			return fmt.Errorf("one CA in the bundle")
		}
		c, err := servedCert(port, b)
		if err != nil {
			return err
		}
		if string(c.AuthorityKeyId) != string(first.AuthorityKeyId) {
			return nil // already rolled over; sawNextFirst stays false
		}
		sawNextFirst = true
		return nil
	})
	if !sawNextFirst {
		t.Error("the served certificate changed CA in the same round its CA entered the bundle")
	}
	testenv.Eventually(t, 40*time.Second, "a new CA, the old one still trusted", func() error {
		b := bundle()
		if n := strings.Count(string(b), "BEGIN CERTIFICATE"); n != 2 {
			return fmt.Errorf("%d CAs in the bundle", n)
		}
		c, err := servedCert(port, b)
		if err != nil {
			return err
		}
		if string(c.AuthorityKeyId) == string(first.AuthorityKeyId) {
			return fmt.Errorf("the served certificate is still signed by the first CA")
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, "the configuration carries the new bundle", func() error {
		var cfg admissionregistrationv1.ValidatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: "dolphin-validating"}, &cfg); err != nil {
			return err
		}
		for _, wh := range cfg.Webhooks {
			if string(wh.ClientConfig.CABundle) != string(bundle()) {
				return fmt.Errorf("webhook %s has another bundle", wh.Name)
			}
		}
		return nil
	})
	expectRejected("a weak password after the CA renewal", c.Create(ctx, user("weakling3", "weak")), "common password")
}

// warningLog collects the warnings the API server returns.
type warningLog struct {
	mu  sync.Mutex
	got []string
}

func (w *warningLog) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, text)
}

func (w *warningLog) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	got := w.got
	w.got = nil
	return got
}

// backupStores checks the webhooks about MySQLBackupStores in namespace ns: a cluster naming
// one that does not exist is admitted with a warning; a store a cluster names cannot be
// deleted (the message names the cluster), and can once no cluster names it.
func backupStores(ctx context.Context, t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, ns string) {
	t.Helper()
	warned := &warningLog{}
	wcfg := rest.CopyConfig(cfg)
	wcfg.WarningHandler = warned
	c, err := client.New(wcfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	cl := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared-user"},
		Spec: dolphinv1.MySQLClusterSpec{Backup: &dolphinv1.BackupSpec{StoreRef: &dolphinv1.BackupStoreReference{Name: "shared"}}}}
	if err := c.Create(ctx, cl); err != nil {
		t.Fatalf("a cluster naming a store that does not exist yet: %v, want it admitted", err)
	}
	if got := warned.take(); !slices.ContainsFunc(got, func(w string) bool {
		return strings.Contains(w, `MySQLBackupStore "shared" named in spec.backup.storeRef does not exist yet`)
	}) {
		t.Errorf("warnings %q, want one about the missing MySQLBackupStore", got)
	}
	store := &dolphinv1.MySQLBackupStore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"},
		Spec: dolphinv1.BackupStore{S3: &dolphinv1.S3Store{Endpoint: "https://s3.example", Bucket: "backups", CredentialsSecret: "s3"}}}
	if err := c.Create(ctx, store); err != nil {
		t.Fatal(err)
	}
	cl.Spec.Backup.Schedule = &dolphinv1.BackupSchedule{Cron: "@daily"}
	if err := c.Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if got := warned.take(); slices.ContainsFunc(got, func(w string) bool { return strings.Contains(w, "does not exist") }) {
		t.Errorf("warnings %q once the store exists", got)
	}
	err = c.Delete(ctx, store)
	if err == nil || !strings.Contains(err.Error(), "MySQLBackupStore shared is still named by MySQLCluster shared-user (spec.backup.storeRef)") {
		t.Fatalf("deleting a store a cluster names: %v, want it refused naming the cluster", err)
	}
	cl.Spec.Backup = nil
	if err := c.Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	// The webhook reads clusters from the manager's cache: it sees the update soon after.
	testenv.Eventually(t, 10*time.Second, "the store deleted once no cluster names it", func() error {
		return c.Delete(ctx, store)
	})
}

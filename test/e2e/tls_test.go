package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/pki"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// tlsClient connects through addr as the application account over TLS, verifying the server
// against caPEM for serverName.
func tlsClient(addr string, caPEM []byte, serverName string) (*sql.DB, error) {
	return tlsClientAs(appUser, addr, caPEM, serverName)
}

// tlsClientAs is tlsClient as another account with the application password.
func tlsClientAs(user, addr string, caPEM []byte, serverName string) (*sql.DB, error) {
	return tlsLogin(user, appPassword, addr, caPEM, serverName)
}

// tlsLogin connects through addr as user over TLS, verifying the server against caPEM for
// serverName.
func tlsLogin(user, password, addr string, caPEM []byte, serverName string) (*sql.DB, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no CA certificate")
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User, cfg.Passwd, cfg.Timeout = "tcp", addr, user, password, 3*time.Second
	cfg.TLS = &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// TestLocalTLS: a cluster with spec.tls.enabled serves TLS through its primary Service with
// the certificate Dolphin issued; a client verifying the server against the cluster's CA
// (Secret <name>-ca) for the Service's name, or localhost, connects encrypted; a client
// trusting another CA is refused. The replica replicates over TLS verifying the CA; the
// certificate is rotated under a writer without a restart; with requireForClients plain
// logins are refused while Dolphin (over TLS) still manages the cluster through a switchover.
func TestLocalTLS(t *testing.T) {
	s := upStack(t)
	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "sec"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 2, TLS: dolphinv1.TLSSpec{Enabled: true},
			Storage:     dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"}}}
	if err := s.c.Create(s.ctx, cluster); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cluster)
	s.waitHealthy(key)
	s.primaryWithTable("sec")
	var ca corev1.Secret
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: "sec-ca"}, &ca); err != nil {
		t.Fatal(err)
	}
	addr := s.serviceAddr("sec-primary")
	for i, name := range []string{"sec-primary." + s.ns + ".svc", "localhost"} {
		var db *sql.DB
		testenv.Eventually(t, 30*time.Second, "a verified TLS connection for "+name, func() error {
			var err error
			db, err = tlsClient(addr, ca.Data["ca.crt"], name)
			return err
		})
		var cipher, version string
		if err := db.QueryRow("SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'Ssl_cipher'").Scan(&cipher); err != nil || cipher == "" {
			t.Errorf("%s: not encrypted: cipher %q, %v", name, cipher, err)
		}
		if err := db.QueryRow("SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'Ssl_version'").Scan(&version); err != nil {
			t.Error(err)
		}
		if _, err := db.Exec("INSERT INTO app.rows VALUES (?)", i+1); err != nil {
			t.Errorf("%s: a write over TLS: %v", name, err)
		}
		t.Logf("TLS through the primary Service verified as %s: %s %s", name, version, cipher)
		db.Close()
	}
	// Replication over TLS: the replica verifies its source against the CA file of its own
	// certificate volume (by CA only: it dials the source's pod IP, which the certificate does
	// not hold). Read over TLS as Dolphin's operator, verifying the pod's DNS name.
	replica := "sec-1"
	if s.currentPrimary(key) == "sec-1" {
		replica = "sec-0"
	}
	testenv.Eventually(t, 60*time.Second, "replication over TLS", func() error {
		ssl, caFile, verify, io, err := s.replicationTLS("sec", replica)
		if err != nil {
			return err
		}
		if ssl != "Yes" || caFile != "/etc/mysql/tls/ca.crt" || io != "Yes" {
			return fmt.Errorf("%s: Master_SSL_Allowed %q, CA file %q, verify name %q, IO %q", replica, ssl, caFile, verify, io)
		}
		return nil
	})
	t.Logf("%s replicates over TLS, verifying the CA /etc/mysql/tls/ca.crt", replica)

	// The local stack registers the admission webhooks of a real install: a MySQLUser whose
	// Secret holds a weak password is refused by the API server, with the rule.
	weak := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "sec-weak"}, StringData: map[string]string{"password": "password123"}}
	if err := s.c.Create(s.ctx, weak); err != nil {
		t.Fatal(err)
	}
	weakUser := &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "sec-weak"},
		Spec: dolphinv1.MySQLUserSpec{Cluster: "sec", Name: "weak", PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: "sec-weak"},
			Grants: []dolphinv1.Grant{{Privileges: []dolphinv1.Privilege{"SELECT"}, Database: "app"}}}}
	if err := s.c.Create(s.ctx, weakUser); err == nil {
		t.Error("a MySQLUser with the password password123 was admitted")
	} else if !strings.Contains(err.Error(), "admission webhook") || !strings.Contains(err.Error(), `key "password" of Secret "sec-weak"`) {
		t.Errorf("a weak password refused, but not by the webhook with the rule: %v", err)
	} else {
		t.Logf("weak password refused by the webhook: %v", err)
	}

	// An account that requires TLS: refused in plain text, accepted encrypted.
	strict := &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "sec-strict"},
		Spec: dolphinv1.MySQLUserSpec{Cluster: "sec", Name: "strict", Require: dolphinv1.RequireSSL,
			PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: "sec-app-password"},
			Grants:               []dolphinv1.Grant{{Privileges: []dolphinv1.Privilege{"SELECT"}, Database: "app"}}}}
	if err := s.c.Create(s.ctx, strict); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the TLS-only account applied", func() error {
		if err := s.c.Get(s.ctx, client.ObjectKeyFromObject(strict), strict); err != nil {
			return err
		}
		if r := meta.FindStatusCondition(strict.Status.Conditions, "Ready"); r == nil || r.Status != metav1.ConditionTrue {
			return fmt.Errorf("not applied: %+v", r)
		}
		return nil
	})
	if err := s.sqlDBAs("strict", appPassword, addr).Ping(); err == nil {
		t.Error("an account with require: SSL logged in without TLS")
	}
	if db, err := tlsClientAs("strict", addr, ca.Data["ca.crt"], "sec-primary."+s.ns+".svc"); err != nil {
		t.Errorf("the require: SSL account over TLS: %v", err)
	} else {
		db.Close()
	}

	// The CA of another cluster is not trusted.
	other, err := newOtherCA()
	if err != nil {
		t.Fatal(err)
	}
	if db, err := tlsClient(addr, other, "sec-primary."+s.ns+".svc"); err == nil {
		db.Close()
		t.Error("a client trusting another CA connected")
	}
	var c dolphinv1.MySQLCluster
	if err := s.c.Get(s.ctx, key, &c); err != nil {
		t.Fatal(err)
	}
	if c.Status.TLS == nil || c.Status.TLS.Secret != "sec-tls" || c.Status.TLS.NotAfter == nil {
		t.Errorf("status.tls %+v", c.Status.TLS)
	}

	// Rotation under a writer, without a restart: the certificate is replaced (deleting its
	// Secret makes Dolphin issue a new one); the node updates the pod's files, the engine sees
	// the server still presenting the old one and has it reload them (FLUSH SSL).
	first := servedSerial(t, addr, ca.Data["ca.crt"], "sec-primary."+s.ns+".svc")
	pid := s.serverPID("sec-0")
	w := s.startAppWriterFrom("sec", 100)
	time.Sleep(time.Second)
	if err := s.c.Delete(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "sec-tls"}}); err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	testenv.Eventually(t, 120*time.Second, "the new certificate served", func() error {
		if serial := servedSerial(t, addr, ca.Data["ca.crt"], "sec-primary."+s.ns+".svc"); serial == first || serial == "" {
			return fmt.Errorf("still %s", first)
		}
		return nil
	})
	t.Logf("certificate rotated: served by the running server %.1fs after the renewal", time.Since(rotated).Seconds())
	time.Sleep(time.Second)
	w.finish()
	acked, failed := w.ackedIDs()
	if pid2 := s.serverPID("sec-0"); pid2 != pid {
		t.Errorf("the server restarted for the rotation: pid %d -> %d", pid, pid2)
	}
	app := s.sqlDBAs(appUser, appPassword, addr)
	if lost := lostOn(t, app, acked); lost > 0 || len(acked) == 0 {
		t.Errorf("writer during the rotation: %d acknowledged, %d lost, %d failed", len(acked), lost, failed)
	}
	t.Logf("writer during the rotation: %d acknowledged, 0 lost, %d failed", len(acked), failed)

	// TLS required for clients: a plain login is refused (access denied), a TLS one accepted;
	// Dolphin, over TLS, still manages the cluster: a switchover, then writes replicate.
	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) { c.Spec.TLS.RequireForClients = true })
	testenv.Eventually(t, 60*time.Second, "plain logins refused", func() error {
		db := s.sqlDBAs(appUser, appPassword, addr)
		if err := db.Ping(); err == nil {
			return fmt.Errorf("a plain login of %s is still accepted", appUser)
		} else if !strings.Contains(err.Error(), "1045") {
			return fmt.Errorf("plain login: %v, want access denied (1045)", err)
		}
		return nil
	})
	before := s.currentPrimary(key)
	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[controller.SwitchoverAnnotation] = "auto"
	})
	testenv.Eventually(t, 90*time.Second, "a switchover with TLS required", func() error {
		if p := s.currentPrimary(key); p == before || p == "" {
			return fmt.Errorf("primary %q", p)
		}
		return nil
	})
	s.waitHealthy(key)
	var tlsApp *sql.DB
	testenv.Eventually(t, 30*time.Second, "a TLS write through the primary Service after the switchover", func() error {
		db, err := tlsClient(addr, ca.Data["ca.crt"], "sec-primary."+s.ns+".svc")
		if err != nil {
			return err
		}
		if _, err := db.Exec("INSERT INTO app.rows VALUES (?)", 1_000_000); err != nil {
			db.Close()
			return err
		}
		tlsApp = db
		return nil
	})
	defer tlsApp.Close()
	testenv.Eventually(t, 60*time.Second, "the old primary replicates over TLS from the new one", func() error {
		ssl, _, _, io, err := s.replicationTLS("sec", before)
		if err != nil {
			return err
		}
		if ssl != "Yes" || io != "Yes" {
			return fmt.Errorf("%s: Master_SSL_Allowed %q, IO %q", before, ssl, io)
		}
		return nil
	})
	if db := s.sqlDBAs(appUser, appPassword, s.podAddr(before)); db.Ping() == nil {
		t.Errorf("%s accepts plain logins after the switchover", before)
	}
	t.Logf("TLS required: plain logins refused on both instances; switchover %s -> %s done over TLS", before, s.currentPrimary(key))
}

// servedSerial is the serial number of the certificate a verified TLS connection through addr
// is served ("" when the connection fails).
func servedSerial(t *testing.T, addr string, caPEM []byte, name string) string {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	var serial string
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User, cfg.Passwd, cfg.Timeout = "tcp", addr, appUser, appPassword, 3*time.Second
	cfg.TLS = &tls.Config{RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error { serial = cs.PeerCertificates[0].SerialNumber.String(); return nil }}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return ""
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	if err := db.Ping(); err != nil {
		return ""
	}
	return serial
}

// newOtherCA is a CA no cluster uses.
func newOtherCA() ([]byte, error) {
	ca, _, err := pki.NewCA("someone else", time.Hour, time.Now())
	return ca, err
}

// replicationTLS reads SHOW SLAVE STATUS of pod of cluster over TLS as Dolphin's operator
// account, verifying the pod's DNS name against the cluster's CA: whether replication uses
// TLS, the CA file it verifies with, whether it checks the name, and the IO thread's state. A
// failed login or query is an error (callers retry), not a test failure.
func (s *stack) replicationTLS(cluster, pod string) (sslAllowed, caFile, verify, io string, err error) {
	s.t.Helper()
	ca := s.secretValue(cluster+"-ca", "ca.crt")
	db, err := tlsLogin("dolphin", s.dbPass, s.podAddr(pod), []byte(ca), pod+"."+cluster+"-instances."+s.ns+".svc")
	if err != nil {
		return "", "", "", "", fmt.Errorf("TLS login to %s for its pod DNS name: %w", pod, err)
	}
	defer db.Close()
	rows, err := db.Query("SHOW SLAVE STATUS")
	if err != nil {
		return "", "", "", "", err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if !rows.Next() {
		return "", "", "", "", fmt.Errorf("%s is not a replica", pod)
	}
	if err := rows.Scan(ptrs...); err != nil {
		return "", "", "", "", err
	}
	get := map[string]string{}
	for i, c := range cols {
		get[c] = vals[i].String
	}
	return get["Master_SSL_Allowed"], get["Master_SSL_CA_File"], get["Master_SSL_Verify_Server_Cert"], get["Slave_IO_Running"], nil
}

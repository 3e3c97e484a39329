package dbsql

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/pki"
)

// tlsFiles writes a CA and a server certificate it signed (for the instances' addresses and
// the DNS name db.test) into dir, and returns the paths: ca, cert, key.
func tlsFiles(t *testing.T, dir, name string, ips []net.IP) (ca, cert, key string, caPEM []byte) {
	t.Helper()
	caPEM, caKey, err := pki.NewCA("test-ca-"+name, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := pki.Issue(caPEM, caKey, pki.Leaf{CommonName: "db.test", DNSNames: []string{"db.test"}, IPs: ips, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, key = filepath.Join(dir, name+"-ca.pem"), filepath.Join(dir, name+"-cert.pem"), filepath.Join(dir, name+"-key.pem")
	for p, b := range map[string][]byte{ca: caPEM, cert: certPEM, key: keyPEM, filepath.Join(dir, name+"-ca.key"): caKey} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key, caPEM
}

// tlsLogin connects as root over TLS verifying the server against caPEM and serverName, and
// returns the serial number of the certificate the server presented.
func tlsLogin(ctx context.Context, s *dbtest.Instance, user, password string, caPEM []byte, serverName string) (string, *sql.DB, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	var serial string
	cfg := &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error { serial = cs.PeerCertificates[0].SerialNumber.String(); return nil }}
	mc := mysql.NewConfig()
	mc.Net, mc.Addr, mc.User, mc.Passwd, mc.Timeout, mc.TLS = "tcp", s.Addr(), user, password, 3*time.Second, cfg
	mc.Logger = nopLogger{}
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return "", nil, err
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return "", nil, err
	}
	return serial, db, nil
}

// TestServerTLSFacts measures, on real MariaDB 10.11 servers, what Dolphin's TLS design rests
// on: a client verifying the CA and the name is served; a CA it does not trust is refused; a
// replica with MASTER_SSL_CA refuses a source whose certificate another CA signed, and with
// MASTER_SSL_VERIFY_SERVER_CERT also checks the name against MASTER_HOST; FLUSH SSL loads a
// new certificate without a restart and without breaking open sessions; REQUIRE SSL and
// require_secure_transport refuse plain connections.
func TestServerTLSFacts(t *testing.T) {
	dbtest.RequireMariaDB(t)
	c := dbtest.Start(t, dbtest.Options{Instances: 3})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	src, rep, rogue := c.Instances[0], c.Instances[1], c.Instances[2]
	ips := []net.IP{net.ParseIP(src.Host), net.ParseIP(rep.Host)}
	ca, cert, key, caPEM := tlsFiles(t, dir, "good", ips)
	otherCA, otherCert, otherKey, _ := tlsFiles(t, dir, "other", []net.IP{net.ParseIP(rogue.Host)})
	for _, s := range []*dbtest.Instance{src, rep} {
		s.Stop(t)
		s.Start(t, "--ssl-ca="+ca, "--ssl-cert="+cert, "--ssl-key="+key)
	}
	rogue.Stop(t)
	rogue.Start(t, "--ssl-ca="+otherCA, "--ssl-cert="+otherCert, "--ssl-key="+otherKey)
	ops := accountsAsRoot(ctx, t, c.Instances)

	// A client that verifies the CA and the name (the name need not be the address dialled).
	serial, db, err := tlsLogin(ctx, src, testAccounts.Operator.User, testAccounts.Operator.Password, caPEM, "db.test")
	if err != nil {
		t.Fatalf("TLS login verifying the CA and db.test: %v", err)
	}
	var cipher string
	if err := db.QueryRowContext(ctx, "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'Ssl_cipher'").Scan(&cipher); err != nil || cipher == "" {
		t.Errorf("session not encrypted: cipher %q, %v", cipher, err)
	}
	if _, _, err := tlsLogin(ctx, rogue, testAccounts.Operator.User, testAccounts.Operator.Password, caPEM, "db.test"); err == nil {
		t.Error("a server with a certificate of another CA was accepted")
	} else {
		t.Logf("another CA's server refused by the client: %v", err)
	}
	if _, _, err := tlsLogin(ctx, src, testAccounts.Operator.User, testAccounts.Operator.Password, caPEM, "elsewhere.test"); err == nil {
		t.Error("a certificate without the name was accepted")
	}

	// Replication over TLS: the CA verified (and the name, against MASTER_HOST).
	must(t, ops[0].SetReadOnly(ctx, false))
	// Through ConfigureReplication, as the engine does.
	change := func(in Instance, host string, port int, verifyName bool) error {
		return in.ConfigureReplication(ctx, Source{Host: host, Port: port, User: testAccounts.Replication.User,
			Password: testAccounts.Replication.Password, TLS: &SourceTLS{CAFile: ca, VerifyName: verifyName}})
	}
	ioState := func(in Instance) (*ReplicaStatus, error) {
		stt, err := in.Status(ctx)
		if err != nil {
			return nil, err
		}
		if stt.Replica == nil {
			return nil, errors.New("no replica status")
		}
		return stt.Replica, nil
	}
	waitIO := func(what string, in Instance, ok func(*ReplicaStatus) bool) *ReplicaStatus {
		t.Helper()
		var last *ReplicaStatus
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			rs, err := ioState(in)
			if err == nil && ok(rs) {
				return rs
			}
			last = rs
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("%s: last replica status %+v", what, last)
		return nil
	}
	must(t, change(ops[1], src.Host, src.Port, true))
	rs0 := waitIO("replication over TLS with the name verified", ops[1], func(rs *ReplicaStatus) bool { return rs.IORunning })
	if !rs0.SSL || rs0.SSLCAFile != ca || !rs0.SSLVerifyName {
		t.Errorf("replica status SSL=%v CA=%q verifyName=%v, want true, %q, true", rs0.SSL, rs0.SSLCAFile, rs0.SSLVerifyName, ca)
	}
	if _, err := db.ExecContext(ctx, "CREATE DATABASE tls_probe"); err != nil {
		t.Fatal(err)
	}
	st0, err := ops[0].Status(ctx)
	must(t, err)
	must(t, ops[1].WaitForGTID(ctx, st0.Executed, 20*time.Second))

	// The source's certificate is signed by another CA: the replica refuses it.
	must(t, change(ops[1], rogue.Host, rogue.Port, false))
	rs := waitIO("a source with another CA's certificate refused", ops[1], func(rs *ReplicaStatus) bool { return !rs.IORunning && rs.LastIOErrno != 0 })
	t.Logf("replica pointed at another CA's server: IO errno %d: %s", rs.LastIOErrno, rs.LastIOError)
	must(t, change(ops[1], src.Host, src.Port, true))
	waitIO("back to the verified source", ops[1], func(rs *ReplicaStatus) bool { return rs.IORunning })

	// FLUSH SSL: a new certificate (same CA) is served to new connections, the open session
	// keeps working, the server is not restarted.
	before, err := ops[0].Status(ctx)
	must(t, err)
	firstCert, err := os.ReadFile(cert)
	must(t, err)
	firstEnd, _ := pki.NotAfter(firstCert)
	opCfg := Config{Flavor: FlavorMariaDB, Addr: src.Addr(), User: testAccounts.Operator.User, Password: testAccounts.Operator.Password}
	if served, err := ServedCertificate(ctx, opCfg); err != nil || !served.NotAfter.Equal(firstEnd) {
		t.Errorf("ServedCertificate: %v (%v), want the loaded certificate's end %s", served, err, firstEnd)
	}
	time.Sleep(1100 * time.Millisecond) // a later NotAfter, to the second
	newCert, newKey := reissue(t, dir, caPEM, ips)
	newPEM, err := os.ReadFile(newCert)
	must(t, err)
	newEnd, _ := pki.NotAfter(newPEM)
	must(t, os.Rename(newCert, cert))
	must(t, os.Rename(newKey, key))
	if served, err := ServedCertificate(ctx, opCfg); err != nil || !served.NotAfter.Equal(firstEnd) {
		t.Errorf("before FLUSH SSL, new files: served %v (%v), want still the old certificate", served, err)
	}
	if err := ops[0].ReloadTLS(ctx); err != nil {
		t.Fatalf("ReloadTLS (FLUSH SSL): %v", err)
	}
	if served, err := ServedCertificate(ctx, opCfg); err != nil || !served.NotAfter.Equal(newEnd) {
		t.Errorf("after ReloadTLS: served %v (%v), want the new certificate's end %s", served, err, newEnd)
	}
	serial2, db2, err := tlsLogin(ctx, src, testAccounts.Operator.User, testAccounts.Operator.Password, caPEM, "db.test")
	if err != nil {
		t.Fatalf("TLS login after FLUSH SSL: %v", err)
	}
	db2.Close()
	if serial2 == serial {
		t.Error("FLUSH SSL: new connections still get the old certificate")
	}
	if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Errorf("the session opened before FLUSH SSL broke: %v", err)
	}
	after, err := ops[0].Status(ctx)
	must(t, err)
	if after.Uptime < before.Uptime {
		t.Errorf("the server restarted: uptime %v -> %v", before.Uptime, after.Uptime)
	}
	t.Logf("FLUSH SSL: certificate %s -> %s, same server (uptime %v -> %v)", serial[:8], serial2[:8], before.Uptime, after.Uptime)

	// The name is checked against MASTER_HOST only with MASTER_SSL_VERIFY_SERVER_CERT: a
	// certificate of the right CA without the source's address is refused with it, and
	// accepted without it (the CA is still verified, as the other-CA case shows).
	noIPCert, noIPKey := reissue(t, dir, caPEM, nil)
	must(t, os.Rename(noIPCert, cert))
	must(t, os.Rename(noIPKey, key))
	must(t, ops[0].ReloadTLS(ctx))
	must(t, change(ops[1], src.Host, src.Port, true))
	rs = waitIO("a certificate without the source's address refused when the name is verified", ops[1],
		func(rs *ReplicaStatus) bool { return !rs.IORunning && rs.LastIOErrno != 0 })
	t.Logf("certificate without the address, name verified: IO errno %d: %s", rs.LastIOErrno, rs.LastIOError)
	must(t, change(ops[1], src.Host, src.Port, false))
	waitIO("the same certificate accepted on the CA alone", ops[1], func(rs *ReplicaStatus) bool { return rs.IORunning })

	// Back to a plain connection: every TLS setting is cleared, not kept from before.
	must(t, ops[1].ConfigureReplication(ctx, Source{Host: src.Host, Port: src.Port, User: testAccounts.Replication.User, Password: testAccounts.Replication.Password}))
	rsPlain := waitIO("plain replication again", ops[1], func(rs *ReplicaStatus) bool { return rs.IORunning })
	if rsPlain.SSL || rsPlain.SSLCAFile != "" || rsPlain.SSLVerifyName {
		t.Errorf("after a plain CHANGE MASTER: SSL=%v CA=%q verifyName=%v, want all cleared", rsPlain.SSL, rsPlain.SSLCAFile, rsPlain.SSLVerifyName)
	}

	// REQUIRE SSL: a plain login is refused, a TLS one accepted.
	if _, err := db.ExecContext(ctx, "CREATE USER 'tlsonly'@'%' IDENTIFIED BY 'Tls-Only-Pass-1' REQUIRE SSL"); err != nil {
		t.Fatal(err)
	}
	if err := tryLogin(ctx, src, Account{User: "tlsonly", Password: "Tls-Only-Pass-1"}); !IsAccessDenied(err) {
		t.Errorf("plain login of a REQUIRE SSL account: %v, want access denied", err)
	}
	if _, db3, err := tlsLogin(ctx, src, "tlsonly", "Tls-Only-Pass-1", caPEM, "db.test"); err != nil {
		t.Errorf("TLS login of a REQUIRE SSL account: %v", err)
	} else {
		db3.Close()
	}
	// require_secure_transport: every plain TCP connection is refused, whoever logs in.
	if err := ops[0].SetRequireSecureTransport(ctx, true); err != nil {
		t.Fatalf("require_secure_transport is not dynamic here: %v", err)
	}
	if stt, err := ops[0].Status(ctx); err != nil || !stt.RequireSecureTransport {
		t.Errorf("Status after SetRequireSecureTransport(true): %+v, %v", stt, err)
	}
	if _, db4, err := tlsLogin(ctx, src, testAccounts.Operator.User, testAccounts.Operator.Password, caPEM, "db.test"); err != nil {
		t.Errorf("TLS login with require_secure_transport=ON: %v", err)
	} else {
		db4.Close()
	}
	err = tryLogin(ctx, src, testAccounts.Operator)
	if err == nil {
		t.Error("a plain connection was accepted with require_secure_transport=ON")
	} else {
		t.Logf("plain connection with require_secure_transport=ON: %v", err)
	}
	if err := ops[0].SetRequireSecureTransport(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := tryLogin(ctx, src, testAccounts.Operator); err != nil {
		t.Errorf("a plain login after SetRequireSecureTransport(false): %v", err)
	}
}

// reissue writes a new server certificate under the CA whose key is next to it in dir.
func reissue(t *testing.T, dir string, caPEM []byte, ips []net.IP) (cert, key string) {
	t.Helper()
	caKey, err := os.ReadFile(filepath.Join(dir, "good-ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := pki.Issue(caPEM, caKey, pki.Leaf{CommonName: "db.test", DNSNames: []string{"db.test"}, IPs: ips, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "new-cert.pem"), filepath.Join(dir, "new-key.pem")
	must(t, os.WriteFile(cert, certPEM, 0o600))
	must(t, os.WriteFile(key, keyPEM, 0o600))
	return cert, key
}

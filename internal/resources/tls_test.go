package resources

import (
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/pki"
)

// TLS on adds the certificate's volume (the Secret, 0440), its read-only mount in the server's
// container and the server's --ssl-* options; off, the template has none of them.
func TestStatefulSetTLS(t *testing.T) {
	off := minimal()
	on := minimal()
	on.Spec.TLS.Enabled = true
	build := func(c *dolphinv1.MySQLCluster) (vols []string, mounts []string, cmd []string) {
		t.Helper()
		sts, err := StatefulSet(c, BuildOptions{AgentImage: "img"})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range sts.Spec.Template.Spec.Volumes {
			vols = append(vols, *v.Name)
			if *v.Name == volumeTLS && (v.Secret == nil || *v.Secret.SecretName != "orders-tls" || *v.Secret.DefaultMode != 0o440) {
				t.Errorf("tls volume %+v", v.Secret)
			}
		}
		for _, ctr := range sts.Spec.Template.Spec.Containers {
			if *ctr.Name != ContainerMySQLD {
				continue
			}
			for _, m := range ctr.VolumeMounts {
				mounts = append(mounts, *m.MountPath)
				if *m.MountPath == TLSDir && (m.ReadOnly == nil || !*m.ReadOnly) {
					t.Error("the certificate is mounted writable")
				}
			}
			cmd = ctr.Command
		}
		return vols, mounts, cmd
	}
	vols, mounts, cmd := build(off)
	if slices.Contains(vols, volumeTLS) || slices.Contains(mounts, TLSDir) || strings.Contains(strings.Join(cmd, " "), "--ssl") {
		t.Errorf("TLS off: volumes %v mounts %v command %v", vols, mounts, cmd)
	}
	vols, mounts, cmd = build(on)
	if !slices.Contains(vols, volumeTLS) || !slices.Contains(mounts, TLSDir) {
		t.Errorf("TLS on: volumes %v mounts %v", vols, mounts)
	}
	for _, a := range []string{"--ssl-ca=/etc/mysql/tls/ca.crt", "--ssl-cert=/etc/mysql/tls/tls.crt", "--ssl-key=/etc/mysql/tls/tls.key"} {
		if !slices.Contains(cmd, a) {
			t.Errorf("TLS on: command %v lacks %s", cmd, a)
		}
	}
	on.Spec.TLS.CertificateSecret = "mine"
	if TLSSecretName(on) != "mine" || TLSCASecretName(on) != "orders-ca" {
		t.Errorf("secret names %s %s", TLSSecretName(on), TLSCASecretName(on))
	}
}

func TestServerCertificateNames(t *testing.T) {
	c := minimal()
	names := ServerCertificateNames(c)
	for _, want := range []string{"*.orders-instances.shop.svc", "*.orders-instances.shop.svc.cluster.local",
		"orders-primary", "orders-primary.shop", "orders-primary.shop.svc", "orders-primary.shop.svc.cluster.local",
		"orders-replicas.shop.svc", "localhost",
		"orders-0.orders-instances.shop.svc", "orders-8.orders-instances.shop.svc.cluster.local"} {
		if !slices.Contains(names, want) {
			t.Errorf("names %v lack %s", names, want)
		}
	}
	s := TLSSecret(c, "orders-tls", nil)
	if s.Labels[CredentialsLabel] != "true" || len(s.OwnerReferences) != 1 || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("TLS Secret %+v", s.ObjectMeta)
	}
}

// PodServesTLS reads what the pod's server was started with: a pod made from the TLS template
// serves TLS, one made from the plain template does not, and other containers do not count.
func TestPodServesTLS(t *testing.T) {
	pod := func(tlsOn bool) *corev1.Pod {
		c := minimal()
		c.Spec.TLS.Enabled = tlsOn
		sts, err := StatefulSet(c, BuildOptions{AgentImage: "img"})
		if err != nil {
			t.Fatal(err)
		}
		p := &corev1.Pod{}
		for _, ctr := range sts.Spec.Template.Spec.Containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: *ctr.Name, Command: ctr.Command, Args: ctr.Args})
		}
		return p
	}
	if !PodServesTLS(pod(true)) {
		t.Error("a pod of the TLS template does not serve TLS")
	}
	if PodServesTLS(pod(false)) {
		t.Error("a pod of the plain template serves TLS")
	}
	other := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sidecar", Args: []string{"--ssl-cert=/x"}}}}}
	if PodServesTLS(other) {
		t.Error("another container's --ssl-cert counted")
	}
	if got := InstanceDNSName(minimal(), 2); got != "orders-2.orders-instances.shop.svc" {
		t.Errorf("InstanceDNSName = %q", got)
	}
}

// The archiver reads over TLS only when told the name to verify: then its command has the CA
// file from its Secret and the name; otherwise neither.
func TestBinlogArchiveDeploymentTLS(t *testing.T) {
	c := minimal()
	c.Spec.Backup = &dolphinv1.BackupSpec{ContinuousArchiving: &dolphinv1.ContinuousArchiving{}}
	command := func(a BinlogArchiveArgs) string {
		d := BinlogArchiveDeployment(c, a, BuildOptions{AgentImage: "img"})
		return strings.Join(d.Spec.Template.Spec.Containers[0].Command, " ")
	}
	plain := command(BinlogArchiveArgs{Sources: []string{"10.0.0.1:3306"}})
	if strings.Contains(plain, "--source-ca") || strings.Contains(plain, "--source-server-name") {
		t.Errorf("plain archiver: %s", plain)
	}
	withTLS := command(BinlogArchiveArgs{Sources: []string{"10.0.0.1:3306"}, SourceServerName: "orders-replicas.shop.svc"})
	for _, want := range []string{"--source-ca " + binlogArchiveSecretDir + "/" + ArchiveServerCAKey, "--source-server-name orders-replicas.shop.svc"} {
		if !strings.Contains(withTLS, want) {
			t.Errorf("archiver over TLS: %s lacks %q", withTLS, want)
		}
	}
}

// spec.tls.extraNames reach the issued certificate — DNS names as names, addresses as IP
// SANs — so a client outside the cluster verifies the server by its external name; a
// certificate issued before a name was added lacks it, which is what renews it.
func TestTLSExtraNames(t *testing.T) {
	now := time.Now()
	caPEM, caKey, err := pki.NewCA("test", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	c := minimal()
	before, _, err := pki.Issue(caPEM, caKey, ServerCertificate(c), now)
	if err != nil {
		t.Fatal(err)
	}
	c.Spec.TLS.ExtraNames = []string{"db.example.com", "203.0.113.7"}
	after, _, err := pki.Issue(caPEM, caKey, ServerCertificate(c), now)
	if err != nil {
		t.Fatal(err)
	}
	old, err := pki.ParseCert(before)
	if err != nil {
		t.Fatal(err)
	}
	if got := MissingExtraName(c, old); got != "db.example.com" {
		t.Fatalf("the certificate from before the names lacks %q, want db.example.com", got)
	}
	cert, err := pki.ParseCert(after)
	if err != nil {
		t.Fatal(err)
	}
	if got := MissingExtraName(c, cert); got != "" {
		t.Fatalf("the renewed certificate lacks %s", got)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	for _, name := range []string{"db.example.com", "203.0.113.7"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: now}); err != nil {
			t.Errorf("a client verifying %s: %v", name, err)
		}
	}
}

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// mocoModule is the MOCO release hack/moco/go.mod requires (its CRDs are read from the module
// cache, where building hack/moco put them).
const mocoModule = "github.com/cybozu-go/moco@v0.36.0"

// mocoSystemNamespace is MOCO's own namespace (POD_NAMESPACE): its leader Lease and the
// certificates it asks cert-manager for.
const mocoSystemNamespace = "moco-system"

// certManagerCRDStub serves cert-manager's Certificate kind without a schema: MOCO watches
// Certificates and its manager does not finish starting without the kind.
const certManagerCRDStub = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: certificates.cert-manager.io
spec:
  group: cert-manager.io
  names: {kind: Certificate, listKind: CertificateList, plural: certificates, singular: certificate}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// startMOCO runs MOCO's controller (bin) on a control plane of its own with MOCO's CRDs and a
// stub of cert-manager's, as ../shared/notes/moco-side-by-side.md measured it by hand. It has
// no --kubeconfig flag (KUBECONFIG) and always elects a leader.
func startMOCO(t *testing.T, bin string) benchOperator {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	mocoCRDs := filepath.Join(strings.TrimSpace(string(out)), mocoModule, "config", "crd", "bases")
	stubDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(stubDir, "certificates.yaml"), []byte(certManagerCRDStub), 0o644); err != nil {
		t.Fatal(err)
	}
	tenv := testenv.StartForTestWithCRDs(t, mocoCRDs, stubDir)
	c := benchClient(t, tenv, clientgoscheme.Scheme, footprintNamespace, mocoSystemNamespace)

	certDir := selfSignedCertDir(t)
	cmd := exec.Command(bin, "--metrics-addr=0", "--health-probe-addr="+testenv.FreeAddr(t), "--webhook-addr="+testenv.FreeAddr(t),
		"--cert-dir="+certDir, "--grpc-cert-dir="+certDir)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+testenv.AdminKubeconfig(t, tenv.Environment), "POD_NAMESPACE="+mocoSystemNamespace)
	return benchOperator{
		name:       "moco",
		pid:        startBenchProcess(t, cmd),
		client:     c,
		newCluster: mocoCluster,
	}
}

// mocoCluster is the smallest v1beta2 MySQLCluster MOCO accepts, with 3 instances.
func mocoCluster(name string) client.Object {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "moco.cybozu.com/v1beta2",
		"kind":       "MySQLCluster",
		"metadata":   map[string]any{"namespace": footprintNamespace, "name": name},
		"spec": map[string]any{
			"replicas": int64(3),
			"podTemplate": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "mysqld", "image": "ghcr.io/cybozu-go/moco/mysql:8.4.7"}},
			}},
			"volumeClaimTemplates": []any{map[string]any{
				"metadata": map[string]any{"name": "mysql-data"},
				"spec": map[string]any{
					"accessModes": []any{"ReadWriteOnce"},
					"resources":   map[string]any{"requests": map[string]any{"storage": "1Gi"}},
				},
			}},
		},
	}}
}

// selfSignedCertDir writes a self-signed certificate for 127.0.0.1/localhost as tls.crt,
// tls.key and ca.crt (itself) into a new folder: MOCO's webhook and gRPC server need them.
func selfSignedCertDir(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		"tls.crt": certPEM,
		"ca.crt":  certPEM,
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

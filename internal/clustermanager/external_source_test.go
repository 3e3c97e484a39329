package clustermanager

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// status.topology.externalSource says how the primary replicates from the source while the
// cluster follows it, and keeps the cutover's record for good once it is cut over (every later
// engine reads it back and never follows the source again).
func TestExternalReplicationStatus(t *testing.T) {
	lag := int64(4)
	following := topology.Report{External: "old-db:3306", Persisted: topology.Persisted{Primary: "db-0"},
		Instances: []topology.InstanceView{{Name: "db-0", Status: &dbsql.Status{ReadOnly: true, Replica: &dbsql.ReplicaStatus{
			SourceHost: "old-db", SourcePort: 3306, IORunning: true, SQLRunning: true, SecondsBehindSource: &lag}}}}}
	x := externalReplication(following)
	if x == nil || x.Instance != "db-0" || !x.Replicating || x.LagSeconds == nil || *x.LagSeconds != 4 || x.CutOver != nil {
		t.Fatalf("following: %+v", x)
	}
	elsewhere := following
	elsewhere.Instances = []topology.InstanceView{{Name: "db-0", Status: &dbsql.Status{ReadOnly: true, Replica: &dbsql.ReplicaStatus{SourceHost: "db-1", SourcePort: 3306}}}}
	if x := externalReplication(elsewhere); x == nil || x.Instance != "" || x.Replicating {
		t.Errorf("a primary replicating from elsewhere reported as following: %+v", x)
	}
	at := time.Unix(1000, 0)
	cut := topology.Report{Persisted: topology.Persisted{Primary: "db-0", Cutover: &topology.CutoverRecord{Source: "old-db:3306", Instance: "db-0",
		At: at, Position: "0-9-100", Pause: 40 * time.Millisecond}}}
	x = externalReplication(cut)
	if x == nil || x.CutOver == nil || x.CutOver.Position != "0-9-100" || x.CutOver.WritePauseMilliseconds != 40 || x.Source != "old-db:3306" {
		t.Fatalf("cut over: %+v", x)
	}
	if p := persistedFromTopology(t, x); p.Cutover == nil || p.Cutover.Position != "0-9-100" || p.Cutover.Pause != 40*time.Millisecond {
		t.Errorf("the record read back: %+v", p.Cutover)
	}
}

// persistedFromTopology is what an engine started on a cluster whose status holds x reads back.
func persistedFromTopology(t *testing.T, x *dolphinv1.ExternalReplication) topology.Persisted {
	t.Helper()
	c := &dolphinv1.MySQLCluster{}
	c.Status.Topology = &dolphinv1.TopologyStatus{Primary: "db-0", ExternalSource: x}
	return persisted(c)
}

// TestExternalSourceWithoutItsSecret: a following cluster whose account Secret was deleted,
// or lost a key, still gets an engine configuration — the source without an account, saying
// why (ExternalSource.Unavailable) — so that failover and fencing go on; the account comes
// back with the Secret, under a configuration that differs (the engine restarts with it).
func TestExternalSourceWithoutItsSecret(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"},
		Spec: dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{
			Host: "old-db", Port: 3306, AccountSecretName: "old-db", Replicate: true}}}}
	m := &Manager{Client: fake.NewClientBuilder().WithScheme(scheme).Build()}
	x, err := m.externalSource(t.Context(), c)
	if err != nil || x == nil || !strings.Contains(x.Unavailable, "Secret old-db") || x.User != "" {
		t.Fatalf("without the Secret: %+v, %v", x, err)
	}
	missing := x.ID
	m.Client = fake.NewClientBuilder().WithScheme(scheme).WithObjects(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "old-db"},
		Data: map[string][]byte{"username": []byte("migrate")}}).Build()
	if x, err = m.externalSource(t.Context(), c); err != nil || !strings.Contains(x.Unavailable, "lacks") {
		t.Fatalf("without the password: %+v, %v", x, err)
	}
	m.Client = fake.NewClientBuilder().WithScheme(scheme).WithObjects(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "old-db"},
		Data: map[string][]byte{"username": []byte("migrate"), "password": []byte("pw")}}).Build()
	if x, err = m.externalSource(t.Context(), c); err != nil || x.Unavailable != "" || x.User != "migrate" || x.ID == missing {
		t.Fatalf("with the Secret: %+v, %v", x, err)
	}
}

// TestFallbackIgnoresARequestSetBeforeTheCutover: a fall-back annotation already present when
// the cluster was cut over (a manifest that carries it) never reaches the engine; a new value
// does.
func TestFallbackIgnoresARequestSetBeforeTheCutover(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", Annotations: map[string]string{dolphinv1.FallBackAnnotation: "yes"}},
		Spec: dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{
			Host: "old-db", AccountSecretName: "old-db", Replicate: true, Fallback: &dolphinv1.ExternalFallback{PrimaryHost: "10.0.0.9"}}}},
		Status: dolphinv1.MySQLClusterStatus{Topology: &dolphinv1.TopologyStatus{ExternalSource: &dolphinv1.ExternalReplication{Source: "old-db:3306",
			CutOver: &dolphinv1.CutoverRecord{Instance: "db-0", IgnoredFallBackRequest: "yes"}}}}}
	m := &Manager{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "old-db"},
		Data: map[string][]byte{"username": []byte("migrate"), "password": []byte("pw")}}).Build()}
	f, err := m.fallback(t.Context(), c)
	if err != nil || f == nil || f.FallBack != "" || f.PrimaryPort != 3306 {
		t.Fatalf("a request set before the cutover: %+v, %v", f, err)
	}
	c.Annotations[dolphinv1.FallBackAnnotation] = "now"
	if f, err = m.fallback(t.Context(), c); err != nil || f.FallBack != "now" {
		t.Fatalf("a new request: %+v, %v", f, err)
	}
}

package e2e

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/faults"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// crashStages are the steps of a cutover (or of a fall back) at which a crash test kills the
// operator, from the environment variable env (comma-separated, of fenced, detached, opened),
// each with its fault point: DOLPHIN_E2E_CUTOVER_CRASHES for TestLocalCutoverSurvivesOperatorCrash,
// DOLPHIN_E2E_FALLBACK_CRASHES for TestLocalFallBackSurvivesOperatorCrash. None by default, and
// the test skips (each step costs a minute and a half or more on top of the default end-to-end
// run): `make test-cutover-crashes` runs all three of both.
func crashStages(t *testing.T, env string) (stages, points []string) {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		t.Skipf("opt-in: make test-cutover-crashes (%s=fenced,detached,opened)", env)
	}
	for _, stage := range strings.Split(v, ",") {
		point := "cutover-" + stage
		if !slices.Contains([]string{faults.CutoverFenced, faults.CutoverDetached, faults.CutoverOpened}, point) {
			t.Fatalf("%s: unknown step %q (fenced, detached, opened)", env, stage)
		}
		stages, points = append(stages, stage), append(points, point)
	}
	return stages, points
}

// TestLocalCutoverSurvivesOperatorCrash: the operator is killed (-9, its pod deleted, as when
// its node dies) in the middle of a cutover, at a step held open by a fault point
// (internal/faults, armed through the operator Deployment's environment): after the server
// was fenced, after the primary was detached, or after it was opened and before anything
// recorded it. An application writes to the server until refused, then to the primary
// Service. The operator that takes over finishes the cutover — made again from the start,
// or found done — and the cluster is Ready with the record; the server stays read-only; every
// write acknowledged on either side is in the cluster, and nothing was written on the server
// but the fence.
func TestLocalCutoverSurvivesOperatorCrash(t *testing.T) {
	stages, points := crashStages(t, "DOLPHIN_E2E_CUTOVER_CRASHES")
	s := upStack(t)
	if s.node != nodeReal {
		t.Skip("the operator runs as a Deployment (killed and replaced) on the real node only")
	}
	src, srcDB := s.startHostServer("SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, BINLOG MONITOR, READ_ONLY ADMIN, CONNECTION ADMIN, PROCESS")
	t.Cleanup(func() { s.setOperatorEnv(faults.Env, "") })

	for i, stage := range stages {
		point := points[i]
		s.setOperatorEnv(faults.Env, point+"=10s")
		if _, err := srcDB.Exec("SET GLOBAL read_only = OFF"); err != nil { // the last round fenced it
			t.Fatal(err)
		}
		name := "crash-" + stage
		cl := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
			Spec: dolphinv1.MySQLClusterSpec{Instances: 2, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
				MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"},
				Bootstrap: &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{
					Host: s.gateway(), Port: int32(src.Port), AccountSecretName: "old-db", Replicate: true}}}}
		// Just rolled out: the webhook's Service may not route to the new pods yet.
		testenv.Eventually(t, 60*time.Second, "the webhook admits "+name, func() error { return s.c.Create(s.ctx, cl) })
		key := client.ObjectKeyFromObject(cl)
		primary := s.waitFollowing(key, name+" Following").Status.Topology.Primary
		var svc corev1.Service
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name + "-primary"}, &svc); err != nil {
			t.Fatal(err)
		}
		w := startMovingWriter(s.sqlDBConnectTimeout("shop", "shop-pw", src.Addr(), time.Second),
			s.sqlDBConnectTimeout("shop", "shop-pw", net.JoinHostPort(svc.Spec.ClusterIP, "3306"), time.Second))
		time.Sleep(time.Second)

		s.patchCluster(key, func(c *dolphinv1.MySQLCluster) {
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations[dolphinv1.CutoverAnnotation] = "move"
		})
		var p corev1.Pod
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: primary}, &p); err != nil {
			t.Fatal(err)
		}
		pdb := s.sqlDBAs("dolphin", s.secretValue(name+"-credentials", "operator-password"), p.Status.PodIP+":3306")
		testenv.Eventually(t, 90*time.Second, "the cutover held "+stage, func() error {
			return cutoverAt(srcDB, pdb, stage)
		})
		t.Logf("%s: the cutover is held %s (%s); killing the operator", name, stage, point)
		s.crashOperator()

		var rec *dolphinv1.CutoverRecord
		testenv.Eventually(t, 180*time.Second, name+" cut over and Ready", func() error {
			var c dolphinv1.MySQLCluster
			if err := s.c.Get(s.ctx, key, &c); err != nil {
				return err
			}
			if tp := c.Status.Topology; tp == nil || tp.ExternalSource == nil || tp.ExternalSource.CutOver == nil {
				return fmt.Errorf("not cut over: phase %s", c.Status.Phase)
			}
			rec = c.Status.Topology.ExternalSource.CutOver
			if !meta.IsStatusConditionTrue(c.Status.Conditions, dolphinv1.ConditionReady) || w.onTarget.Load() < 10 {
				return fmt.Errorf("phase %s, %d writes through the primary Service", c.Status.Phase, w.onTarget.Load())
			}
			return nil
		})
		w.stop()
		t.Logf("%s: cut over to %s at %q after the crash (warning %q); the application's pause %s (%d writes on the server, %d through the primary Service)",
			name, rec.Instance, rec.Position, rec.Warning, w.pause().Round(time.Millisecond), w.onSource.Load(), w.onTarget.Load())
		if rec.Instance != primary {
			t.Errorf("%s: cut over to %s, the following primary was %s", name, rec.Instance, primary)
		}
		wantFoundDone(t, name, stage, rec.Warning)
		var ro int
		if err := srcDB.QueryRow("SELECT @@read_only").Scan(&ro); err != nil || ro != 1 {
			t.Errorf("%s: the server after the cutover: read_only %d (%v), want 1", name, ro, err)
		}
		s.wantAckedInCluster(name, w)
		s.deleteCluster(name)
	}
}

// TestLocalFallBackSurvivesOperatorCrash: the way back, with the operator killed (-9, its pod
// deleted) in the middle of the fall back, at a step held open by the same fault points as
// the cutover's (the fall back is a cutover the other way round): after the cluster's primary
// was fenced, after the server was detached, or after it was opened and before anything
// recorded it. Each round migrates the server into a new cluster (logical copy, verified, cut
// over) with the way back configured, waits until the server follows the cluster, and asks
// for the fall back under an application that writes through the primary Service until
// refused, then to the server. The operator that takes over finishes the fall back: the
// cluster is FellBack, the server writable and detached, every acknowledged write on it.
func TestLocalFallBackSurvivesOperatorCrash(t *testing.T) {
	stages, points := crashStages(t, "DOLPHIN_E2E_FALLBACK_CRASHES")
	s := upStack(t)
	if s.node != nodeReal {
		t.Skip("the operator runs as a Deployment (killed and replaced) on the real node only")
	}
	src, srcDB := s.startHostServer("SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, BINLOG MONITOR, READ_ONLY ADMIN, CONNECTION ADMIN, PROCESS, REPLICATION SLAVE ADMIN, SLAVE MONITOR, RELOAD")
	t.Cleanup(func() { s.setOperatorEnv(faults.Env, "") })

	for i, stage := range stages {
		point := points[i]
		// Armed for the whole round: the cutover is held there too, and goes on after it.
		s.setOperatorEnv(faults.Env, point+"=10s")
		name := "back-" + stage
		wayBack := s.createWayBack(name)
		cl := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
			Spec: dolphinv1.MySQLClusterSpec{Instances: 2, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
				MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"},
				Bootstrap: &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{
					Host: s.gateway(), Port: int32(src.Port), AccountSecretName: "old-db", Replicate: true,
					Fallback: &dolphinv1.ExternalFallback{PrimaryHost: wayBack}}}}}
		testenv.Eventually(t, 60*time.Second, "the webhook admits "+name, func() error { return s.c.Create(s.ctx, cl) })
		key := client.ObjectKeyFromObject(cl)
		primary := s.waitFollowing(key, name+" Following").Status.Topology.Primary
		s.verifyAndCutOver(key, src, srcDB)

		var p corev1.Pod
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: primary}, &p); err != nil {
			t.Fatal(err)
		}
		pdb := s.sqlDBAs("dolphin", s.secretValue(name+"-credentials", "operator-password"), p.Status.PodIP+":3306")
		s.fallBack(key, src, srcDB, func() {
			// The roles the other way round: the cluster's primary is the side fenced, the
			// server the side detached and opened.
			testenv.Eventually(t, 90*time.Second, "the fall back held "+stage, func() error {
				return cutoverAt(pdb, srcDB, stage)
			})
			t.Logf("%s: the fall back is held %s (%s); killing the operator", name, stage, point)
			s.crashOperator()
		})
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			t.Fatal(err)
		}
		// Found done (the operator killed after the opening), the position is still known:
		// the primary's, fenced since.
		rec := c.Status.Topology.ExternalSource.FellBack
		if want := net.JoinHostPort(s.gateway(), strconv.Itoa(src.Port)); rec.Instance != want || rec.Position == "" {
			t.Errorf("%s: fell back to %s at %q, want the server %s at a position", name, rec.Instance, rec.Position, want)
		}
		wantFoundDone(t, name, stage, rec.Warning)
		var ro int
		if err := pdb.QueryRow("SELECT @@read_only").Scan(&ro); err != nil || ro != 1 {
			t.Errorf("%s: the cluster's primary after the fall back: read_only %d (%v), want 1", name, ro, err)
		}
		s.deleteCluster(name)
	}
}

// wantFoundDone checks that a move held at stage was found done by the next operator exactly
// when the operator was killed after the opening (its record's warning says so), and made
// again otherwise.
func wantFoundDone(t *testing.T, name, stage, warning string) {
	t.Helper()
	if found := strings.Contains(warning, "without a record"); found != (stage == "opened") {
		t.Errorf("%s: held %s, the record's warning %q: want it found done only when held opened", name, stage, warning)
	}
}

// cutoverAt reports (nil) whether a cutover is held at stage: the server (srcDB) fenced and
// the following primary (pdb) still replicating; detached and still read-only; or open.
func cutoverAt(srcDB, pdb *sql.DB, stage string) error {
	var srcRO, ro int
	if err := srcDB.QueryRow("SELECT @@read_only").Scan(&srcRO); err != nil {
		return err
	}
	if err := pdb.QueryRow("SELECT @@read_only").Scan(&ro); err != nil {
		return err
	}
	rows, err := pdb.Query("SHOW ALL SLAVES STATUS")
	if err != nil {
		return err
	}
	replicas := 0
	for rows.Next() {
		replicas++
	}
	rows.Close()
	at := map[string]bool{
		"fenced":   srcRO == 1 && replicas == 1 && ro == 1,
		"detached": srcRO == 1 && replicas == 0 && ro == 1,
		"opened":   srcRO == 1 && replicas == 0 && ro == 0,
	}
	if !at[stage] {
		return fmt.Errorf("server read_only %d, primary read_only %d with %d replication connection(s)", srcRO, ro, replicas)
	}
	return nil
}

// setOperatorEnv sets (or, with value "", removes) an environment variable of the operator
// Deployment's container and waits until every operator pod runs with it and one leads.
func (s *stack) setOperatorEnv(name, value string) {
	s.t.Helper()
	var d appsv1.Deployment
	key := client.ObjectKey{Namespace: operatorNS, Name: "dolphin-operator"}
	if err := s.c.Get(s.ctx, key, &d); err != nil {
		s.t.Fatal(err)
	}
	patch := client.MergeFrom(d.DeepCopy())
	changed := false
	for i := range d.Spec.Template.Spec.Containers {
		c := &d.Spec.Template.Spec.Containers[i]
		if c.Name != "operator" {
			continue
		}
		had := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		switch {
		case value == "" && had >= 0:
			c.Env = slices.Delete(c.Env, had, had+1)
			changed = true
		case value != "" && had >= 0 && c.Env[had].Value != value:
			c.Env[had].Value = value
			changed = true
		case value != "" && had < 0:
			c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
			changed = true
		}
	}
	if !changed {
		return
	}
	if err := s.c.Patch(s.ctx, &d, patch); err != nil {
		s.t.Fatal(err)
	}
	testenv.Eventually(s.t, 180*time.Second, "the operator rolled out with "+name+"="+value, func() error {
		if err := s.c.Get(s.ctx, key, &d); err != nil {
			return err
		}
		want := *d.Spec.Replicas
		if st := d.Status; st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.ReadyReplicas != want || st.Replicas != want {
			return fmt.Errorf("status %+v", st)
		}
		leader := s.operatorLeader()
		if leader == "" {
			return fmt.Errorf("no operator leads yet")
		}
		var p corev1.Pod
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: operatorNS, Name: leader}, &p); err != nil {
			return err
		}
		for _, c := range p.Spec.Containers {
			if c.Name == "operator" && slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name && e.Value == value }) == (value != "") {
				return nil
			}
		}
		return fmt.Errorf("the leader %s runs without %s=%s", leader, name, value)
	})
}

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/sysvars"
	"github.com/dolphin-operator/dolphin/internal/sysvars/sysvarstest"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestRealNodeEngineUpgrade upgrades a 3-instance MariaDB cluster from 10.11 to 11.8 on the
// real node, with the images built from Debian's packages (bookworm's 10.11, trixie's 11.8),
// under an application writer through the primary Service: replicas first, each one's system
// tables upgraded by mariadb-upgrade (run by its agent) before the rollout goes on, then a
// switchover, then the former primary. Every server ends on 11.8 with its data directory
// recorded as upgraded, no instance errant, and no acknowledged write lost; going back to
// 10.11 is refused by the API server. Then Dolphin's table of 11.8 settings is checked against
// a real 11.8 server: a new single-instance cluster.
func TestRealNodeEngineUpgrade(t *testing.T) {
	s := upStackOn(t, repoRoot(), nodeReal)
	const name = "eng"
	_, key := s.healthyAppCluster(name)
	cs := kubernetes.NewForConfigOrDie(s.cfg)
	w := s.startSteadyAppWriter(name)
	time.Sleep(2 * time.Second)

	began := time.Now()
	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) { c.Spec.Engine.Version = "11.8" })
	testenv.Eventually(t, 6*time.Minute, "every instance on 11.8 with its tables upgraded", func() error {
		if err := s.imageIs(name, "docker.io/library/mariadb:11.8"); err != nil {
			return err
		}
		if err := s.healthy(key); err != nil {
			return err
		}
		for _, p := range s.clusterPods(name) {
			if got := p.Annotations[controller.EngineUpgradedAnnotation]; !strings.HasPrefix(got, "11.8.") {
				return fmt.Errorf("%s: %s=%q", p.Name, controller.EngineUpgradedAnnotation, got)
			}
		}
		return nil
	})
	t.Logf("10.11 -> 11.8 rolled out in %.1fs", time.Since(began).Seconds())
	w.finish()
	acked, failed := w.ackedIDs()
	primary := s.sqlDBAs(appUser, appPassword, s.serviceAddr(name+"-primary"))
	if lost := lostOn(t, primary, acked); lost != 0 {
		t.Fatalf("%d of %d acknowledged writes lost in the upgrade", lost, len(acked))
	}
	t.Logf("writer: %d acknowledged, %d failed, none lost", len(acked), failed)

	// Every server runs 11.8 and its data directory says it was upgraded to it; each pod's
	// upgrade was announced.
	pass := s.secretValue(name+"-credentials", "operator-password")
	// The operator records the upgrade on the pod, then emits the event, which its recorder
	// writes asynchronously: the last pod's may arrive a moment after its annotation.
	var evs eventsv1.EventList
	testenv.Eventually(t, 30*time.Second, "an EngineUpgraded event for every instance", func() error {
		if err := s.c.List(s.ctx, &evs, client.InNamespace(s.ns)); err != nil {
			return err
		}
		n := 0
		for _, e := range evs.Items {
			if e.Reason == "EngineUpgraded" {
				n++
			}
		}
		if n < 3 {
			return fmt.Errorf("%d EngineUpgraded events", n)
		}
		return nil
	})
	for _, p := range s.clusterPods(name) {
		var version string
		if err := s.sqlDBAs(resources.OperatorUser, pass, p.Status.PodIP+":3306").QueryRow("SELECT VERSION()").Scan(&version); err != nil {
			t.Fatal(err)
		}
		recorded, err := s.execIn(cs, p.Name, resources.ContainerMySQLD, "cat", "/var/lib/mysql/mariadb_upgrade_info")
		if err != nil {
			t.Fatalf("%s: reading the upgrade record: %v", p.Name, err)
		}
		recorded = strings.TrimRight(recorded, "\x00\n")
		if !strings.HasPrefix(version, "11.8.") || !strings.HasPrefix(version, strings.TrimSuffix(recorded, "-MariaDB")) {
			t.Errorf("%s: server %s, data directory upgraded to %q", p.Name, version, recorded)
		}
		if !slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
			return e.Reason == "EngineUpgraded" && strings.HasPrefix(e.Note, p.Name+": system tables upgraded from 10.11.")
		}) {
			var said []string
			for _, e := range evs.Items {
				if e.Related != nil && e.Related.Name == p.Name && strings.HasPrefix(e.Reason, "EngineUpgrade") {
					said = append(said, e.Reason+": "+e.Note)
				}
			}
			t.Errorf("no EngineUpgraded event from 10.11 for %s; its engine-upgrade events: %q", p.Name, said)
		}
		t.Logf("%s: server %s, data directory upgraded to %s", p.Name, version, recorded)
	}
	if c := s.cluster(key); c.Status.Topology == nil || len(c.Status.Topology.ErrantInstances) > 0 {
		t.Errorf("topology after the upgrade: %+v", c.Status.Topology)
	}

	// Back to 10.11 is refused before anything restarts.
	c := s.cluster(key)
	c.Spec.Engine.Version = "10.11"
	if err := s.c.Update(s.ctx, c); err == nil || !strings.Contains(err.Error(), "cannot go back to an older release series") {
		t.Errorf("going back to 10.11: %v; want a refusal", err)
	}

	s.checkSysvarsOn118(cs)
}

// checkSysvarsOn118 checks every entry of Dolphin's MariaDB 11.8 settings table against a real
// 11.8 server: a single-instance cluster of its own (the check changes global settings and puts
// them back), with the thread pool on so that its settings stick.
func (s *stack) checkSysvarsOn118(cs *kubernetes.Clientset) {
	s.t.Helper()
	const name = "sv118"
	c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 1, Engine: dolphinv1.EngineSpec{Flavor: dolphinv1.FlavorMariaDB, Version: "11.8"},
			Storage:     dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M", "thread_handling": "pool-of-threads"}}}
	if err := s.c.Create(s.ctx, c); err != nil {
		s.t.Fatal(err)
	}
	s.waitHealthyN(client.ObjectKeyFromObject(c), 1)
	pod := name + "-0"
	help, err := s.execIn(cs, pod, resources.ContainerMySQLD, "mariadbd", "--no-defaults", "--verbose", "--help")
	if err != nil {
		s.t.Fatalf("mariadbd --verbose --help in %s: %v", pod, err)
	}
	options, err := sysvarstest.ParseHelp(help)
	if err != nil {
		s.t.Fatal(err)
	}
	db := s.sqlDBAs(resources.OperatorUser, s.secretValue(name+"-credentials", "operator-password"), s.podAddr(pod))
	conn, err := db.Conn(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close()
	var version string
	if err := conn.QueryRowContext(s.ctx, "SELECT VERSION()").Scan(&version); err != nil {
		s.t.Fatal(err)
	}
	if !strings.HasPrefix(version, "11.8.") || !sysvars.HasTable(sysvars.FlavorMariaDB, version) {
		s.t.Fatalf("server %s: want 11.8, with a table of its own", version)
	}
	n := sysvarstest.Check(s.ctx, s.t, conn, version, options)
	s.t.Logf("MariaDB %s: %d settings checked: %d dynamic, %d static (SET GLOBAL refused), %d static but settable at run time",
		version, n.Dynamic+n.Static+n.Settable, n.Dynamic, n.Static, n.Settable)
}

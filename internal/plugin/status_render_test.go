package plugin

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

var update = flag.Bool("update", false, "rewrite the golden files of the status view")

var now = time.Date(2026, 12, 6, 7, 30, 0, 0, time.UTC)

func at(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

// healthyCluster is a 3-instance cluster in the middle of a planned switchover, with backups,
// an archive and a promotion behind it.
func healthyCluster() *dolphinv1.MySQLCluster {
	size := resource.MustParse("1Gi")
	return &dolphinv1.MySQLCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 3, Engine: dolphinv1.EngineSpec{Flavor: "mariadb", Version: "10.11"},
			TLS:    dolphinv1.TLSSpec{Enabled: true},
			Backup: &dolphinv1.BackupSpec{StoreRef: &dolphinv1.BackupStoreReference{Name: "s3"}, Schedule: &dolphinv1.BackupSchedule{Cron: "0 3 * * *"}}},
		Status: dolphinv1.MySQLClusterStatus{
			Phase: dolphinv1.PhaseRunning, ReadyInstances: 3, CurrentPrimary: "db-0",
			Instances: []dolphinv1.InstanceStatus{
				{Name: "db-0", Role: dolphinv1.RolePrimary, Ready: true, VolumeCapacity: &size},
				{Name: "db-1", Role: dolphinv1.RoleReplica, Ready: true},
				{Name: "db-2", Role: dolphinv1.RoleReplica, Ready: true},
			},
			Topology: &dolphinv1.TopologyStatus{State: "Healthy", Primary: "db-0",
				SwitchoverInProgress: &dolphinv1.SwitchoverProgress{From: "db-0", To: "db-1", Fenced: true},
				LastPromotion: &dolphinv1.PromotionRecord{From: "db-2", To: "db-0", Planned: false, Reason: "db-2 stopped answering",
					Duration: metav1.Duration{Duration: 1234 * time.Millisecond}, Time: at(3 * time.Hour)},
				Instances: []dolphinv1.InstanceTopology{
					{Name: "db-0", Reachable: true, GTIDExecuted: "0-100-4711", Version: "10.11.19-MariaDB"},
					{Name: "db-1", Reachable: true, ReadOnly: true, Replicating: true, ReplicationLagSeconds: ptr.To[int64](0), GTIDExecuted: "0-100-4711", Version: "10.11.19-MariaDB"},
					{Name: "db-2", Reachable: true, ReadOnly: true, Replicating: true, ReplicationLagSeconds: ptr.To[int64](2), GTIDExecuted: "0-100-4702", Version: "10.11.19-MariaDB"},
				}},
			Backup: &dolphinv1.BackupStatus{LastSuccessfulBackup: "db-20261206-0300", LastSuccessTime: ptr.To(at(4*time.Hour + 28*time.Minute)),
				LastVerifiedBackup: "db-20261205-0300", LastVerifiedTime: ptr.To(at(20 * time.Hour)),
				Archive: &dolphinv1.ArchiveStatus{FirstRecoverableTime: ptr.To(at(72 * time.Hour)), LastRecoverableTime: ptr.To(at(3 * time.Second)),
					LagSeconds: 3, LastArchivedGTID: "0-100-4709"}},
			Conditions: []metav1.Condition{
				{Type: "Ready", Status: "True", Reason: "Ready", Message: "3 of 3 instances ready", LastTransitionTime: at(3 * time.Hour)},
				{Type: "Progressing", Status: "True", Reason: "Switchover", Message: "switching over to db-1", LastTransitionTime: at(2 * time.Second)},
				{Type: "Degraded", Status: "False", Reason: "Healthy", LastTransitionTime: at(3 * time.Hour)},
			},
		},
	}
}

// degradedCluster lost its primary: a failover waits for writes only the lost primary held,
// and a replaced primary is held out.
func degradedCluster() *dolphinv1.MySQLCluster {
	return &dolphinv1.MySQLCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
		Spec:       dolphinv1.MySQLClusterSpec{Instances: 3, Paused: true},
		Status: dolphinv1.MySQLClusterStatus{
			Phase: dolphinv1.PhaseDegraded, ReadyInstances: 2,
			Instances: []dolphinv1.InstanceStatus{{Name: "db-1", Role: dolphinv1.RoleReplica, Ready: true}, {Name: "db-2", Role: dolphinv1.RoleReplica, Ready: true}},
			Topology: &dolphinv1.TopologyStatus{State: "FailingOver", Message: "waiting for 0-100-4712 that only db-0 acknowledged",
				FailoverInProgress: &dolphinv1.FailoverProgress{From: "db-0", Fenced: false},
				FailoverTail:       &dolphinv1.FailoverTail{From: "db-0", Received: "0-100-4712", HeldBy: "db-0"},
				SemiSyncFallback:   true, ErrantInstances: []string{"db-3"}, ReplacedPrimaries: []string{"db-3"},
				Instances: []dolphinv1.InstanceTopology{{Name: "db-0", Error: "dial tcp 10.0.0.5:3306: connect: connection refused"},
					{Name: "db-3", Reachable: true, Unpublished: "0-100-9"}}},
			KeptTransactions: []dolphinv1.KeptTransactions{{Instance: "db-4", GTIDs: "0-100-20", Transactions: 1, Location: "s3://b/kept/db-4"}},
			Conditions:       []metav1.Condition{{Type: "Ready", Status: "False", Reason: "FailingOver", LastTransitionTime: at(20 * time.Second)}},
		},
	}
}

// followingCluster follows the server it was copied from: verified once, a cutover failed.
func followingCluster() *dolphinv1.MySQLCluster {
	return &dolphinv1.MySQLCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "moving"},
		Spec:       dolphinv1.MySQLClusterSpec{Instances: 2},
		Status: dolphinv1.MySQLClusterStatus{
			Phase: dolphinv1.PhaseFollowing, ReadyInstances: 2,
			Instances: []dolphinv1.InstanceStatus{{Name: "moving-0", Ready: true}, {Name: "moving-1", Role: dolphinv1.RoleReplica, Ready: true}},
			Topology: &dolphinv1.TopologyStatus{State: "Healthy", Primary: "moving-0",
				Message: "moving-0 follows old-db:3306 (read-only until the cutover), 1 s behind; every replica replicates from it",
				ExternalSource: &dolphinv1.ExternalReplication{Source: "old-db:3306", Instance: "moving-0", Replicating: true,
					LagSeconds: ptr.To[int64](1), Received: "0-7-90210",
					LastVerification:   &dolphinv1.CopyVerification{Request: "v1", At: at(10 * time.Minute), Position: "0-7-90001", Tables: 42},
					LastCutoverFailure: &dolphinv1.CutoverFailure{Request: "c1", At: at(5 * time.Minute), Error: "fencing the source (read_only needs READ_ONLY ADMIN): Error 1227"}},
				Instances: []dolphinv1.InstanceTopology{
					{Name: "moving-0", Reachable: true, ReadOnly: true, Replicating: true, ReplicationLagSeconds: ptr.To[int64](1), GTIDExecuted: "0-7-90210"},
					{Name: "moving-1", Reachable: true, ReadOnly: true, Replicating: true, ReplicationLagSeconds: ptr.To[int64](0), GTIDExecuted: "0-7-90210"},
				}},
			Conditions: []metav1.Condition{{Type: "Ready", Status: "False", Reason: "FollowingExternalSource", LastTransitionTime: at(time.Hour)}},
		},
	}
}

// The status view of a cluster in a switchover and of one whose failover waits for a person
// are what the golden files say (go test ./internal/plugin -update rewrites them).
func TestStatusView(t *testing.T) {
	backups := []dolphinv1.MySQLBackup{
		{ObjectMeta: metav1.ObjectMeta{Name: "db-20261205-0300"}, Spec: dolphinv1.MySQLBackupSpec{Cluster: "db"}, Status: dolphinv1.MySQLBackupStatus{Phase: dolphinv1.BackupSucceeded}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db-20261206-0300"}, Spec: dolphinv1.MySQLBackupSpec{Cluster: "db"}, Status: dolphinv1.MySQLBackupStatus{Phase: dolphinv1.BackupSucceeded}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db-manual-1"}, Spec: dolphinv1.MySQLBackupSpec{Cluster: "db"}, Status: dolphinv1.MySQLBackupStatus{Phase: dolphinv1.BackupFailed}},
	}
	for name, v := range map[string]statusView{
		"status-switchover.txt": {Cluster: healthyCluster(), Backups: backups, Now: now},
		"status-waiting.txt":    {Cluster: degradedCluster(), Now: now},
		"status-following.txt":  {Cluster: followingCluster(), Now: now},
	} {
		var got bytes.Buffer
		if err := v.render(&got); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(file, got.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%v (go test ./internal/plugin -update writes it)", err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%s differs:\n--- got\n%s--- want\n%s", name, got.String(), want)
		}
	}
}

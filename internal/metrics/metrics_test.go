package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// mysql_cluster_condition holds exactly the current conditions: a changed reason replaces the
// old series, other clusters' series stay, a forgotten cluster has none.
func TestSetConditions(t *testing.T) {
	SetConditions("ns", "a", []metav1.Condition{
		{Type: "Ready", Status: "True", Reason: "AllInstancesReady"},
		{Type: "LastBackupSucceeded", Status: "True", Reason: "Succeeded"},
	})
	SetConditions("ns", "b", []metav1.Condition{{Type: "Ready", Status: "True", Reason: "AllInstancesReady"}})
	SetConditions("ns", "a", []metav1.Condition{
		{Type: "Ready", Status: "True", Reason: "AllInstancesReady"},
		{Type: "LastBackupSucceeded", Status: "False", Reason: "BackupOverdue"},
	})
	want := `
# HELP mysql_cluster_condition 1 for each condition of the MySQLCluster, labelled with its type, status (True, False, Unknown) and reason.
# TYPE mysql_cluster_condition gauge
mysql_cluster_condition{name="a",namespace="ns",reason="AllInstancesReady",status="True",type="Ready"} 1
mysql_cluster_condition{name="a",namespace="ns",reason="BackupOverdue",status="False",type="LastBackupSucceeded"} 1
mysql_cluster_condition{name="b",namespace="ns",reason="AllInstancesReady",status="True",type="Ready"} 1
`
	if err := testutil.CollectAndCompare(Condition, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	ForgetCluster("ns", "a")
	if n := testutil.CollectAndCount(Condition); n != 1 {
		t.Errorf("%d series after forgetting cluster a, want b's 1", n)
	}
	ForgetCluster("ns", "b")
}

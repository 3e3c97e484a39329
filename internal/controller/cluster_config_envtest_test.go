package controller

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// TestEnvtestWrongConfigValueIsNotApplied: a mysqlConfig value mysqld would not start with (a
// word for max_connections), admitted because no webhook runs here, does not reach my.cnf: the
// reconciler reports it in Ready (reason InvalidMySQLConfig, naming the key and the form it
// must take) and writes nothing of the change. A boolean mysqld would read as OFF ("yes") is
// said in a Warning event and does not hold the cluster up; fixed, the values are applied.
func TestEnvtestWrongConfigValueIsNotApplied(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	c := directClient(t, nil)
	key := createCluster(t, c, newNamespace(t), "cfg", dolphinv1.MySQLClusterSpec{Instances: 1,
		MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"max_connections": "200"}})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	configMap := func() string {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: resources.NamesFor(getCluster(t, c, key)).ConfigMap}, &cm); err != nil {
			t.Fatal(err)
		}
		return cm.Data["my.cnf"]
	}
	if !strings.Contains(configMap(), "max_connections=200") {
		t.Fatalf("my.cnf without the first value:\n%s", configMap())
	}

	set := func(cfg map[string]dolphinv1.MySQLConfigValue) {
		cl := getCluster(t, c, key)
		cl.Spec.MySQLConfig = cfg
		if err := c.Update(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	set(map[string]dolphinv1.MySQLConfigValue{"max_connections": "many", "performance_schema": "ON"})
	_, err, reasons := reconcileRecording(t, c, key)
	if err != nil {
		t.Fatalf("a user error must not fail the reconcile: %v", err)
	}
	ready := meta.FindStatusCondition(getCluster(t, c, key).Status.Conditions, dolphinv1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != "InvalidMySQLConfig" ||
		!strings.Contains(ready.Message, `max_connections must be a whole number`) || !strings.Contains(ready.Message, "would not start") {
		t.Errorf("Ready %+v (events %v), want False/InvalidMySQLConfig naming the key", ready, reasons)
	}
	if got := configMap(); strings.Contains(got, "many") || strings.Contains(got, "performance_schema") || !strings.Contains(got, "max_connections=200") {
		t.Errorf("my.cnf took part of a refused change:\n%s", got)
	}

	set(map[string]dolphinv1.MySQLConfigValue{"max_connections": "300", "performance_schema": "yes"})
	_, err, reasons = reconcileRecording(t, c, key)
	if err != nil || slices.Contains(reasons, "InvalidMySQLConfig") || !slices.Contains(reasons, "MySQLConfigMisread") {
		t.Fatalf("a misread boolean: %v, events %v; want applied with a MySQLConfigMisread warning", err, reasons)
	}
	if ready := meta.FindStatusCondition(getCluster(t, c, key).Status.Conditions, dolphinv1.ConditionReady); ready != nil && ready.Reason == "InvalidMySQLConfig" {
		t.Errorf("Ready still %+v", ready)
	}
	if got := configMap(); !strings.Contains(got, "max_connections=300") {
		t.Errorf("my.cnf without the fixed value:\n%s", got)
	}
}

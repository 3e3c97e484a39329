package controller

import (
	"context"
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// TestEnvtestPVCStoreServer: a backup to a pvc store waits, with a message, for the claim and
// then for its store server; the server's Secret, Deployment and Service are created once,
// owned by the backup (and anything else that uses the claim), and once it is ready the agent
// is asked to back up to the server's ClusterIP with its CA and token.
func TestEnvtestPVCStoreServer(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	f := newBackupFixture(t, false)
	cl := getCluster(t, f.c, f.cluster)
	cl.Spec.Backup = &dolphinv1.BackupSpec{Store: &dolphinv1.BackupStore{PVC: &dolphinv1.PVCStore{ClaimName: "backups"}}}
	if err := f.c.Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	f.observeTopology()
	key := f.newBackup("first")
	f.reconcile(key)
	wantBackupCondition(t, f.get(key), dolphinv1.BackupPending, "BackupStoreClaimMissing", "PersistentVolumeClaim "+f.ns+"/backups")

	mustCreate(t, f.c, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "backups", Namespace: f.ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}})
	f.reconcile(key)
	wantBackupCondition(t, f.get(key), dolphinv1.BackupPending, "BackupStoreStarting", "dolphin-store-backups")
	name := types.NamespacedName{Namespace: f.ns, Name: "dolphin-store-backups"}
	var d appsv1.Deployment
	if err := f.c.Get(ctx, name, &d); err != nil {
		t.Fatalf("the store server's Deployment: %v", err)
	}
	pod := d.Spec.Template.Spec
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType ||
		pod.Volumes[0].PersistentVolumeClaim == nil || pod.Volumes[0].PersistentVolumeClaim.ClaimName != "backups" {
		t.Fatalf("Deployment spec %+v: want one pod, Recreate, mounting the claim", d.Spec)
	}
	var sec corev1.Secret
	if err := f.c.Get(ctx, name, &sec); err != nil {
		t.Fatal(err)
	}
	var svc corev1.Service
	if err := f.c.Get(ctx, name, &svc); err != nil {
		t.Fatal(err)
	}
	b := f.get(key)
	for _, o := range []metav1.Object{&d, &sec, &svc} {
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != b.UID || refs[0].Controller != nil && *refs[0].Controller {
			t.Fatalf("%s owners %+v: want the backup, not as controller", o.GetName(), refs)
		}
	}
	token := string(sec.Data[resources.AgentTokenKey])

	// A second reconcile keeps the Secret (no new token) and adds no owner twice.
	f.reconcile(key)
	var again corev1.Secret
	if err := f.c.Get(ctx, name, &again); err != nil {
		t.Fatal(err)
	}
	if string(again.Data[resources.AgentTokenKey]) != token || len(again.OwnerReferences) != 1 {
		t.Fatalf("the Secret changed on a second reconcile: owners %+v", again.OwnerReferences)
	}

	// Ready: the agent gets the server's address and credentials.
	d.Status.Replicas, d.Status.ReadyReplicas = 1, 1
	if err := f.c.Status().Update(ctx, &d); err != nil {
		t.Fatal(err)
	}
	f.reconcile(key)
	if len(f.agent.requests) != 1 {
		t.Fatalf("%d backup requests, want 1 once the store server is ready", len(f.agent.requests))
	}
	var cfg objectstore.Config
	if err := json.Unmarshal(f.agent.requests[0].Store, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP == nil || cfg.HTTP.URL != StoreServerURL(svc.Spec.ClusterIP) || cfg.HTTP.Token != token ||
		cfg.HTTP.ServerName != agent.AgentServerName("dolphin-store-backups", f.ns) || len(cfg.HTTP.CACertPEM) == 0 {
		t.Fatalf("store configuration sent to the agent: %+v", cfg.HTTP)
	}
	if got := f.get(key).Status; got.Store == nil || got.Store.PVC == nil {
		t.Fatalf("status.store %+v: want the pvc store recorded", got.Store)
	}
}

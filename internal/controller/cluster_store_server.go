package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;create;patch

// storeClients are what resolveStore needs to run the store server of a PVC store: a live
// reader, a writer, the builders' options and the object that uses the store (a MySQLCluster
// or MySQLBackup), which becomes an owner of the server so that it lives as long as anything
// uses the claim.
type storeClients struct {
	Reader client.Reader
	Writer client.Client
	Build  resources.BuildOptions
	// Owner uses the store; nil when only reading (a backup being deleted).
	Owner client.Object
}

// ensureStoreServer makes sure the store server of PersistentVolumeClaim claim runs (its
// Secret, Deployment and Service, each owned by every object that uses it) and returns the
// configuration that reaches it. A missing claim, or a server not ready yet, is a userError
// saying so.
func ensureStoreServer(ctx context.Context, sc storeClients, namespace, claim string) (objectstore.Config, error) {
	var pvc corev1.PersistentVolumeClaim
	err := sc.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: claim}, &pvc)
	if apierrors.IsNotFound(err) {
		return objectstore.Config{}, &userError{Reason: "BackupStoreClaimMissing", Message: fmt.Sprintf(
			"PersistentVolumeClaim %s/%s named by backup store pvc.claimName does not exist: create it (ReadWriteOnce is enough)", namespace, claim)}
	}
	if err != nil {
		return objectstore.Config{}, fmt.Errorf("reading PersistentVolumeClaim %s/%s: %w", namespace, claim, err)
	}
	name := resources.StoreServerName(claim)
	secret, err := ensureStoreSecret(ctx, sc, namespace, name, claim)
	if err != nil {
		return objectstore.Config{}, err
	}
	sum := sha256.Sum256(secret.Data[resources.AgentCertKey])
	hash := hex.EncodeToString(sum[:8])
	owner := applyOwner(sc)
	dep := resources.StoreServerDeployment(namespace, claim, hash, sc.Build)
	svc := resources.StoreServerService(namespace, claim)
	if err := sc.Writer.Apply(ctx, dep, client.FieldOwner(storeFieldManager), client.ForceOwnership); err != nil {
		return objectstore.Config{}, fmt.Errorf("applying Deployment %s/%s: %w", namespace, name, err)
	}
	if err := sc.Writer.Apply(ctx, svc, client.FieldOwner(storeFieldManager), client.ForceOwnership); err != nil {
		return objectstore.Config{}, fmt.Errorf("applying Service %s/%s: %w", namespace, name, err)
	}
	var d appsv1.Deployment
	if err := sc.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &d); err != nil {
		return objectstore.Config{}, fmt.Errorf("reading Deployment %s/%s: %w", namespace, name, err)
	}
	var s corev1.Service
	if err := sc.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &s); err != nil {
		return objectstore.Config{}, fmt.Errorf("reading Service %s/%s: %w", namespace, name, err)
	}
	if owner != nil {
		for _, obj := range []client.Object{secret, &d, &s} {
			if err := addOwner(ctx, sc.Writer, obj, *owner); err != nil {
				return objectstore.Config{}, err
			}
		}
	}
	if d.Status.ReadyReplicas < 1 || s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone {
		return objectstore.Config{}, &userError{Reason: "BackupStoreStarting", Message: fmt.Sprintf(
			"waiting for the store server %s of PersistentVolumeClaim %s to be ready (Deployment %s/%s); if it stays unready, check that the claim can be bound and mounted",
			name, claim, namespace, name)}
	}
	return objectstore.Config{HTTP: &objectstore.HTTPConfig{
		URL:        StoreServerURL(s.Spec.ClusterIP),
		CACertPEM:  secret.Data[resources.AgentCAKey],
		ServerName: agent.AgentServerName(name, namespace),
		Token:      string(secret.Data[resources.AgentTokenKey]),
	}}, nil
}

// reconcileBackupStore starts the store server of a PVC backup store ahead of the first
// backup, owned by the cluster. A store that is not usable yet does not fail the cluster (its
// databases are fine): it is reported by an event and looked at again soon, and the backups
// that need it wait with the same message.
func (r *MySQLClusterReconciler) reconcileBackupStore(ctx context.Context, c *dolphinv1.MySQLCluster, out *stepOutcome) error {
	spec, err := clusterStore(ctx, r.Client, c)
	if err == nil && (spec == nil || spec.PVC == nil) {
		return nil
	}
	if err == nil {
		_, err = ensureStoreServer(ctx, storeClients{Reader: r.apiReader(), Writer: r.Client, Build: r.Build, Owner: c},
			c.Namespace, spec.PVC.ClaimName)
	}
	var ue *userError
	switch {
	case errors.As(err, &ue) && ue.Reason == "BackupStoreStarting":
		out.after(5*time.Second, "the backup store server is starting")
		return nil
	case errors.As(err, &ue):
		r.event(c, corev1.EventTypeWarning, ue.Reason, "Reconcile", "%s", ue.Message)
		out.after(30*time.Second, "the backup store waits for the user")
		return nil
	}
	return err
}

// StoreServerURL is the store server's address at a Service ClusterIP.
func StoreServerURL(clusterIP string) string {
	return "https://" + net.JoinHostPort(clusterIP, strconv.Itoa(resources.StoreServerPort))
}

// storeFieldManager applies the store server's objects; owner references are added apart
// (addOwner), so that one use of the claim never removes another's.
const storeFieldManager = "dolphin-store"

// ensureStoreSecret creates the store server's Secret (CA, certificate, key, token) once, and
// replaces it whole when its certificate is about to expire.
func ensureStoreSecret(ctx context.Context, sc storeClients, namespace, name, claim string) (*corev1.Secret, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	var s corev1.Secret
	err := sc.Reader.Get(ctx, key, &s)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading Secret %s: %w", key, err)
	}
	fresh := err == nil && storeSecretUsable(&s, time.Now())
	if fresh {
		return &s, nil
	}
	ca, cert, tlsKey, err := agent.NewAgentPKI(name, namespace, time.Now())
	if err != nil {
		return nil, fmt.Errorf("generating the store server certificate: %w", err)
	}
	token, err := agent.GenerateToken()
	if err != nil {
		return nil, fmt.Errorf("generating the store server token: %w", err)
	}
	data := map[string][]byte{resources.AgentCAKey: ca, resources.AgentCertKey: cert,
		resources.AgentKeyKey: tlsKey, resources.AgentTokenKey: []byte(token)}
	if s.Name == "" {
		s = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: resources.StoreServerLabels(claim)},
			Type:       corev1.SecretTypeOpaque,
			Data:       data,
		}
		if err := sc.Writer.Create(ctx, &s); err != nil {
			return nil, fmt.Errorf("creating Secret %s: %w", key, err)
		}
		return &s, nil
	}
	patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
	s.Data = data
	if err := sc.Writer.Patch(ctx, &s, patch); err != nil {
		return nil, fmt.Errorf("renewing Secret %s: %w", key, err)
	}
	return &s, nil
}

// storeSecretUsable: every key is there and the certificate is not about to expire.
func storeSecretUsable(s *corev1.Secret, now time.Time) bool {
	for _, k := range []string{resources.AgentCAKey, resources.AgentCertKey, resources.AgentKeyKey, resources.AgentTokenKey} {
		if len(s.Data[k]) == 0 {
			return false
		}
	}
	notAfter, err := agent.CertNotAfter(s.Data[resources.AgentCertKey])
	return err == nil && notAfter.Sub(now) > agentCertRenewBefore
}

// applyOwner is the owner reference the store server gets from sc.Owner: not a controller
// reference (several objects share the server) and not blocking the owner's deletion.
func applyOwner(sc storeClients) *metav1.OwnerReference {
	if sc.Owner == nil || sc.Owner.GetDeletionTimestamp() != nil {
		return nil
	}
	gvk, err := apiutil.GVKForObject(sc.Owner, sc.Writer.Scheme())
	if err != nil {
		return nil
	}
	return &metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
		Name: sc.Owner.GetName(), UID: sc.Owner.GetUID()}
}

// addOwner adds ref to obj's owner references when it is not there yet.
func addOwner(ctx context.Context, w client.Client, obj client.Object, ref metav1.OwnerReference) error {
	refs := obj.GetOwnerReferences()
	if slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == ref.UID }) {
		return nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	obj.SetOwnerReferences(append(refs, ref))
	if err := w.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("adding an owner to %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

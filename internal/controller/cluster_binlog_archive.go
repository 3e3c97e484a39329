package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// The binlog archiver's Deployment and Secret are removed when archiving is turned off.
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=delete

// archiveFieldManager applies the binlog archiver's objects.
const archiveFieldManager = "dolphin-binlog-archive"

// archiveDigestAnnotation on the archiver's Deployment is a digest of what was applied, so
// that an unchanged Deployment is not applied again on every reconcile.
const archiveDigestAnnotation = "mysql.dolphin.dev/archive-digest"

// archivePoll is how often the archive step looks again while archiving is on.
const archivePoll = 10 * time.Second

// ArchiveStatusFunc asks a cluster's binlog archiver (its pod) for its status.
type ArchiveStatusFunc func(ctx context.Context, c *dolphinv1.MySQLCluster, pod *corev1.Pod) (binlog.Status, error)

// archiving returns spec.backup.continuousArchiving when it is set and enabled.
func archiving(c *dolphinv1.MySQLCluster) *dolphinv1.ContinuousArchiving {
	if c.Spec.Backup == nil || c.Spec.Backup.ContinuousArchiving == nil || !c.Spec.Backup.ContinuousArchiving.Enabled {
		return nil
	}
	return c.Spec.Backup.ContinuousArchiving
}

// reconcileBinlogArchive runs the cluster's binlog archiver while continuous archiving is on
// and removes it when it is turned off; it records what the archiver reports in
// c.Status.Backup.Archive and the ContinuousArchiving condition (copied into the status
// computed after the steps). Archiving starts once a backup succeeded, at the newest one's
// position. Nothing here fails the cluster: its databases are fine whatever the archive does.
func (r *MySQLClusterReconciler) reconcileBinlogArchive(ctx context.Context, c *dolphinv1.MySQLCluster, out *stepOutcome) error {
	ca := archiving(c)
	if ca == nil {
		r.archives.forget(client.ObjectKeyFromObject(c))
		metrics.ForgetArchive(c.Namespace, c.Name)
		return r.removeBinlogArchive(ctx, c)
	}
	// Before any early return: a cluster whose archive is failing keeps being looked at.
	out.after(archivePoll, "the binlog archive is checked every poll")
	key := client.ObjectKeyFromObject(c)
	report := func(st *dolphinv1.ArchiveStatus, cond metav1.Condition) error {
		r.archives.record(key, st, &cond)
		up := 0.0
		if cond.Status == metav1.ConditionTrue {
			up = 1
		}
		metrics.ArchiveUp.WithLabelValues(c.Namespace, c.Name).Set(up)
		return nil
	}
	backups, err := r.clusterBackups(ctx, c)
	if err != nil {
		return err
	}
	newest, oldest := succeededBackups(backups)
	if newest == nil {
		return report(nil, metav1.Condition{Type: dolphinv1.ConditionContinuousArchiving, Status: metav1.ConditionFalse,
			Reason: "WaitingForBaseBackup", Message: "archiving starts at the position of the first successful backup: create a MySQLBackup, or set spec.backup.schedule"})
	}
	spec, err := clusterStore(ctx, r.Client, c)
	var cfg objectstore.Config
	if err == nil {
		cfg, err = resolveStore(ctx, storeClients{Reader: r.apiReader(), Writer: r.Client, Build: r.Build, Owner: c}, c.Namespace, spec)
	}
	var ue *userError
	if errors.As(err, &ue) {
		return report(nil, metav1.Condition{Type: dolphinv1.ConditionContinuousArchiving, Status: metav1.ConditionFalse,
			Reason: "StoreUnavailable", Message: "the backup store cannot be used: " + ue.Message})
	}
	if err != nil {
		return err
	}
	sources, err := r.archiveSources(ctx, c)
	if errors.As(err, &ue) {
		return report(nil, metav1.Condition{Type: dolphinv1.ConditionContinuousArchiving, Status: metav1.ConditionFalse,
			Reason: "ServicesNotReady", Message: ue.Message})
	}
	if err != nil {
		return err
	}
	secret, err := r.ensureArchiveSecret(ctx, c, cfg)
	if err != nil {
		return err
	}
	args := resources.BinlogArchiveArgs{Sources: sources, Start: newest.Status.GTIDPosition, SecretHash: secretDigest(secret),
		ReplicaOnly: c.Spec.Instances > 1}
	if len(secret.Data[resources.ArchiveServerCAKey]) > 0 {
		// The Service's name, which the certificate holds; the archiver dials its ClusterIP.
		args.SourceServerName = archiveSourceService(c) + "." + c.Namespace + ".svc"
	}
	if err := r.applyArchiveDeployment(ctx, c, args); err != nil {
		return err
	}

	v := archiveView{
		Now: time.Now(), StallAfter: defaultArchiveStallAfter, OldestBase: backupEnded(oldest),
		Location:    storeURL(spec, resources.BinlogArchivePrefix(c)),
		PrimaryGTID: primaryGTID(c), BehindSince: r.archives.behindSince(key),
	}
	if c.Status.Backup != nil {
		v.Previous = c.Status.Backup.Archive
	}
	if ca.StallAfter != nil {
		v.StallAfter = ca.StallAfter.Duration
	}
	pod, problem, err := r.archivePod(ctx, c)
	if err != nil {
		return err
	}
	v.PodReady, v.PodProblem = pod != nil, problem
	if pod != nil {
		fetch := r.ArchiveStatus
		if fetch == nil {
			fetch = r.archives.fetch(r.Client)
		}
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := fetch(fctx, c, pod)
		cancel()
		if err != nil {
			v.FetchErr = err
		} else {
			v.Status = &st
		}
	}
	st, cond, behind := judgeArchive(v)
	r.archives.setBehindSince(key, behind)
	metrics.ArchiveLag.WithLabelValues(c.Namespace, c.Name).Set(float64(st.LagSeconds))
	if st.LastUploadTime != nil {
		metrics.ArchiveLastUpload.WithLabelValues(c.Namespace, c.Name).Set(float64(st.LastUploadTime.Unix()))
	}
	prev := meta.FindStatusCondition(c.Status.Conditions, dolphinv1.ConditionContinuousArchiving)
	if cond.Status == metav1.ConditionFalse && (prev == nil || prev.Status != cond.Status || prev.Reason != cond.Reason) {
		r.event(c, corev1.EventTypeWarning, "ArchiveNotKeepingUp", "BinlogArchive", "%s", cond.Message)
	}
	return report(st, cond)
}

// succeededBackups returns the newest and the oldest successful backup (nil when none).
func succeededBackups(backups []dolphinv1.MySQLBackup) (newest, oldest *dolphinv1.MySQLBackup) {
	for i := range backups {
		b := &backups[i]
		if b.Status.Phase != dolphinv1.BackupSucceeded || b.Status.GTIDPosition == "" {
			continue
		}
		if newest == nil || endedLater(b, newest) {
			newest = b
		}
		if oldest == nil || endedLater(oldest, b) {
			oldest = b
		}
	}
	return newest, oldest
}

// primaryGTID is the executed GTID position of the primary as status.topology last saw it.
func primaryGTID(c *dolphinv1.MySQLCluster) string {
	t := c.Status.Topology
	if t == nil || t.Primary == "" {
		return ""
	}
	i := slices.IndexFunc(t.Instances, func(it dolphinv1.InstanceTopology) bool { return it.Name == t.Primary })
	if i < 0 {
		return ""
	}
	return t.Instances[i].GTIDExecuted
}

// archiveSourceService names the Service the archiver reads through (see archiveSources).
func archiveSourceService(c *dolphinv1.MySQLCluster) string {
	if c.Spec.Instances == 1 {
		return resources.NamesFor(c).PrimaryService
	}
	return resources.NamesFor(c).ReplicaService
}

// archiveSources is where the archiver reads, at the Service's ClusterIP (pods need not
// resolve Service names), port 3306: the replicas Service, which holds only what semi-sync
// acknowledged — never the primary while the cluster has replicas, as a primary's binary log
// may end in a transaction no replica has, which a failover discards (docs/design/0026). A
// cluster of one instance has no failover, and is read through the primary Service.
func (r *MySQLClusterReconciler) archiveSources(ctx context.Context, c *dolphinv1.MySQLCluster) ([]string, error) {
	name := archiveSourceService(c)
	var svc corev1.Service
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &svc); err != nil {
		return nil, fmt.Errorf("reading Service %s: %w", name, err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil, &userError{Reason: "ServicesNotReady", Message: fmt.Sprintf(
			"Service %s has no ClusterIP: the archiver reads the binary log through the cluster's Services", name)}
	}
	return []string{net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(resources.MySQLPort))}, nil
}

// ensureArchiveSecret writes the archiver's Secret: the agents' certificate and token (the
// operator reaches the archiver as it reaches them), the store configuration and the
// replication password. It is rewritten when any of them changed.
func (r *MySQLClusterReconciler) ensureArchiveSecret(ctx context.Context, c *dolphinv1.MySQLCluster, cfg objectstore.Config) (*corev1.Secret, error) {
	var agentSecret corev1.Secret
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: resources.AgentSecretName(c)}, &agentSecret); err != nil {
		return nil, fmt.Errorf("reading the agent Secret: %w", err)
	}
	var creds corev1.Secret
	credKey := types.NamespacedName{Namespace: c.Namespace, Name: resources.CredentialsSecretName(c)}
	if err := r.apiReader().Get(ctx, credKey, &creds); err != nil {
		return nil, fmt.Errorf("reading the credentials Secret %s: %w", credKey, err)
	}
	storeJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{
		resources.ArchiveStoreConfigKey: storeJSON,
		resources.ArchivePasswordKey:    creds.Data[resources.ReplicationPasswordKey],
	}
	for _, k := range []string{resources.AgentCAKey, resources.AgentCertKey, resources.AgentKeyKey, resources.AgentTokenKey} {
		data[k] = agentSecret.Data[k]
	}
	servesTLS, err := r.anyPodServesTLS(ctx, c)
	if err != nil {
		return nil, err
	}
	if c.Spec.TLS.Enabled || servesTLS {
		// Read over TLS while TLS is on, and while any instance still serves it after it was
		// turned off (never in plain text from a server that serves TLS; the archiver retries
		// against instances restarted without it until the rollout ends). While the Secret is
		// not there yet the archiver reads in plain text; it restarts with the CA when the
		// Secret appears.
		var tlsSecret corev1.Secret
		err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: resources.TLSSecretName(c)}, &tlsSecret)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading the TLS Secret: %w", err)
		}
		if ca := tlsSecret.Data[resources.TLSCAKey]; len(ca) > 0 {
			data[resources.ArchiveServerCAKey] = ca
		}
	}
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.BinlogArchiveName(c)}
	var s corev1.Secret
	switch err := r.apiReader().Get(ctx, key, &s); {
	case apierrors.IsNotFound(err):
		s = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: resources.BinlogArchiveLabels(c),
				OwnerReferences: []metav1.OwnerReference{resources.OwnerReference(c)}},
			Type: corev1.SecretTypeOpaque, Data: data,
		}
		if err := r.Client.Create(ctx, &s); err != nil {
			return nil, fmt.Errorf("creating Secret %s: %w", key, err)
		}
		return &s, nil
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if secretDataEqual(s.Data, data) {
		return &s, nil
	}
	patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
	s.Data = data
	if err := r.Client.Patch(ctx, &s, patch); err != nil {
		return nil, fmt.Errorf("updating Secret %s: %w", key, err)
	}
	return &s, nil
}

func secretDataEqual(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if string(b[k]) != string(v) {
			return false
		}
	}
	return true
}

// secretDigest is a digest of a Secret's data, in key order.
func secretDigest(s *corev1.Secret) string {
	keys := make([]string, 0, len(s.Data))
	for k := range s.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%d:", k, len(s.Data[k]))
		h.Write(s.Data[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// applyArchiveDeployment applies the archiver's Deployment when what it would apply changed.
func (r *MySQLClusterReconciler) applyArchiveDeployment(ctx context.Context, c *dolphinv1.MySQLCluster, a resources.BinlogArchiveArgs) error {
	dep := resources.BinlogArchiveDeployment(c, a, r.Build)
	b, err := json.Marshal(dep)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	digest := hex.EncodeToString(sum[:8])
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.BinlogArchiveName(c)}
	var live appsv1.Deployment
	switch err := r.apiReader().Get(ctx, key, &live); {
	case err == nil && live.Annotations[archiveDigestAnnotation] == digest:
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading Deployment %s: %w", key, err)
	}
	dep.WithAnnotations(map[string]string{archiveDigestAnnotation: digest})
	if err := r.Client.Apply(ctx, dep, client.FieldOwner(archiveFieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying Deployment %s: %w", key, err)
	}
	r.event(c, corev1.EventTypeNormal, "BinlogArchiverApplied", "Apply", "applied Deployment %s (archiving after %s from %v)", key.Name, a.Start, a.Sources)
	return nil
}

// archivePod returns the archiver's ready pod, or nil and why there is none.
func (r *MySQLClusterReconciler) archivePod(ctx context.Context, c *dolphinv1.MySQLCluster) (*corev1.Pod, string, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.BinlogArchiveLabels(c))); err != nil {
		return nil, "", fmt.Errorf("listing the binlog archiver's pods: %w", err)
	}
	if len(pods.Items) == 0 {
		return nil, "Deployment " + resources.BinlogArchiveName(c) + " has no pod yet", nil
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && podReady(p) && p.Status.PodIP != "" {
			return p, "", nil
		}
	}
	p := pods.Items[0]
	return nil, fmt.Sprintf("pod %s is %s and not ready", p.Name, p.Status.Phase), nil
}

// removeBinlogArchive deletes the archiver's Deployment and Secret (the archive stays).
func (r *MySQLClusterReconciler) removeBinlogArchive(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.BinlogArchiveName(c)}
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Secret{}} {
		err := r.apiReader().Get(ctx, key, obj)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading %T %s: %w", obj, key, err)
		}
		if err := r.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %T %s: %w", obj, key, err)
		}
		r.event(c, corev1.EventTypeNormal, "BinlogArchiverRemoved", "Delete", "deleted %T %s: continuous archiving is off (archived segments are kept)", obj, key.Name)
	}
	return nil
}

// archiveWatch keeps, per cluster, the archive step's last result and when the primary was
// first seen ahead of the archive, and HTTP clients for the archivers.
type archiveWatch struct {
	mu      sync.Mutex
	behind  map[types.NamespacedName]time.Time
	results map[types.NamespacedName]archiveResult
	clients map[string]*http.Client
}

// archiveResult is what the archive step found: the status part and the condition.
type archiveResult struct {
	status *dolphinv1.ArchiveStatus
	cond   *metav1.Condition
}

func (w *archiveWatch) record(k types.NamespacedName, st *dolphinv1.ArchiveStatus, cond *metav1.Condition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.results == nil {
		w.results = map[types.NamespacedName]archiveResult{}
	}
	w.results[k] = archiveResult{status: st, cond: cond}
}

// result returns the last result of the archive step for k, if it ran since the operator
// started (and archiving was not turned off since).
func (w *archiveWatch) result(k types.NamespacedName) (archiveResult, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	res, ok := w.results[k]
	return res, ok
}

func (w *archiveWatch) behindSince(k types.NamespacedName) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.behind[k]
}

func (w *archiveWatch) setBehindSince(k types.NamespacedName, t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.behind == nil {
		w.behind = map[types.NamespacedName]time.Time{}
	}
	w.behind[k] = t
}

func (w *archiveWatch) forget(k types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.behind, k)
	delete(w.results, k)
}

// fetch returns an ArchiveStatusFunc that reaches the archiver at its pod IP with the CA and
// token of the cluster's agent Secret (the archiver serves the agents' certificate).
func (w *archiveWatch) fetch(reader client.Reader) ArchiveStatusFunc {
	return func(ctx context.Context, c *dolphinv1.MySQLCluster, pod *corev1.Pod) (binlog.Status, error) {
		var sec corev1.Secret
		if err := reader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: resources.AgentSecretName(c)}, &sec); err != nil {
			return binlog.Status{}, fmt.Errorf("reading the agent Secret: %w", err)
		}
		hc, err := w.client(sec, agent.AgentServerName(c.Name, c.Namespace))
		if err != nil {
			return binlog.Status{}, err
		}
		base := "https://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(resources.BinlogArchivePort))
		return binlog.FetchStatus(ctx, hc, base, string(sec.Data[resources.AgentTokenKey]))
	}
}

// client returns an HTTP client trusting the Secret's CA, one per Secret version.
func (w *archiveWatch) client(sec corev1.Secret, serverName string) (*http.Client, error) {
	key := string(sec.UID) + "|" + sec.ResourceVersion
	w.mu.Lock()
	defer w.mu.Unlock()
	if hc, ok := w.clients[key]; ok {
		return hc, nil
	}
	tlsConfig, err := agent.ClientTLSConfig(sec.Data[resources.AgentCAKey], serverName)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: tlsConfig, MaxIdleConnsPerHost: 1}}
	if w.clients == nil {
		w.clients = map[string]*http.Client{}
	}
	for k, old := range w.clients {
		if len(k) > len(sec.UID) && k[:len(sec.UID)] == string(sec.UID) {
			old.CloseIdleConnections()
			delete(w.clients, k)
		}
	}
	w.clients[key] = hc
	return hc, nil
}

// anyPodServesTLS reports whether one of the cluster's instance pods was started with a TLS
// certificate.
func (r *MySQLClusterReconciler) anyPodServesTLS(ctx context.Context, c *dolphinv1.MySQLCluster) (bool, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return false, fmt.Errorf("listing pods: %w", err)
	}
	for i := range pods.Items {
		if resources.PodServesTLS(&pods.Items[i]) {
			return true, nil
		}
	}
	return false, nil
}

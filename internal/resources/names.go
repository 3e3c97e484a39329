package resources

import (
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// Label keys Dolphin sets on the objects it owns. Services and the PodDisruptionBudget select
// pods by SelectorLabels; the topology engine sets RoleLabel on each pod.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelComponent = "app.kubernetes.io/component"
	// RoleLabel carries the replication role of a pod: "primary" or "replica".
	RoleLabel = "mysql.dolphin.dev/role"
	// ConfigHashAnnotation on the pod template changes when a spec field that needs an
	// instance restart changes (engine, mysqlConfig).
	ConfigHashAnnotation = "mysql.dolphin.dev/config-hash"

	// FieldManager is the server-side-apply field manager of the operator's reconcilers.
	FieldManager = "dolphin-operator"
	// TopologyFieldManager is the field manager of the topology reporter, which owns the
	// primary Service's selector once it has pointed it at a pod (PrimaryPodSelector).
	TopologyFieldManager = "dolphin-topology"

	appName   = "mysql"
	managedBy = "dolphin"

	// AppName is the value of LabelName on Dolphin's pods and data volume claims.
	AppName = appName
	// ManagedBy is the value of LabelManagedBy on every object Dolphin creates (data
	// volume claims excepted: they carry the StatefulSet claim template's SelectorLabels).
	ManagedBy = managedBy
)

// MySQLPort is the port every instance and Service listens on.
const MySQLPort = 3306

// Names are the names of the objects Dolphin creates for one cluster.
type Names struct {
	StatefulSet, HeadlessService, PrimaryService, ReplicaService    string
	ConfigMap, GeneratedSecret, PodDisruptionBudget, ServiceAccount string
}

// NamesFor returns the object names for a cluster. The StatefulSet carries the cluster's own
// name so that pods are `<cluster>-0`, `<cluster>-1` …
func NamesFor(c *dolphinv1.MySQLCluster) Names {
	n := c.Name
	return Names{
		StatefulSet:         n,
		HeadlessService:     n + "-instances",
		PrimaryService:      n + "-primary",
		ReplicaService:      n + "-replicas",
		ConfigMap:           n + "-config",
		GeneratedSecret:     n + "-credentials",
		PodDisruptionBudget: n,
		ServiceAccount:      n,
	}
}

// CredentialsSecretName is the Secret holding the cluster's passwords: the user's own when
// spec.credentials.secretName is set, otherwise the generated one.
func CredentialsSecretName(c *dolphinv1.MySQLCluster) string {
	if c.Spec.Credentials.SecretName != "" {
		return c.Spec.Credentials.SecretName
	}
	return NamesFor(c).GeneratedSecret
}

// SelectorLabels select every instance pod of a cluster. They never change for the life of
// the cluster (a StatefulSet selector is immutable).
func SelectorLabels(c *dolphinv1.MySQLCluster) map[string]string {
	return map[string]string{LabelName: appName, LabelInstance: c.Name}
}

// CommonLabels are set on every object Dolphin creates for a cluster.
func CommonLabels(c *dolphinv1.MySQLCluster) map[string]string {
	l := SelectorLabels(c)
	l[LabelManagedBy] = managedBy
	l[LabelComponent] = "database"
	return l
}

// RoleSelector selects the pods of a cluster that have a given role.
func RoleSelector(c *dolphinv1.MySQLCluster, role dolphinv1.InstanceRole) map[string]string {
	l := SelectorLabels(c)
	l[RoleLabel] = string(role)
	return l
}

// PrimaryPodSelector selects the one pod of a cluster named pod — none when pod is "" (no
// pod has an empty name): the primary Service's selector once the topology engine has
// published roles. Moving the primary is then one
// change of one object — the Service's selector — which the EndpointSlice controller turns
// into one EndpointSlice write and kube-proxy into one rules sync. Moving it with role labels
// takes two pod changes (the old primary's label off, then the new one's on), and kube-proxy
// applies a second change no sooner than its minSyncPeriod (1 s by default) after the first:
// clients waited that second on every failover (docs/design/0050).
func PrimaryPodSelector(cluster, pod string) map[string]string {
	return map[string]string{LabelName: appName, LabelInstance: cluster, appsv1.StatefulSetPodNameLabel: pod}
}

// SelectsOnePod reports whether a Service selector selects one pod by name
// (PrimaryPodSelector), and which.
func SelectsOnePod(selector map[string]string) (string, bool) {
	pod, ok := selector[appsv1.StatefulSetPodNameLabel]
	return pod, ok
}

// PodName is the name of the pod of instance ordinal i.
func PodName(c *dolphinv1.MySQLCluster, i int) string { return fmt.Sprintf("%s-%d", c.Name, i) }

// PrimaryOrdinal is the ordinal of the primary recorded by the topology engine, if any.
func PrimaryOrdinal(c *dolphinv1.MySQLCluster) (int, bool) {
	if c.Status.Topology == nil || c.Status.Topology.Primary == "" {
		return 0, false
	}
	suffix, ok := strings.CutPrefix(c.Status.Topology.Primary, c.Name+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(suffix)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// InstancesToRun is how many instances run: spec.instances, but never fewer than needed to
// keep the current primary. A scale-down that would remove the primary waits until a
// switchover moved the primary role to a lower ordinal.
func InstancesToRun(c *dolphinv1.MySQLCluster) int32 {
	if n, ok := PrimaryOrdinal(c); ok && int32(n) >= c.Spec.Instances {
		return int32(n) + 1
	}
	return c.Spec.Instances
}

// KubeletRetryAnnotation is set by the operator on a new instance pod, to the time, to make the
// kubelet sync the pod again at once when a race of Kubernetes' own put its start aside for the
// kubelet's pod-sync back-off (internal/controller/cluster_pod_start.go). It changes nothing else.
const KubeletRetryAnnotation = "mysql.dolphin.dev/kubelet-retry"

package resources

import (
	"path"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/serverid"
)

// The binlog archiver: one pod per cluster (`dolphin binlog-archive`) that copies the binary
// log into the backup store (spec.backup.continuousArchiving). Its labels differ from the
// instances' in app.kubernetes.io/name, so no Service or budget of the cluster selects it.
const (
	// ComponentBinlogArchive is LabelComponent of the archiver's objects.
	ComponentBinlogArchive = "binlog-archive"
	// ContainerBinlogArchive is the archiver's container.
	ContainerBinlogArchive = "archive"
	// BinlogArchivePort is its status endpoint's HTTPS port.
	BinlogArchivePort = 9445
	// BinlogArchiveSecretHashAnnotation on the pod template is a digest of the archiver's
	// Secret (store configuration, password, certificate), so a change rolls the pod.
	BinlogArchiveSecretHashAnnotation = "mysql.dolphin.dev/archive-secret-hash"
	// Keys of the archiver's Secret besides the agent PKI's (AgentCAKey, AgentCertKey,
	// AgentKeyKey, AgentTokenKey).
	ArchiveStoreConfigKey = "store.json"
	ArchivePasswordKey    = "password"
	// ArchiveServerCAKey holds the CA of the instances' certificate (spec.tls.enabled).
	ArchiveServerCAKey = "server-ca.crt"
	// ArchiveServerID is the server_id the archiver registers with; instances use
	// serverIDBase (1000) plus their ordinal, far below.
	ArchiveServerID = serverid.Archive

	binlogArchiveName      = "dolphin-binlog-archive"
	binlogArchiveSecretDir = "/etc/dolphin/archive"
	volumeArchiveSecret    = "archive-secret"
)

// BinlogArchiveName names the archiver's Deployment and Secret of cluster c.
func BinlogArchiveName(c *dolphinv1.MySQLCluster) string { return c.Name + "-binlog-archive" }

// BinlogArchiveLabels are the labels of the archiver's objects and its pod's selector.
func BinlogArchiveLabels(c *dolphinv1.MySQLCluster) map[string]string {
	return map[string]string{
		LabelName: binlogArchiveName, LabelInstance: c.Name,
		LabelManagedBy: managedBy, LabelComponent: ComponentBinlogArchive,
	}
}

// BinlogArchivePrefix is the archive's key prefix under the store's own prefix.
func BinlogArchivePrefix(c *dolphinv1.MySQLCluster) string {
	return c.Namespace + "/" + c.Name + "/binlog/"
}

// KeptStorePrefix is where copies of kept transactions go in the cluster's backup store
// (docs/design/0044).
func KeptStorePrefix(c *dolphinv1.MySQLCluster) string {
	return c.Namespace + "/" + c.Name + "/kept/"
}

// BinlogArchiveArgs are what the archiver needs to know beyond the cluster's spec.
type BinlogArchiveArgs struct {
	// Sources are host:port of the servers to read from, in order of preference (the
	// replicas Service; the primary Service for a cluster of one instance).
	Sources []string
	// ReplicaOnly makes the archiver refuse a writable source (the replicas Service of a
	// cluster of more than one instance can still reach a replica promoted since).
	ReplicaOnly bool
	// Start is the GTID position to archive after when the store holds no segment yet.
	Start string
	// SecretHash is BinlogArchiveSecretHashAnnotation's value.
	SecretHash string
	// SourceServerName, when set, makes the archiver read over TLS only, verifying the
	// sources' certificate against the CA in its Secret (ArchiveServerCAKey) for this name.
	SourceServerName string
}

// BinlogArchiveDeployment runs `dolphin binlog-archive` for c, one pod at a time (Recreate:
// two archivers on one prefix would fight; the second stops with an error).
func BinlogArchiveDeployment(c *dolphinv1.MySQLCluster, a BinlogArchiveArgs, o BuildOptions) *appsv1ac.DeploymentApplyConfiguration {
	labels := BinlogArchiveLabels(c)
	image := o.AgentImage
	if image == "" {
		image = DefaultAgentImage
	}
	maxAge := binlog.DefaultSegmentMaxAge
	if ca := c.Spec.Backup.ContinuousArchiving; ca != nil && ca.SegmentMaxAge != nil {
		maxAge = ca.SegmentMaxAge.Duration
	}
	secret := func(key string) string { return path.Join(binlogArchiveSecretDir, key) }
	args := []string{"/dolphin", "binlog-archive",
		"--store-config", secret(ArchiveStoreConfigKey),
		"--prefix", BinlogArchivePrefix(c),
		"--user", ReplicationUser,
		"--password-file", secret(ArchivePasswordKey),
		"--server-id", strconv.FormatUint(ArchiveServerID, 10),
		"--start", a.Start,
		"--segment-max-age", maxAge.Round(time.Millisecond).String(),
		"--listen", ":" + strconv.Itoa(BinlogArchivePort),
		"--token-file", secret(AgentTokenKey),
		"--tls-cert", secret(AgentCertKey),
		"--tls-key", secret(AgentKeyKey),
	}
	for _, s := range a.Sources {
		args = append(args, "--source", s)
	}
	if a.ReplicaOnly {
		args = append(args, "--replica-only")
	}
	if a.SourceServerName != "" {
		args = append(args, "--source-ca", secret(ArchiveServerCAKey), "--source-server-name", a.SourceServerName)
	}
	return appsv1ac.Deployment(BinlogArchiveName(c), c.Namespace).
		WithLabels(labels).
		WithOwnerReferences(ownerReference(c)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(1).
			WithStrategy(appsv1ac.DeploymentStrategy().WithType(appsv1.RecreateDeploymentStrategyType)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithAnnotations(map[string]string{BinlogArchiveSecretHashAnnotation: a.SecretHash}).
				WithSpec(withContainerSeccomp(c, withPodIdentity(c, corev1ac.PodSpec()).
					WithAutomountServiceAccountToken(false).
					WithEnableServiceLinks(false).
					WithSecurityContext(podSecurityContext(c, nil)).
					WithContainers(corev1ac.Container().
						WithName(ContainerBinlogArchive).
						WithImage(image).
						WithCommand(args...).
						WithPorts(corev1ac.ContainerPort().WithName("status").WithContainerPort(BinlogArchivePort).WithProtocol(corev1.ProtocolTCP)).
						WithSecurityContext(containerSecurityContext()).
						WithReadinessProbe(corev1ac.Probe().
							WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromString("status"))).
							WithPeriodSeconds(5).WithFailureThreshold(3)).
						WithVolumeMounts(corev1ac.VolumeMount().WithName(volumeArchiveSecret).WithMountPath(binlogArchiveSecretDir).WithReadOnly(true))).
					WithVolumes(corev1ac.Volume().WithName(volumeArchiveSecret).WithSecret(
						corev1ac.SecretVolumeSource().WithSecretName(BinlogArchiveName(c)).WithDefaultMode(0o440))).
					WithTerminationGracePeriodSeconds(30)))))
}

package resources

import (
	"bytes"
	"encoding/pem"
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/podlayout"
)

// BuildOptions are the operator-wide inputs of the builders (the same for every cluster),
// or, from ChooseBuild, what one cluster's live StatefulSet keeps of them.
type BuildOptions struct {
	// AgentImage is the image holding the dolphin binary. Its init container copies the
	// binary into the pod, where the instance agent runs it inside the database image (which
	// has the backup tools), the way CloudNativePG runs its instance manager.
	AgentImage string
	// TemplateGeneration is the pod template generation to build (see TemplateGeneration);
	// 0 is the newest.
	TemplateGeneration int
}

// generation is the pod template generation o builds.
func (o BuildOptions) generation() int {
	if o.TemplateGeneration == 0 {
		return TemplateGeneration
	}
	return o.TemplateGeneration
}

// DefaultAgentImage is the agent image when the operator is not told otherwise.
const DefaultAgentImage = "ghcr.io/dolphin-operator/dolphin:latest"

// The instance agent: a sidecar in every instance pod that takes backups and serves clones
// next to the data (the data volume is ReadWriteOnce), reached by the operator over HTTPS with
// a per-cluster CA and a bearer token (internal/agent).
const (
	// ContainerAgent is the agent's container; ContainerAgentTools the init container that
	// copies the dolphin binary into the pod.
	ContainerAgent      = podlayout.ContainerAgent
	ContainerAgentTools = "dolphin-tools"
	// AgentPort is the agent's HTTPS port.
	AgentPort = 9443
	// AgentBinary is where the dolphin binary is inside an instance pod.
	AgentBinary = podlayout.AgentBinary
	// AgentSecretDir is where the agent Secret is mounted.
	AgentSecretDir = "/etc/dolphin/agent"

	// Keys of the agent Secret.
	AgentCAKey    = "ca.crt"
	AgentCertKey  = "tls.crt"
	AgentKeyKey   = "tls.key"
	AgentTokenKey = "token"
	// AgentMetricsTokenKey is the token scrapers of the agents' /metrics present; the
	// operator copies it into the metrics Secret (MetricsSecretName). MonitorPasswordKey,
	// the monitor account's password, is copied in from the credentials Secret.
	AgentMetricsTokenKey = podlayout.AgentMetricsTokenKey

	volumeDolphinBin  = "dolphin-bin"
	volumeAgentSecret = "agent-secret"
)

// AgentSecretName is the Secret with the agent's CA, server certificate and token.
func AgentSecretName(c *dolphinv1.MySQLCluster) string { return c.Name + "-agent" }

// Keys of the metrics Secret (MetricsSecretName).
const (
	// MetricsTokenKey is the bearer token the agents' GET /metrics asks of scrapers.
	MetricsTokenKey = "token"
	// MetricsCAKey is the CA the agents' certificates chain to; their server name is
	// agent.AgentServerName of the cluster.
	MetricsCAKey = "ca.crt"
)

// MetricsSecretName is the Secret a scraper of the instance agents' /metrics is given: the
// token and the CA, nothing that opens the agents' API.
func MetricsSecretName(c *dolphinv1.MySQLCluster) string { return c.Name + "-metrics" }

// MetricsSecretData is the metrics Secret's content, copied from the agent Secret. previous
// is the metrics Secret's current content (nil when new): when the agents' CA changed, the CA
// it held stays in the bundle after the new one, so that scrapers trust the agents until each
// serves its renewed certificate (the kubelet refreshes the files a minute or two later). Only
// one previous CA is kept; its key is gone (NewAgentPKI keeps none), so it signs nothing new.
func MetricsSecretData(agentSecret *corev1.Secret, previous map[string][]byte) map[string][]byte {
	ca := agentSecret.Data[AgentCAKey]
	bundle := append([]byte(nil), ca...)
	if old := otherPEMBlock(previous[MetricsCAKey], ca); len(old) > 0 {
		if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
			bundle = append(bundle, '\n')
		}
		bundle = append(bundle, old...)
	}
	return map[string][]byte{
		MetricsTokenKey: agentSecret.Data[AgentMetricsTokenKey],
		MetricsCAKey:    bundle,
	}
}

// otherPEMBlock is the first PEM block of bundle, as written, that current does not hold (nil
// when there is none): the CA before the current one.
func otherPEMBlock(bundle, current []byte) []byte {
	for rest := bundle; ; {
		start := bytes.Index(rest, []byte("-----BEGIN"))
		block, next := pem.Decode(rest)
		if block == nil || start < 0 {
			return nil
		}
		if raw := rest[start : len(rest)-len(next)]; !bytes.Contains(current, bytes.TrimSpace(raw)) {
			return raw
		}
		rest = next
	}
}

// agentToolsContainer copies the dolphin binary from the agent image into the pod.
func agentToolsContainer(o BuildOptions) *corev1ac.ContainerApplyConfiguration {
	image := o.AgentImage
	if image == "" {
		image = DefaultAgentImage
	}
	return corev1ac.Container().
		WithName(ContainerAgentTools).
		WithImage(image).
		WithCommand("/dolphin", "copy-binary", AgentBinary).
		WithSecurityContext(containerSecurityContext()).
		WithVolumeMounts(corev1ac.VolumeMount().WithName(volumeDolphinBin).WithMountPath(path.Dir(AgentBinary)))
}

// agentContainer runs the instance agent in the database image, where mariadb-backup and
// mbstream are, with the data directory and the server's socket mounted. From template
// generation 4 it holds its stop like the server's container (holdForSwitchoverCommand): the
// operator releases the server's hold through it, so it must still answer while that lasts.
func agentContainer(c *dolphinv1.MySQLCluster, generation int) *corev1ac.ContainerApplyConfiguration {
	ctr := agentContainerBase(c, probesAt(generation))
	if holdsForSwitchover(c, generation) {
		ctr.WithLifecycle(holdForSwitchoverLifecycle())
	}
	return ctr
}

func agentContainerBase(c *dolphinv1.MySQLCluster, probes probeTimings) *corev1ac.ContainerApplyConfiguration {
	secret := func(key string) string { return path.Join(AgentSecretDir, key) }
	return corev1ac.Container().
		WithName(ContainerAgent).
		WithImage(Image(c)).
		WithCommand(AgentBinary, "agent",
			"--listen", ":"+strconv.Itoa(AgentPort),
			"--token-file", secret(AgentTokenKey),
			"--tls-cert", secret(AgentCertKey),
			"--tls-key", secret(AgentKeyKey),
			"--flavor", string(c.Spec.Engine.Flavor),
			"--datadir", mycnf.DataDir,
			"--socket", mycnf.SocketPath).
		WithPorts(corev1ac.ContainerPort().WithName("agent").WithContainerPort(AgentPort).WithProtocol(corev1.ProtocolTCP)).
		WithEnv(podIdentityEnv()...).
		WithSecurityContext(containerSecurityContext()).
		WithReadinessProbe(corev1ac.Probe().WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromString("agent"))).
			WithPeriodSeconds(probes.agentReadyPeriod).WithFailureThreshold(probes.agentReadyFailures)).
		WithVolumeMounts(append(volumeMounts(),
			corev1ac.VolumeMount().WithName(volumeDolphinBin).WithMountPath(path.Dir(AgentBinary)).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(volumeAgentSecret).WithMountPath(AgentSecretDir).WithReadOnly(true))...)
}

// agentVolumes are the pod volumes the agent needs.
func agentVolumes(c *dolphinv1.MySQLCluster) []*corev1ac.VolumeApplyConfiguration {
	return []*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName(volumeDolphinBin).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		corev1ac.Volume().WithName(volumeAgentSecret).WithSecret(
			corev1ac.SecretVolumeSource().WithSecretName(AgentSecretName(c)).WithDefaultMode(0o440)),
	}
}

// OwnerReference is the controller reference of the objects Dolphin creates for c.
func OwnerReference(c *dolphinv1.MySQLCluster) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: dolphinv1.GroupVersion.String(), Kind: "MySQLCluster", Name: c.Name, UID: c.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

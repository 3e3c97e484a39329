package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
)

// The store server: one pod that mounts a PersistentVolumeClaim used as a backup store
// (spec.backup.store.pvc) and serves it over HTTPS (`dolphin store-server`), so that agents,
// seed containers, verification pods and the operator all reach a ReadWriteOnce claim the
// same way they reach S3. Its objects are named after the claim, not after a cluster: every
// cluster and backup that uses the claim shares one server.
const (
	// ComponentStoreServer is LabelComponent of the store server's objects.
	ComponentStoreServer = "backup-store"
	// StoreClaimLabel names the claim a store server serves.
	StoreClaimLabel = "mysql.dolphin.dev/store-claim"
	// ContainerStoreServer is the store server's container.
	ContainerStoreServer = "store"
	// StoreServerPort is its HTTPS port.
	StoreServerPort = 9444
	// StoreServerSecretHashAnnotation on the pod template is a digest of the server's
	// certificate, so a renewed certificate rolls the pod.
	StoreServerSecretHashAnnotation = "mysql.dolphin.dev/store-secret-hash"

	storeDataDir      = "/var/lib/dolphin-store"
	storeSecretDir    = "/etc/dolphin/store"
	volumeStoreData   = "store"
	volumeStoreSecret = "store-secret"
)

// StoreServerName names the Deployment, Service and Secret of the store server of claim: a
// DNS label (at most 63 characters), with a digest of the claim when it is too long.
func StoreServerName(claim string) string {
	const prefix = "dolphin-store-"
	name := prefix + claim
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(claim))
	return name[:63-9] + "-" + hex.EncodeToString(sum[:4])
}

// StoreServerLabels are the labels of the store server's objects and its pod's selector.
func StoreServerLabels(claim string) map[string]string {
	return map[string]string{
		LabelManagedBy: managedBy, LabelComponent: ComponentStoreServer,
		StoreClaimLabel: StoreServerName(claim)[len("dolphin-store-"):],
	}
}

// StoreServerDeployment runs `dolphin store-server` on the claim, one pod at a time
// (Recreate: a ReadWriteOnce claim is never mounted by two pods). secretHash is the
// StoreServerSecretHashAnnotation value.
func StoreServerDeployment(namespace, claim, secretHash string, o BuildOptions) *appsv1ac.DeploymentApplyConfiguration {
	name := StoreServerName(claim)
	labels := StoreServerLabels(claim)
	image := o.AgentImage
	if image == "" {
		image = DefaultAgentImage
	}
	secret := func(key string) string { return path.Join(storeSecretDir, key) }
	return appsv1ac.Deployment(name, namespace).
		WithLabels(labels).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(1).
			WithStrategy(appsv1ac.DeploymentStrategy().WithType(appsv1.RecreateDeploymentStrategyType)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithAnnotations(map[string]string{StoreServerSecretHashAnnotation: secretHash}).
				WithSpec(corev1ac.PodSpec().
					WithAutomountServiceAccountToken(false).
					WithEnableServiceLinks(false).
					WithSecurityContext(corev1ac.PodSecurityContext().
						WithRunAsNonRoot(true).WithRunAsUser(mysqlUID).WithRunAsGroup(mysqlUID).WithFSGroup(mysqlUID).
						WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
					WithContainers(corev1ac.Container().
						WithName(ContainerStoreServer).
						WithImage(image).
						WithCommand("/dolphin", "store-server",
							"--listen", ":"+strconv.Itoa(StoreServerPort),
							"--directory", storeDataDir,
							"--token-file", secret(AgentTokenKey),
							"--tls-cert", secret(AgentCertKey),
							"--tls-key", secret(AgentKeyKey)).
						WithPorts(corev1ac.ContainerPort().WithName("store").WithContainerPort(StoreServerPort).WithProtocol(corev1.ProtocolTCP)).
						WithSecurityContext(containerSecurityContext()).
						WithReadinessProbe(corev1ac.Probe().
							WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromString("store"))).
							WithPeriodSeconds(5).WithFailureThreshold(3)).
						WithVolumeMounts(
							corev1ac.VolumeMount().WithName(volumeStoreData).WithMountPath(storeDataDir),
							corev1ac.VolumeMount().WithName(volumeStoreSecret).WithMountPath(storeSecretDir).WithReadOnly(true))).
					WithVolumes(
						corev1ac.Volume().WithName(volumeStoreData).WithPersistentVolumeClaim(
							corev1ac.PersistentVolumeClaimVolumeSource().WithClaimName(claim)),
						corev1ac.Volume().WithName(volumeStoreSecret).WithSecret(
							corev1ac.SecretVolumeSource().WithSecretName(name).WithDefaultMode(0o440))).
					WithTerminationGracePeriodSeconds(30))))
}

// StoreServerService is the store server's Service; clients use its ClusterIP.
func StoreServerService(namespace, claim string) *corev1ac.ServiceApplyConfiguration {
	labels := StoreServerLabels(claim)
	return corev1ac.Service(StoreServerName(claim), namespace).
		WithLabels(labels).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithSelector(labels).
			WithPorts(corev1ac.ServicePort().WithName("store").WithPort(StoreServerPort).
				WithTargetPort(intstr.FromString("store")).WithProtocol(corev1.ProtocolTCP)))
}

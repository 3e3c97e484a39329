package resources

import (
	"path"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// The keys of spec.bootstrap.external's Secrets.
const (
	// ExternalUsernameKey and ExternalPasswordKey hold the account Dolphin reads (and
	// replicates from) the external server with.
	ExternalUsernameKey = "username"
	ExternalPasswordKey = "password"
	// ExternalCAKey holds the CA certificate that verifies the external server.
	ExternalCAKey = "ca.crt"
)

// ExternalSourceDir is where the external server's CA is mounted in the server container of a
// cluster that follows that server (its primary replicates from it over TLS).
const ExternalSourceDir = "/etc/mysql/external-source"

// ExternalSourceCAFile is that CA as the servers see it (MASTER_SSL_CA).
var ExternalSourceCAFile = path.Join(ExternalSourceDir, ExternalCAKey)

const volumeExternalSource = "external-source"

// FollowsExternalSource reports whether the cluster follows the server it was copied from
// (spec.bootstrap.external with replicate): its primary replicates from that server until a
// cutover.
func FollowsExternalSource(c *dolphinv1.MySQLCluster) bool {
	b := c.Spec.Bootstrap
	return b != nil && b.External != nil && b.External.Replicate
}

// externalSourceCA reports whether the servers need the external server's CA: the cluster
// follows it over TLS.
func externalSourceCA(c *dolphinv1.MySQLCluster) bool {
	return FollowsExternalSource(c) && c.Spec.Bootstrap.External.CASecretName != ""
}

// externalSourceVolume is the external server's CA, readable by the server's group only.
func externalSourceVolume(c *dolphinv1.MySQLCluster) *corev1ac.VolumeApplyConfiguration {
	return corev1ac.Volume().WithName(volumeExternalSource).WithSecret(
		corev1ac.SecretVolumeSource().WithSecretName(c.Spec.Bootstrap.External.CASecretName).
			WithItems(corev1ac.KeyToPath().WithKey(ExternalCAKey).WithPath(ExternalCAKey)).
			// Optional: once cut over, a user may delete the migration's Secrets; a pod
			// restarted then must still start.
			WithOptional(true).
			WithDefaultMode(0o440))
}

// externalSourceMounts mounts the external server's CA into the server's container when the
// cluster follows that server over TLS.
func externalSourceMounts(c *dolphinv1.MySQLCluster) []*corev1ac.VolumeMountApplyConfiguration {
	if !externalSourceCA(c) {
		return nil
	}
	return []*corev1ac.VolumeMountApplyConfiguration{
		corev1ac.VolumeMount().WithName(volumeExternalSource).WithMountPath(ExternalSourceDir).WithReadOnly(true)}
}

// CutOver reports whether the cluster's cutover from the server it followed is recorded
// (status.topology.externalSource.cutOver): it no longer follows that server.
func CutOver(c *dolphinv1.MySQLCluster) bool {
	t := c.Status.Topology
	return t != nil && t.ExternalSource != nil && t.ExternalSource.CutOver != nil
}

package resources

import (
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1alpha1"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
)

// ContainerRestore is the init container that fills an empty data directory from the backup
// of spec.bootstrap (`dolphin restore`, run in the database image, which has mbstream and
// mariadb-backup). It runs after the init container, which writes the per-instance config and
// leaves the data directory to it.
const ContainerRestore = "restore"

// Where the restore container finds the CA of a backup store with a private CA.
const (
	restoreCADir    = "/etc/dolphin/restore-ca"
	volumeRestoreCA = "restore-ca"
	// Keys of the S3 credentials Secret (the same as the backup controller reads).
	s3AccessKeyIDKey     = "access-key-id"
	s3SecretAccessKeyKey = "secret-access-key"
	s3CAKey              = "ca.crt"
)

// restoring is true when the instances of c are created from a backup: spec.bootstrap is set
// and the operator resolved it into status.restoredFrom.
func restoring(c *dolphinv1.MySQLCluster) bool {
	return c.Spec.Bootstrap != nil && c.Status.RestoredFrom != nil && c.Status.RestoredFrom.Store.S3 != nil
}

// restoreContainer runs `dolphin restore` for the backup in c.Status.RestoredFrom. The
// location comes from status, never from a MySQLBackup looked up again, so the pod template
// does not change when that MySQLBackup is deleted.
func restoreContainer(c *dolphinv1.MySQLCluster) *corev1ac.ContainerApplyConfiguration {
	from := c.Status.RestoredFrom
	s3 := from.Store.S3
	args := []string{"restore",
		"--path", from.Path,
		"--datadir", mycnf.DataDir,
		"--defaults-file", path.Join(mycnf.ConfigDir, MyCnfKey),
		"--tmp-dir", "/tmp",
		"--flavor", string(c.Spec.Engine.Flavor),
		"--s3-endpoint", s3.Endpoint,
		"--s3-bucket", s3.Bucket,
		"--s3-prefix", s3.Prefix,
		"--s3-region", s3.Region,
		"--s3-path-style=" + strconv.FormatBool(s3.ForcePathStyle),
	}
	if s3.PartSize != nil {
		args = append(args, "--s3-part-size", strconv.FormatInt(s3.PartSize.Value(), 10))
	}
	if s3.CASecret != "" {
		args = append(args, "--s3-ca-file", path.Join(restoreCADir, s3CAKey))
	}
	secretEnv := func(name, secret, key string) *corev1ac.EnvVarApplyConfiguration {
		return corev1ac.EnvVar().WithName(name).WithValueFrom(corev1ac.EnvVarSource().
			WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(secret).WithKey(key)))
	}
	mounts := append(volumeMounts(),
		corev1ac.VolumeMount().WithName(volumeDolphinBin).WithMountPath(path.Dir(AgentBinary)).WithReadOnly(true))
	if s3.CASecret != "" {
		mounts = append(mounts, corev1ac.VolumeMount().WithName(volumeRestoreCA).WithMountPath(restoreCADir).WithReadOnly(true))
	}
	return corev1ac.Container().
		WithName(ContainerRestore).
		WithImage(Image(c)).
		WithCommand(append([]string{AgentBinary}, args...)...).
		WithEnv(append(podIdentityEnv(),
			secretEnv("S3_ACCESS_KEY_ID", s3.CredentialsSecret, s3AccessKeyIDKey),
			secretEnv("S3_SECRET_ACCESS_KEY", s3.CredentialsSecret, s3SecretAccessKeyKey),
			corev1ac.EnvVar().WithName("DOLPHIN_OPERATOR_USER").WithValue(OperatorUser),
			secretEnv("DOLPHIN_OPERATOR_PASSWORD", CredentialsSecretName(c), OperatorPasswordKey),
			secretEnv("DOLPHIN_ROOT_PASSWORD", CredentialsSecretName(c), RootPasswordKey))...).
		WithSecurityContext(containerSecurityContext()).
		// The last lines of its log become the termination message, which the operator
		// shows in the cluster's status when the restore fails.
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithVolumeMounts(mounts...)
}

// restoreVolumes are the pod volumes the restore container needs besides the usual ones.
func restoreVolumes(c *dolphinv1.MySQLCluster) []*corev1ac.VolumeApplyConfiguration {
	if s3 := c.Status.RestoredFrom.Store.S3; s3.CASecret != "" {
		return []*corev1ac.VolumeApplyConfiguration{corev1ac.Volume().WithName(volumeRestoreCA).WithSecret(
			corev1ac.SecretVolumeSource().WithSecretName(s3.CASecret).WithDefaultMode(0o444))}
	}
	return nil
}

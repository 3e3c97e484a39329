package resources

import (
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
)

// ContainerSeed is the init container that fills an empty data directory the way the operator
// tells it (`dolphin seed`, run in the database image, which has mbstream and
// mariadb-backup): empty (InstallScript), from the backup of spec.bootstrap, or cloned from a
// healthy peer's agent. It writes the per-instance config first (before template generation
// 6, an init container of its own did), and serves the agent's HTTPS port (same certificate and token) until the operator's
// instruction is done; on an initialised data directory it exits at once.
const ContainerSeed = "seed"

// Where the restore container finds the CA of a backup store with a private CA.
const (
	restoreCADir    = "/etc/dolphin/restore-ca"
	volumeRestoreCA = "restore-ca"
	// Where they find the CA and token of a pvc store's server.
	storeClientDir    = "/etc/dolphin/store-client"
	volumeStoreClient = "store-client"
	// Keys of the S3 credentials Secret (the same as the backup controller reads).
	s3AccessKeyIDKey     = "access-key-id"
	s3SecretAccessKeyKey = "secret-access-key"
	s3CAKey              = "ca.crt"
)

// restoring is true when the instances of c are created from a backup: spec.bootstrap is set
// and the operator resolved it into status.restoredFrom.
func restoring(c *dolphinv1.MySQLCluster) bool {
	if c.Spec.Bootstrap == nil || c.Status.RestoredFrom == nil {
		return false
	}
	from := c.Status.RestoredFrom
	return from.Store.S3 != nil || from.Store.PVC != nil && from.StoreURL != ""
}

// seedContainer runs `dolphin seed`. For a cluster restored from a backup it carries the
// backup's location from c.Status.RestoredFrom — from status, never from a MySQLBackup looked
// up again, so the pod template does not change when that MySQLBackup is deleted.
// With configuresInstance (template generation 6 on) it first runs the init script, which an
// init container of its own ran before.
func seedContainer(c *dolphinv1.MySQLCluster, configuresInstance bool) *corev1ac.ContainerApplyConfiguration {
	secret := func(key string) string { return path.Join(AgentSecretDir, key) }
	args := []string{"seed",
		"--listen", ":" + strconv.Itoa(AgentPort),
		"--token-file", secret(AgentTokenKey),
		"--tls-cert", secret(AgentCertKey),
		"--tls-key", secret(AgentKeyKey),
		"--datadir", mycnf.DataDir,
		"--defaults-file", path.Join(mycnf.ConfigDir, MyCnfKey),
		"--install-script", path.Join(mycnf.ConfigDir, InstallShKey),
		"--tmp-dir", "/tmp",
		"--flavor", string(c.Spec.Engine.Flavor),
	}
	if configuresInstance {
		args = append(args, "--init-script", path.Join(mycnf.ConfigDir, InitShKey))
	}
	secretEnv := func(name, secret, key string) *corev1ac.EnvVarApplyConfiguration {
		return corev1ac.EnvVar().WithName(name).WithValueFrom(corev1ac.EnvVarSource().
			WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(secret).WithKey(key)))
	}
	env := append(podIdentityEnv(),
		corev1ac.EnvVar().WithName("DOLPHIN_OPERATOR_USER").WithValue(OperatorUser),
		secretEnv("DOLPHIN_OPERATOR_PASSWORD", CredentialsSecretName(c), OperatorPasswordKey),
		secretEnv("DOLPHIN_ROOT_PASSWORD", CredentialsSecretName(c), RootPasswordKey))
	mounts := append(volumeMounts(),
		corev1ac.VolumeMount().WithName(volumeDolphinBin).WithMountPath(path.Dir(AgentBinary)).WithReadOnly(true),
		corev1ac.VolumeMount().WithName(volumeAgentSecret).WithMountPath(AgentSecretDir).WithReadOnly(true))
	if restoring(c) {
		from := c.Status.RestoredFrom
		a, e, m := storeArgs(from.Store, c.Namespace, from.Path, from.StoreURL)
		args, env, mounts = append(args, a...), append(env, e...), append(mounts, m...)
		if from.TargetGTID != "" {
			args = append(args, "--archive-prefix", from.ArchivePrefix, "--replay-to", from.TargetGTID)
		}
	}
	return corev1ac.Container().
		WithName(ContainerSeed).
		WithImage(Image(c)).
		WithCommand(append([]string{AgentBinary}, args...)...).
		WithEnv(env...).
		WithSecurityContext(containerSecurityContext()).
		// The last lines of its log become the termination message, which the operator
		// shows in the cluster's status when seeding fails.
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithVolumeMounts(mounts...)
}

// storeArgs are the flags, environment and mounts with which `dolphin seed`, `restore` and
// `verify` read the backup at path in store.
//
// A pvc store is read through its store server at storeURL, with the CA and token of the
// server's Secret (only those two keys are mounted, never the server's key).
func storeArgs(store dolphinv1.BackupStore, namespace, backupPath, storeURL string) ([]string, []*corev1ac.EnvVarApplyConfiguration, []*corev1ac.VolumeMountApplyConfiguration) {
	if p := store.PVC; p != nil {
		name := StoreServerName(p.ClaimName)
		args := []string{
			"--path", backupPath,
			"--store-url", storeURL,
			"--store-server-name", agent.AgentServerName(name, namespace),
			"--store-ca-file", path.Join(storeClientDir, AgentCAKey),
			"--store-token-file", path.Join(storeClientDir, AgentTokenKey),
		}
		return args, nil, []*corev1ac.VolumeMountApplyConfiguration{
			corev1ac.VolumeMount().WithName(volumeStoreClient).WithMountPath(storeClientDir).WithReadOnly(true)}
	}
	s3 := store.S3
	args := []string{
		"--path", backupPath,
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
	var env []*corev1ac.EnvVarApplyConfiguration
	if s3.CredentialsSecret != "" { // else the AWS SDK's default chain, in the pod
		env = append(env, secretEnv("S3_ACCESS_KEY_ID", s3.CredentialsSecret, s3AccessKeyIDKey),
			secretEnv("S3_SECRET_ACCESS_KEY", s3.CredentialsSecret, s3SecretAccessKeyKey))
	}
	var mounts []*corev1ac.VolumeMountApplyConfiguration
	if s3.CASecret != "" {
		mounts = append(mounts, corev1ac.VolumeMount().WithName(volumeRestoreCA).WithMountPath(restoreCADir).WithReadOnly(true))
	}
	return args, env, mounts
}

// restoreVolumes are the pod volumes the seed container needs to restore a backup.
func restoreVolumes(c *dolphinv1.MySQLCluster) []*corev1ac.VolumeApplyConfiguration {
	return storeVolumes(c.Status.RestoredFrom.Store)
}

// storeVolumes are the volumes storeArgs' mounts need.
func storeVolumes(store dolphinv1.BackupStore) []*corev1ac.VolumeApplyConfiguration {
	if p := store.PVC; p != nil {
		return []*corev1ac.VolumeApplyConfiguration{corev1ac.Volume().WithName(volumeStoreClient).WithSecret(
			corev1ac.SecretVolumeSource().WithSecretName(StoreServerName(p.ClaimName)).WithDefaultMode(0o444).
				WithItems(corev1ac.KeyToPath().WithKey(AgentCAKey).WithPath(AgentCAKey),
					corev1ac.KeyToPath().WithKey(AgentTokenKey).WithPath(AgentTokenKey)))}
	}
	if s3 := store.S3; s3 != nil && s3.CASecret != "" {
		return []*corev1ac.VolumeApplyConfiguration{corev1ac.Volume().WithName(volumeRestoreCA).WithSecret(
			corev1ac.SecretVolumeSource().WithSecretName(s3.CASecret).WithDefaultMode(0o444))}
	}
	return nil
}

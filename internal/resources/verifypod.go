package resources

import (
	"path"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// Labels of a backup verification pod. It carries no LabelInstance: it is not an instance of
// the cluster and must not count as one.
const (
	// ComponentVerification is LabelComponent of verification pods.
	ComponentVerification = "backup-verification"
	// BackupLabel names the MySQLBackup a verification pod checks.
	BackupLabel = "mysql.dolphin.dev/backup"
	// ContainerVerify is the verification pod's container.
	ContainerVerify = "verify"
)

// VerifyPodName is the name of the pod that checks backup b.
func VerifyPodName(b *dolphinv1.MySQLBackup) string { return b.Name + "-verify" }

// VerifyPod is a throwaway pod that restores backup b of cluster c into an emptyDir and checks
// it (`dolphin verify`: every object's sha256, the GTID position, CHECK TABLE on every table),
// in the cluster's database image, ending with one result line in its termination message. It
// is owned by the MySQLBackup and runs once (restartPolicy Never). storeURL is the address
// of a pvc store's server (empty for S3). archivePrefix, when set, is the cluster's binlog
// archive in the backup's store, replayed after the backup to its end.
func VerifyPod(c *dolphinv1.MySQLCluster, b *dolphinv1.MySQLBackup, storeURL, archivePrefix string, o BuildOptions) *corev1ac.PodApplyConfiguration {
	store := *b.Status.Store
	args, env, mounts := storeArgs(store, b.Namespace, b.Status.Path, storeURL)
	if archivePrefix != "" {
		args = append(args, "--archive-prefix", archivePrefix)
	}
	const scratch = "/var/lib/dolphin-verify"
	args = append([]string{"verify", "--scratch-dir", scratch, "--tmp-dir", "/tmp", "--use-memory", "128M"}, args...)
	mounts = append(mounts,
		corev1ac.VolumeMount().WithName(volumeDolphinBin).WithMountPath(path.Dir(AgentBinary)).WithReadOnly(true),
		corev1ac.VolumeMount().WithName("scratch").WithMountPath(scratch),
		corev1ac.VolumeMount().WithName(volumeTmp).WithMountPath("/tmp"))
	labels := map[string]string{LabelManagedBy: managedBy, LabelComponent: ComponentVerification, BackupLabel: b.Name}
	volumes := append([]*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName(volumeDolphinBin).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		corev1ac.Volume().WithName("scratch").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		corev1ac.Volume().WithName(volumeTmp).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
	}, storeVolumes(store)...)
	return corev1ac.Pod(VerifyPodName(b), b.Namespace).
		WithLabels(labels).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(dolphinv1.GroupVersion.String()).WithKind("MySQLBackup").
			WithName(b.Name).WithUID(b.UID).WithController(true).WithBlockOwnerDeletion(true)).
		WithSpec(withContainerSeccomp(c, withPodIdentity(c, corev1ac.PodSpec()).
			WithRestartPolicy(corev1.RestartPolicyNever).
			WithAutomountServiceAccountToken(false).
			WithEnableServiceLinks(false).
			WithSecurityContext(podSecurityContext(c, nil)).
			WithInitContainers(agentToolsContainer(o)).
			WithContainers(corev1ac.Container().
				WithName(ContainerVerify).
				WithImage(Image(c)).
				WithCommand(append([]string{AgentBinary}, args...)...).
				WithEnv(env...).
				WithSecurityContext(containerSecurityContext()).
				WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
				WithVolumeMounts(mounts...)).
			WithVolumes(volumes...).
			WithTerminationGracePeriodSeconds(30).
			// A check that hangs is failed after six hours.
			WithActiveDeadlineSeconds(6*3600)))
}

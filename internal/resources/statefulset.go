package resources

import (
	"encoding/json"
	"fmt"
	"path"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
)

// Container and volume names inside an instance pod.
const (
	ContainerMySQLD = "mysqld"
	ContainerInit   = "init"

	volumeData           = "data"
	volumeConfig         = "config"
	volumeInstanceConfig = "instance-config"
	volumeRun            = "run"
	volumeTmp            = "tmp"

	// mysqlUID is the uid/gid of the mysql user in the official mariadb and mysql images.
	mysqlUID = 999
	// terminationGracePeriod gives mysqld time to flush and shut down cleanly.
	terminationGracePeriod = 60
)

// StatefulSet runs the instances. Its pod template depends only on the spec and on o, whose
// agent image and template generation ChooseBuild keeps at what the live StatefulSet runs
// (never on observed state), so applying it again never restarts pods unless the user changed
// something that needs a restart.
func StatefulSet(c *dolphinv1.MySQLCluster, o BuildOptions) (*appsv1ac.StatefulSetApplyConfiguration, error) {
	pod, err := podTemplate(c, o)
	if err != nil {
		return nil, err
	}
	names := NamesFor(c)
	retention := appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	if c.Spec.Storage.DeletePolicy == dolphinv1.VolumeDelete {
		retention = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	}
	return appsv1ac.StatefulSet(names.StatefulSet, c.Namespace).
		WithLabels(CommonLabels(c)).
		WithOwnerReferences(ownerReference(c)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(c.Spec.Instances).
			WithServiceName(names.HeadlessService).
			// Parallel: the topology engine, not pod order, decides who becomes primary.
			WithPodManagementPolicy(appsv1.ParallelPodManagement).
			// OnDelete: a new pod template reaches a pod only when Dolphin deletes it, replicas
			// first and the primary after a switchover (internal/controller/cluster_rollout.go). The
			// strategy is no part of the pod template, so changing it restarts nothing.
			WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().WithType(appsv1.OnDeleteStatefulSetStrategyType)).
			WithPersistentVolumeClaimRetentionPolicy(appsv1ac.StatefulSetPersistentVolumeClaimRetentionPolicy().
				WithWhenDeleted(retention).
				WithWhenScaled(retention)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(c))).
			WithTemplate(pod).
			WithVolumeClaimTemplates(dataClaim(c))), nil
}

func dataClaim(c *dolphinv1.MySQLCluster) *corev1ac.PersistentVolumeClaimApplyConfiguration {
	spec := corev1ac.PersistentVolumeClaimSpec().
		WithAccessModes(corev1.ReadWriteOnce).
		WithVolumeMode(corev1.PersistentVolumeFilesystem).
		WithResources(corev1ac.VolumeResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceStorage: *c.Spec.Storage.Size}))
	if c.Spec.Storage.StorageClassName != nil {
		spec.WithStorageClassName(*c.Spec.Storage.StorageClassName)
	}
	// Built without kind, apiVersion and namespace: a claim template carries none of them.
	claim := &corev1ac.PersistentVolumeClaimApplyConfiguration{}
	return claim.WithName(volumeData).WithLabels(SelectorLabels(c)).WithSpec(spec)
}

func podTemplate(c *dolphinv1.MySQLCluster, bo BuildOptions) (*corev1ac.PodTemplateSpecApplyConfiguration, error) {
	o := c.Spec.PodTemplate
	spec := corev1ac.PodSpec().
		WithServiceAccountName(NamesFor(c).ServiceAccount).
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithTerminationGracePeriodSeconds(terminationGracePeriod).
		WithSecurityContext(podSecurityContext(c, ptr.To(corev1.FSGroupChangeOnRootMismatch))).
		WithInitContainers(instanceInitContainers(c, bo)...).
		WithContainers(mysqldContainer(c, bo.generation()), agentContainer(c, bo.generation())).
		WithVolumes(agentVolumes(c)...).
		WithVolumes(
			corev1ac.Volume().WithName(volumeConfig).WithConfigMap(
				corev1ac.ConfigMapVolumeSource().WithName(NamesFor(c).ConfigMap).WithDefaultMode(0o444)),
			corev1ac.Volume().WithName(volumeInstanceConfig).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName(volumeRun).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName(volumeTmp).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		)
	if restoring(c) {
		spec.WithVolumes(restoreVolumes(c)...)
	}
	if c.Spec.TLS.Enabled {
		spec.WithVolumes(tlsVolume(c))
	}
	if externalSourceCA(c) {
		spec.WithVolumes(externalSourceVolume(c))
	}
	if n := nonEmpty(o.NodeSelector); n != nil {
		spec.WithNodeSelector(n)
	}
	if o.PriorityClassName != "" {
		spec.WithPriorityClassName(o.PriorityClassName)
	}
	affinity := o.Affinity
	if affinity == nil {
		affinity = defaultAffinity(c)
	}
	if err := convert(affinity, &spec.Affinity); err != nil {
		return nil, err
	}
	if len(o.Tolerations) > 0 {
		if err := convert(o.Tolerations, &spec.Tolerations); err != nil {
			return nil, err
		}
	}
	if len(o.TopologySpreadConstraints) > 0 {
		if err := convert(o.TopologySpreadConstraints, &spec.TopologySpreadConstraints); err != nil {
			return nil, err
		}
	}
	if err := applyPodOverrides(c, spec); err != nil {
		return nil, err
	}
	withContainerSeccomp(c, spec)
	annotations := mergeLabels(o.Annotations, map[string]string{ConfigHashAnnotation: ConfigHash(c)})
	return corev1ac.PodTemplateSpec().
		WithLabels(mergeLabels(o.Labels, CommonLabels(c))).
		WithAnnotations(annotations).
		WithSpec(spec), nil
}

// defaultAffinity prefers to place instances on different nodes, so one node failure takes
// at most one instance when the cluster has room.
func defaultAffinity(c *dolphinv1.MySQLCluster) *corev1.Affinity {
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				TopologyKey:   corev1.LabelHostname,
				LabelSelector: &metav1.LabelSelector{MatchLabels: SelectorLabels(c)},
			},
		}},
	}}
}

// instanceInitContainers are the init containers of an instance pod: the agent's binary copied
// into the pod, then (before generation 6) the per-instance config written by a container of
// its own, then the seed — which, from generation 6, writes that config itself first.
func instanceInitContainers(c *dolphinv1.MySQLCluster, bo BuildOptions) []*corev1ac.ContainerApplyConfiguration {
	if bo.generation() >= generationSeedConfiguresInstance {
		return []*corev1ac.ContainerApplyConfiguration{agentToolsContainer(bo), seedContainer(c, true)}
	}
	return []*corev1ac.ContainerApplyConfiguration{agentToolsContainer(bo), initContainer(c), seedContainer(c, false)}
}

func initContainer(c *dolphinv1.MySQLCluster) *corev1ac.ContainerApplyConfiguration {
	return corev1ac.Container().
		WithName(ContainerInit).
		WithImage(Image(c)).
		WithCommand("/bin/sh", path.Join(mycnf.ConfigDir, InitShKey)).
		WithEnv(podIdentityEnv()...).
		WithSecurityContext(containerSecurityContext()).
		WithVolumeMounts(volumeMounts()...)
}

func mysqldContainer(c *dolphinv1.MySQLCluster, generation int) *corev1ac.ContainerApplyConfiguration {
	probe := func() *corev1ac.ProbeApplyConfiguration {
		return corev1ac.Probe().WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromString("mysql")))
	}
	probes := probesAt(generation)
	ctr := corev1ac.Container().
		WithName(ContainerMySQLD).
		WithImage(Image(c)).
		WithCommand(serverCommand(c, generation)...).
		WithPorts(corev1ac.ContainerPort().WithName("mysql").WithContainerPort(MySQLPort).WithProtocol(corev1.ProtocolTCP)).
		WithEnv(podIdentityEnv()...).
		WithSecurityContext(containerSecurityContext()).
		WithVolumeMounts(volumeMounts()...).
		WithVolumeMounts(tlsMounts(c)...).
		WithVolumeMounts(externalSourceMounts(c)...).
		WithStartupProbe(probe().WithPeriodSeconds(probes.serverStartupPeriod).WithFailureThreshold(probes.serverStartupFailures)).
		WithReadinessProbe(probe().WithPeriodSeconds(probes.serverReadyPeriod).WithFailureThreshold(probes.serverReadyFailures)).
		WithLivenessProbe(probe().WithPeriodSeconds(10).WithFailureThreshold(6))
	if holdsForSwitchover(c, generation) {
		ctr.WithLifecycle(holdForSwitchoverLifecycle())
	}
	setResources(ctr, &c.Spec.Resources)
	return ctr
}

// ServerCommand is the server container's command for c at the newest template generation
// (what a new cluster's pods run).
func ServerCommand(c *dolphinv1.MySQLCluster) []string { return serverCommand(c, TemplateGeneration) }

// serverCommand starts the server on the generated my.cnf. MariaDB in a cluster of more than
// one instance starts with --init-rpl-role=SLAVE: after a crash it rolls back the tail of its
// binary log that was not committed in the engine, so a crashed primary can rejoin whoever was
// promoted instead of holding transactions nobody else has. Acknowledged writes in that tail
// are on a replica (semi-sync), and the topology engine then promotes that replica rather than
// the restarted server (docs/design/0011). A single instance has no replica to hold them, so it
// never rolls back; MySQL has no such option.
//
// From template generation 7 the same servers start refusing application logins until the
// topology engine confirms their role (mycnf.StartupLoginRefusal). A cluster that configures
// init_connect (spec.mysqlConfig) gets its value back from the engine's run-time settings
// once the server is observed; the argument does not depend on the spec, so changing that
// setting still restarts nothing.
//
// From template generation 2 the same servers run under crashOnStop (docs/design/0038): their
// container's stop kills the server instead of shutting it down cleanly, because a clean
// shutdown commits what waits for a semi-sync acknowledgement.
func serverCommand(c *dolphinv1.MySQLCluster, generation int) []string {
	f := c.Spec.Engine.Flavor
	cmd := []string{serverBinary(f), "--defaults-file=" + path.Join(mycnf.ConfigDir, MyCnfKey)}
	rollsBack := f != dolphinv1.FlavorMySQL && c.Spec.Instances > 1
	if rollsBack {
		cmd = append(cmd, "--init-rpl-role=SLAVE")
	}
	if rollsBack && generation >= generationStartupRefusal {
		cmd = append(cmd, "--init-connect="+mycnf.StartupLoginRefusal)
	}
	if c.Spec.TLS.Enabled {
		cmd = append(cmd, tlsArgs()...)
	}
	switch {
	case rollsBack && generation >= generationCrashOnStopStatus:
		cmd = append([]string{"/bin/sh", "-c", crashOnStop, "crash-on-stop"}, cmd...)
	case rollsBack && generation >= generationCrashOnStop:
		cmd = append([]string{"/bin/sh", "-c", crashOnStopGeneration2, "crash-on-stop"}, cmd...)
	}
	return cmd
}

// tlsMounts mounts the certificate into the server's container when TLS is on.
func tlsMounts(c *dolphinv1.MySQLCluster) []*corev1ac.VolumeMountApplyConfiguration {
	if !c.Spec.TLS.Enabled {
		return nil
	}
	return []*corev1ac.VolumeMountApplyConfiguration{corev1ac.VolumeMount().WithName(volumeTLS).WithMountPath(TLSDir).WithReadOnly(true)}
}

// containerSecurityContext meets the Pod Security Standard "restricted".
func containerSecurityContext() *corev1ac.SecurityContextApplyConfiguration {
	return corev1ac.SecurityContext().
		WithRunAsNonRoot(true).
		WithAllowPrivilegeEscalation(false).
		WithReadOnlyRootFilesystem(true).
		WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")).
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))
}

func podIdentityEnv() []*corev1ac.EnvVarApplyConfiguration {
	field := func(name, path string) *corev1ac.EnvVarApplyConfiguration {
		return corev1ac.EnvVar().WithName(name).WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath(path)))
	}
	return []*corev1ac.EnvVarApplyConfiguration{
		field("POD_NAME", "metadata.name"),
		field("POD_NAMESPACE", "metadata.namespace"),
		field("POD_IP", "status.podIP"),
	}
}

func volumeMounts() []*corev1ac.VolumeMountApplyConfiguration {
	m := func(name, at string, ro bool) *corev1ac.VolumeMountApplyConfiguration {
		vm := corev1ac.VolumeMount().WithName(name).WithMountPath(at)
		if ro {
			vm.WithReadOnly(true)
		}
		return vm
	}
	return []*corev1ac.VolumeMountApplyConfiguration{
		m(volumeData, mycnf.DataDir, false),
		m(volumeConfig, mycnf.ConfigDir, true),
		m(volumeInstanceConfig, path.Dir(mycnf.InstanceConfigFile), false),
		m(volumeRun, path.Dir(mycnf.SocketPath), false),
		m(volumeTmp, "/tmp", false),
	}
}

// convert copies a typed API value into its apply configuration. Apply configurations carry
// the same JSON field names as the types, so a JSON round trip is exact.
func convert(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encoding %T: %w", in, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decoding into %T: %w", out, err)
	}
	return nil
}

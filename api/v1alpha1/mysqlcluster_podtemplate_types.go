package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// PodTemplateOverrides adds scheduling constraints, metadata, identity, security settings,
// volumes and containers to the instance pods, merged with what Dolphin sets.
// +kubebuilder:validation:XValidation:rule="!has(self.labels) || self.labels.all(k, !k.startsWith('app.kubernetes.io/') && !k.startsWith('mysql.dolphin.dev/'))",message="pod labels under app.kubernetes.io/ and mysql.dolphin.dev/ are set by Dolphin (Services select on them): use another key"
type PodTemplateOverrides struct {
	// Labels added to every instance pod.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Annotations added to every instance pod.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// NodeSelector constrains the instance pods to nodes with these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Affinity of the instance pods. When empty, Dolphin prefers to spread instances over
	// different nodes.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// Tolerations of the instance pods.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// TopologySpreadConstraints of the instance pods.
	// +optional
	// +listType=atomic
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// PriorityClassName of the instance pods.
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// ImagePullSecrets name Secrets in the cluster's namespace to pull the images with (a
	// private registry or mirror).
	// +optional
	// +listType=atomic
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// ImagePullPolicy of every container of the instance pods (default: the Kubernetes
	// default for the tag).
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// ServiceAccountName runs the instance pods as this service account of the cluster's
	// namespace instead of the one Dolphin creates: for IAM roles for service accounts or
	// workload identity (an S3 store without credentialsSecret), or a policy that requires
	// one. Dolphin's pods need no Kubernetes API access: its token is not mounted.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// Env adds environment variables to the server container (mysqld). Names Dolphin sets
	// are refused.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(e, !(e.name in ['POD_NAME', 'POD_NAMESPACE', 'POD_IP']))",message="podTemplate.env: POD_NAME, POD_NAMESPACE and POD_IP are set by Dolphin: use another name"
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []corev1.EnvVar `json:"env,omitempty"`

	// AgentResources are the resources of Dolphin's agent container and of its short init
	// containers (copying its binary, preparing the configuration); once it is set, the seed
	// init container (restore, clone) takes spec.resources, as the server does, so every
	// container has resources. Set requests equal to limits
	// here and in spec.resources for the Guaranteed QoS class, or to satisfy a quota that
	// requires limits.
	// +optional
	AgentResources *corev1.ResourceRequirements `json:"agentResources,omitempty"`

	// Volumes are added to the instance pods, beside Dolphin's own (whose names are refused):
	// a ConfigMap, a Secret, an emptyDir or a PersistentVolumeClaim, for the server's plugins
	// or files, or for sidecars.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(v, !(v.name in ['data', 'config', 'instance-config', 'run', 'tmp', 'dolphin-bin', 'agent-secret', 'restore-ca', 'store-client', 'tls']))",message="podTemplate.volumes: data, config, instance-config, run, tmp, dolphin-bin, agent-secret, restore-ca, store-client and tls are Dolphin's volumes: use another name"
	// +optional
	// +listType=map
	// +listMapKey=name
	Volumes []ExtraVolume `json:"volumes,omitempty"`

	// VolumeMounts are added to the server container (mysqld), beside Dolphin's own: mount
	// spec.podTemplate.volumes there (not over /var/lib/mysql, /etc/mysql or /run/mysqld).
	// +kubebuilder:validation:MaxItems=16
	// +optional
	// +listType=atomic
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`

	// Sidecars are containers added to the instance pods after Dolphin's (an exporter, a log
	// shipper). They run as the pod's user (999 unless securityContext says otherwise,
	// non-root) with its security context.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(c, !(c.name in ['mysqld', 'agent', 'dolphin-tools', 'init', 'seed']))",message="podTemplate.sidecars: mysqld, agent, dolphin-tools, init and seed are Dolphin's containers: use another name"
	// +optional
	// +listType=map
	// +listMapKey=name
	Sidecars []ExtraContainer `json:"sidecars,omitempty"`

	// InitContainers run after Dolphin's own init containers, before the server starts.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(c, !(c.name in ['mysqld', 'agent', 'dolphin-tools', 'init', 'seed']))",message="podTemplate.initContainers: mysqld, agent, dolphin-tools, init and seed are Dolphin's containers: use another name"
	// +optional
	// +listType=map
	// +listMapKey=name
	InitContainers []ExtraContainer `json:"initContainers,omitempty"`

	// SecurityContext replaces parts of the security context Dolphin gives the instance pods
	// and the pods it runs beside them (binlog archiver, backup verification). Dolphin's
	// defaults meet the Pod Security Standard "restricted": user and group 999 (the mysql
	// user of the images), fsGroup 999, the RuntimeDefault seccomp profile; every container
	// runs non-root, without privilege escalation or capabilities, on a read-only root file
	// system, and those container settings cannot be loosened. Set the user and groups a
	// platform assigns (OpenShift: the namespace's openshift.io/sa.scc.uid-range), a seccomp
	// profile of your own, or SELinux labels. runAsUser, runAsGroup and fsGroup are fixed
	// when the cluster is created.
	// +optional
	SecurityContext *PodSecurity `json:"securityContext,omitempty"`
}

// PodSecurity is the part of a pod's security context a cluster may set. A field left empty
// keeps Dolphin's default.
type PodSecurity struct {
	// RunAsUser is the uid every container runs as (default 999). Root (0) is refused.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	// +optional
	RunAsUser *int64 `json:"runAsUser,omitempty"`
	// RunAsGroup is the primary gid of every container (default 999; 0, the root group, is
	// allowed: OpenShift's images expect it).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	// +optional
	RunAsGroup *int64 `json:"runAsGroup,omitempty"`
	// FSGroup owns the data volume and may write it (default 999).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	// +optional
	FSGroup *int64 `json:"fsGroup,omitempty"`
	// FSGroupChangePolicy says when the kubelet re-owns the volumes for fsGroup (default
	// OnRootMismatch: only when the volume's root does not already belong to it).
	// +kubebuilder:validation:Enum=OnRootMismatch;Always
	// +optional
	FSGroupChangePolicy *corev1.PodFSGroupChangePolicy `json:"fsGroupChangePolicy,omitempty"`
	// SupplementalGroups are added to every container's groups (a shared volume's group).
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Minimum=0
	// +kubebuilder:validation:items:Maximum=2147483647
	// +optional
	// +listType=atomic
	SupplementalGroups []int64 `json:"supplementalGroups,omitempty"`
	// SeccompProfile of the pod and of every container (default RuntimeDefault). Unconfined
	// is refused.
	// +kubebuilder:validation:XValidation:rule="self.type in ['RuntimeDefault', 'Localhost'] && (self.type == 'Localhost') == has(self.localhostProfile)",message="podTemplate.securityContext.seccompProfile: use type RuntimeDefault, or Localhost with localhostProfile (Unconfined is refused)"
	// +optional
	SeccompProfile *corev1.SeccompProfile `json:"seccompProfile,omitempty"`
	// SELinuxOptions label the pod's processes and volumes.
	// +optional
	SELinuxOptions *corev1.SELinuxOptions `json:"seLinuxOptions,omitempty"`
}

// ExtraVolume is a volume added to the instance pods. Set exactly one source.
// +kubebuilder:validation:XValidation:rule="[has(self.configMap), has(self.secret), has(self.emptyDir), has(self.persistentVolumeClaim)].filter(x, x).size() == 1",message="a pod template volume needs exactly one of configMap, secret, emptyDir and persistentVolumeClaim"
type ExtraVolume struct {
	// Name of the volume, unique in the pod.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`
	// ConfigMap mounts a ConfigMap of the cluster's namespace.
	// +optional
	ConfigMap *corev1.ConfigMapVolumeSource `json:"configMap,omitempty"`
	// Secret mounts a Secret of the cluster's namespace.
	// +optional
	Secret *corev1.SecretVolumeSource `json:"secret,omitempty"`
	// EmptyDir is a scratch directory that lives as long as the pod.
	// +optional
	EmptyDir *corev1.EmptyDirVolumeSource `json:"emptyDir,omitempty"`
	// PersistentVolumeClaim mounts an existing claim of the cluster's namespace.
	// +optional
	PersistentVolumeClaim *corev1.PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty"`
}

// ExtraContainer is a container added to the instance pods (a sidecar or an init container):
// the parts of a Kubernetes container such a helper needs.
type ExtraContainer struct {
	// Name of the container, unique in the pod.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`
	// Image of the container.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +required
	Image string `json:"image"`
	// Command replaces the image's entrypoint.
	// +optional
	// +listType=atomic
	Command []string `json:"command,omitempty"`
	// Args are the command's arguments.
	// +optional
	// +listType=atomic
	Args []string `json:"args,omitempty"`
	// Env of the container.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []corev1.EnvVar `json:"env,omitempty"`
	// Ports the container listens on.
	// +optional
	// +listType=atomic
	Ports []corev1.ContainerPort `json:"ports,omitempty"`
	// Resources of the container.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// VolumeMounts of the container: spec.podTemplate.volumes, or Dolphin's run directory
	// (run, /run/mysqld: the server's socket) read-only.
	// +optional
	// +listType=atomic
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`
}

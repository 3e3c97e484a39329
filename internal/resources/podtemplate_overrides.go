package resources

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// ReservedEnvNames are the environment variables Dolphin sets in the server container;
// spec.podTemplate.env may not set them.
var ReservedEnvNames = []string{"POD_NAME", "POD_NAMESPACE", "POD_IP"}

// applyPodOverrides adds the parts of spec.podTemplate that reach the pod spec and its
// containers (merged: never replacing what Dolphin sets): pull secrets and policy, the
// service account, the server's extra environment, and resources for Dolphin's own
// containers. Nothing is added for a field left empty, so a template without them is the
// same as before they existed (no pod restarts on an operator upgrade).
func applyPodOverrides(c *dolphinv1.MySQLCluster, spec *corev1ac.PodSpecApplyConfiguration) error {
	o := c.Spec.PodTemplate
	for _, s := range o.ImagePullSecrets {
		spec.WithImagePullSecrets(corev1ac.LocalObjectReference().WithName(s.Name))
	}
	if o.ServiceAccountName != "" {
		spec.WithServiceAccountName(o.ServiceAccountName)
	}
	for _, v := range o.Volumes {
		vol := corev1ac.Volume().WithName(v.Name)
		var err error
		switch {
		case v.ConfigMap != nil:
			vol.ConfigMap = &corev1ac.ConfigMapVolumeSourceApplyConfiguration{}
			err = convert(v.ConfigMap, vol.ConfigMap)
		case v.Secret != nil:
			vol.Secret = &corev1ac.SecretVolumeSourceApplyConfiguration{}
			err = convert(v.Secret, vol.Secret)
		case v.EmptyDir != nil:
			vol.EmptyDir = &corev1ac.EmptyDirVolumeSourceApplyConfiguration{}
			err = convert(v.EmptyDir, vol.EmptyDir)
		case v.PersistentVolumeClaim != nil:
			vol.PersistentVolumeClaim = &corev1ac.PersistentVolumeClaimVolumeSourceApplyConfiguration{}
			err = convert(v.PersistentVolumeClaim, vol.PersistentVolumeClaim)
		}
		if err != nil {
			return err
		}
		spec.WithVolumes(vol)
	}
	for _, list := range []struct {
		from []dolphinv1.ExtraContainer
		add  func(...*corev1ac.ContainerApplyConfiguration) *corev1ac.PodSpecApplyConfiguration
	}{{o.InitContainers, spec.WithInitContainers}, {o.Sidecars, spec.WithContainers}} {
		for _, x := range list.from {
			ctr, err := extraContainer(x)
			if err != nil {
				return err
			}
			list.add(ctr)
		}
	}
	containers := func(each func(*corev1ac.ContainerApplyConfiguration) error) error {
		for i := range spec.InitContainers {
			if err := each(&spec.InitContainers[i]); err != nil {
				return err
			}
		}
		for i := range spec.Containers {
			if err := each(&spec.Containers[i]); err != nil {
				return err
			}
		}
		return nil
	}
	return containers(func(ctr *corev1ac.ContainerApplyConfiguration) error {
		if o.ImagePullPolicy != "" {
			ctr.WithImagePullPolicy(o.ImagePullPolicy)
		}
		name := ""
		if ctr.Name != nil {
			name = *ctr.Name
		}
		switch name {
		case ContainerMySQLD:
			for _, m := range o.VolumeMounts {
				var ac corev1ac.VolumeMountApplyConfiguration
				if err := convert(m, &ac); err != nil {
					return err
				}
				ctr.WithVolumeMounts(&ac)
			}
			for _, e := range o.Env {
				if slices.Contains(ReservedEnvNames, e.Name) {
					return fmt.Errorf("spec.podTemplate.env: %s is set by Dolphin", e.Name)
				}
				var ac corev1ac.EnvVarApplyConfiguration
				if err := convert(e, &ac); err != nil {
					return err
				}
				ctr.WithEnv(&ac)
			}
		case ContainerSeed:
			// Restoring and cloning prepare data as the server does: the server's resources —
			// once agentResources asks for resources on every container (a template that
			// did not ask stays as it was: an operator upgrade restarts nothing).
			if o.AgentResources != nil {
				setResources(ctr, &c.Spec.Resources)
			}
		case ContainerAgent, ContainerAgentTools, ContainerInit:
			setResources(ctr, o.AgentResources)
		}
		return nil
	})
}

// withPodIdentity gives a pod Dolphin runs for a cluster besides its instances (the binlog
// archiver, a backup's verification) the cluster's service account and pull secrets, when
// spec.podTemplate names them: they reach the same store and pull the same images.
func withPodIdentity(c *dolphinv1.MySQLCluster, spec *corev1ac.PodSpecApplyConfiguration) *corev1ac.PodSpecApplyConfiguration {
	o := c.Spec.PodTemplate
	if o.ServiceAccountName != "" {
		spec.WithServiceAccountName(o.ServiceAccountName)
	}
	for _, s := range o.ImagePullSecrets {
		spec.WithImagePullSecrets(corev1ac.LocalObjectReference().WithName(s.Name))
	}
	return spec
}

// extraContainer builds a sidecar or an init container of spec.podTemplate, with the
// security context of Dolphin's own containers (non-root, no privilege escalation, no
// capabilities, read-only root file system) and the template's pull policy.
func extraContainer(x dolphinv1.ExtraContainer) (*corev1ac.ContainerApplyConfiguration, error) {
	ctr := corev1ac.Container().WithName(x.Name).WithImage(x.Image).WithSecurityContext(containerSecurityContext())
	if len(x.Command) > 0 {
		ctr.WithCommand(x.Command...)
	}
	if len(x.Args) > 0 {
		ctr.WithArgs(x.Args...)
	}
	for _, part := range []struct {
		from any
		to   any
		set  bool
	}{{x.Env, &ctr.Env, len(x.Env) > 0}, {x.Ports, &ctr.Ports, len(x.Ports) > 0}, {x.VolumeMounts, &ctr.VolumeMounts, len(x.VolumeMounts) > 0}} {
		if part.set {
			if err := convert(part.from, part.to); err != nil {
				return nil, err
			}
		}
	}
	setResources(ctr, x.Resources)
	return ctr, nil
}

// setResources gives ctr r's requests and limits, when r sets any.
func setResources(ctr *corev1ac.ContainerApplyConfiguration, r *corev1.ResourceRequirements) {
	if r == nil || (len(r.Requests) == 0 && len(r.Limits) == 0) {
		return
	}
	res := corev1ac.ResourceRequirements()
	if len(r.Requests) > 0 {
		res.WithRequests(r.Requests)
	}
	if len(r.Limits) > 0 {
		res.WithLimits(r.Limits)
	}
	ctr.WithResources(res)
}

// podSecurityContext is the security context of the pods Dolphin runs for c (instances,
// binlog archiver, backup verification): Dolphin's defaults, which meet the Pod Security
// Standard "restricted", with the fields spec.podTemplate.securityContext sets in their place.
// defaultPolicy is the fsGroup change policy when the cluster names none (nil: the kubelet's).
func podSecurityContext(c *dolphinv1.MySQLCluster, defaultPolicy *corev1.PodFSGroupChangePolicy) *corev1ac.PodSecurityContextApplyConfiguration {
	uid, gid, fsGroup := int64(mysqlUID), int64(mysqlUID), int64(mysqlUID)
	policy := defaultPolicy
	seccomp := corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault)
	ctx := corev1ac.PodSecurityContext()
	if s := c.Spec.PodTemplate.SecurityContext; s != nil {
		uid, gid, fsGroup = ptr.Deref(s.RunAsUser, uid), ptr.Deref(s.RunAsGroup, gid), ptr.Deref(s.FSGroup, fsGroup)
		if s.FSGroupChangePolicy != nil {
			policy = s.FSGroupChangePolicy
		}
		if s.SeccompProfile != nil {
			seccomp = seccompProfile(s.SeccompProfile)
		}
		if len(s.SupplementalGroups) > 0 {
			ctx.WithSupplementalGroups(s.SupplementalGroups...)
		}
		if s.SELinuxOptions != nil {
			// Only the fields set: an empty string would be dropped by the API server, and
			// the applied template would then never equal the stored one.
			var se corev1ac.SELinuxOptionsApplyConfiguration
			_ = convert(s.SELinuxOptions, &se) // plain strings: cannot fail
			ctx.WithSELinuxOptions(&se)
		}
	}
	if policy != nil {
		ctx.WithFSGroupChangePolicy(*policy)
	}
	return ctx.WithRunAsNonRoot(true).WithRunAsUser(uid).WithRunAsGroup(gid).WithFSGroup(fsGroup).WithSeccompProfile(seccomp)
}

// withContainerSeccomp gives every container of spec the seccomp profile
// spec.podTemplate.securityContext names (a container's own profile would override the pod's).
func withContainerSeccomp(c *dolphinv1.MySQLCluster, spec *corev1ac.PodSpecApplyConfiguration) *corev1ac.PodSpecApplyConfiguration {
	s := c.Spec.PodTemplate.SecurityContext
	if s == nil || s.SeccompProfile == nil {
		return spec
	}
	for _, list := range [][]corev1ac.ContainerApplyConfiguration{spec.InitContainers, spec.Containers} {
		for i := range list {
			if list[i].SecurityContext == nil {
				list[i].WithSecurityContext(containerSecurityContext())
			}
			list[i].SecurityContext.WithSeccompProfile(seccompProfile(s.SeccompProfile))
		}
	}
	return spec
}

func seccompProfile(p *corev1.SeccompProfile) *corev1ac.SeccompProfileApplyConfiguration {
	ac := corev1ac.SeccompProfile().WithType(p.Type)
	if p.LocalhostProfile != nil {
		ac.WithLocalhostProfile(*p.LocalhostProfile)
	}
	return ac
}

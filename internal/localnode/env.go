package localnode

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// containerEnv returns the container's environment as KEY=VALUE, in order:
// envFrom, then env (later wins, $(VAR) references expanded), with PATH and
// HOSTNAME defaulted. The pod must have its IP in status already.
func containerEnv(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, c *corev1.Container) ([]string, map[string]string, error) {
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	set("PATH", hostPath)
	set("HOSTNAME", podHostname(pod))
	for _, from := range c.EnvFrom {
		data, err := envFromData(ctx, client, pod.Namespace, from)
		if err != nil {
			return nil, nil, fmt.Errorf("container %q envFrom: %w", c.Name, err)
		}
		for k, v := range data {
			set(from.Prefix+k, v)
		}
	}
	for _, e := range c.Env {
		v := expandArgs([]string{e.Value}, vals)[0]
		if e.ValueFrom != nil {
			var err error
			if v, err = envValueFrom(ctx, client, pod, e.ValueFrom); err != nil {
				return nil, nil, fmt.Errorf("container %q env %s: %w", c.Name, e.Name, err)
			}
		}
		set(e.Name, v)
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vals[k])
	}
	return env, vals, nil
}

func envFromData(ctx context.Context, client kubernetes.Interface, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			if isOptional(from.ConfigMapRef.Optional) {
				return nil, nil
			}
			return nil, fmt.Errorf("configMap %s: %w", from.ConfigMapRef.Name, err)
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		s, err := client.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			if isOptional(from.SecretRef.Optional) {
				return nil, nil
			}
			return nil, fmt.Errorf("secret %s: %w", from.SecretRef.Name, err)
		}
		out := make(map[string]string, len(s.Data))
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	return nil, nil
}

func isOptional(b *bool) bool { return b != nil && *b }

func envValueFrom(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, src *corev1.EnvVarSource) (string, error) {
	switch {
	case src.FieldRef != nil:
		return fieldValue(pod, src.FieldRef.FieldPath)
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if isOptional(ref.Optional) {
				return "", nil
			}
			return "", fmt.Errorf("configMap %s: %w", ref.Name, err)
		}
		v, ok := cm.Data[ref.Key]
		if !ok && !isOptional(ref.Optional) {
			return "", fmt.Errorf("configMap %s has no key %q", ref.Name, ref.Key)
		}
		return v, nil
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if isOptional(ref.Optional) {
				return "", nil
			}
			return "", fmt.Errorf("secret %s: %w", ref.Name, err)
		}
		v, ok := s.Data[ref.Key]
		if !ok && !isOptional(ref.Optional) {
			return "", fmt.Errorf("secret %s has no key %q", ref.Name, ref.Key)
		}
		return string(v), nil
	case src.ResourceFieldRef != nil:
		return "", fmt.Errorf("resourceFieldRef is not supported by the local node")
	}
	return "", nil
}

// fieldValue resolves a downward-API field path of pod.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.podIPs":
		ips := make([]string, len(pod.Status.PodIPs))
		for i, p := range pod.Status.PodIPs {
			ips[i] = p.IP
		}
		return strings.Join(ips, ","), nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "status.hostIPs":
		ips := make([]string, len(pod.Status.HostIPs))
		for i, p := range pod.Status.HostIPs {
			ips[i] = p.IP
		}
		return strings.Join(ips, ","), nil
	}
	return "", fmt.Errorf("field path %q is not supported", path)
}

// subscript parses `prefix['key']`.
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}
	return strings.TrimSuffix(rest, "']"), true
}

// formatMap renders labels or annotations as the downward API does:
// key="value" lines, sorted.
func formatMap(m map[string]string) string {
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%s=%q", k, v))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// podHostname is the pod's host name, as the kubelet sets it.
func podHostname(pod *corev1.Pod) string {
	if pod.Spec.Hostname != "" {
		return pod.Spec.Hostname
	}
	if len(pod.Name) > 63 {
		return strings.TrimRight(pod.Name[:63], "-.")
	}
	return pod.Name
}

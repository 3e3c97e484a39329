package resources

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// HeadlessService gives every instance a stable DNS name
// (`<pod>.<cluster>-instances.<namespace>.svc`). It publishes not-ready pods because
// instances must find each other while they bootstrap replication.
func HeadlessService(c *dolphinv1.MySQLCluster) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(NamesFor(c).HeadlessService, c.Namespace).
		WithLabels(CommonLabels(c)).
		WithOwnerReferences(ownerReference(c)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithClusterIP(corev1.ClusterIPNone).
			WithPublishNotReadyAddresses(true).
			WithSelector(SelectorLabels(c)).
			WithPorts(mysqlServicePort()))
}

// PrimaryService points at the one writable instance. Until the topology engine names a
// primary it selects the pod labeled `mysql.dolphin.dev/role=primary` (none, in a new
// cluster); from then on the topology reporter owns its selector and points it at the
// primary's pod by name (PrimaryPodSelector), so the builder leaves the selector out when
// topologyOwnsSelector is true.
func PrimaryService(c *dolphinv1.MySQLCluster, topologyOwnsSelector bool) *corev1ac.ServiceApplyConfiguration {
	svc := clientService(c, NamesFor(c).PrimaryService, c.Spec.PrimaryService, dolphinv1.RolePrimary)
	if topologyOwnsSelector {
		svc.Spec.Selector = nil
	}
	return svc
}

// ReplicaService load-balances read-only connections over the ready replicas.
func ReplicaService(c *dolphinv1.MySQLCluster) *corev1ac.ServiceApplyConfiguration {
	return clientService(c, NamesFor(c).ReplicaService, c.Spec.ReplicaService.ServiceSpec, dolphinv1.RoleReplica)
}

func clientService(c *dolphinv1.MySQLCluster, name string, spec dolphinv1.ServiceSpec, role dolphinv1.InstanceRole) *corev1ac.ServiceApplyConfiguration {
	svc := corev1ac.Service(name, c.Namespace).
		WithLabels(mergeLabels(spec.Labels, CommonLabels(c))).
		WithOwnerReferences(ownerReference(c)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(spec.Type).
			WithSelector(RoleSelector(c, role)).
			WithPorts(mysqlServicePort()))
	if a := nonEmpty(spec.Annotations); a != nil {
		svc.WithAnnotations(a)
	}
	return svc
}

func mysqlServicePort() *corev1ac.ServicePortApplyConfiguration {
	return corev1ac.ServicePort().
		WithName("mysql").
		WithProtocol(corev1.ProtocolTCP).
		WithPort(MySQLPort).
		WithTargetPort(intstr.FromString("mysql"))
}

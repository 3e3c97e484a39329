package resources

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// Defaults mirrored from the CRD's `+kubebuilder:default` markers. The API server applies
// them on create; Defaulted applies the same values to objects that did not pass through it
// (unit tests, objects read from an older CRD). An envtest test checks the two agree.
const (
	DefaultInstances         = 3
	DefaultFlavor            = dolphinv1.FlavorMariaDB
	DefaultVersion           = "10.11"
	DefaultStorageSize       = "1Gi"
	DefaultDetectionInterval = time.Second
	DefaultDetectionAttempts = 3
	// DefaultMaxReplicaLagSeconds is spec.replicaService.maxLagSeconds's default (MOCO's
	// maxDelaySeconds has the same).
	DefaultMaxReplicaLagSeconds int32 = 60
)

// Defaulted returns a copy of c with every unset defaulted field filled in.
func Defaulted(c *dolphinv1.MySQLCluster) *dolphinv1.MySQLCluster {
	c = c.DeepCopy()
	s := &c.Spec
	if s.Instances == 0 {
		s.Instances = DefaultInstances
	}
	if s.Engine.Flavor == "" {
		s.Engine.Flavor = DefaultFlavor
	}
	if s.Engine.Version == "" {
		s.Engine.Version = DefaultVersion
	}
	if s.Storage.Size == nil {
		s.Storage.Size = ptr.To(resource.MustParse(DefaultStorageSize))
	}
	if s.Storage.DeletePolicy == "" {
		s.Storage.DeletePolicy = dolphinv1.VolumeRetain
	}
	for _, svc := range []*dolphinv1.ServiceSpec{&s.PrimaryService, &s.ReplicaService.ServiceSpec} {
		if svc.Type == "" {
			svc.Type = "ClusterIP"
		}
	}
	if s.ReplicaService.MaxLagSeconds == nil {
		s.ReplicaService.MaxLagSeconds = ptr.To(DefaultMaxReplicaLagSeconds)
	}
	if s.Failover.Enabled == nil {
		s.Failover.Enabled = ptr.To(true)
	}
	if s.Durability == "" {
		s.Durability = dolphinv1.DurabilityRequired
	}
	if s.Failover.Detection.Interval == nil {
		s.Failover.Detection.Interval = &metav1.Duration{Duration: DefaultDetectionInterval}
	}
	if s.Failover.ErrantFormerPrimary == "" {
		s.Failover.ErrantFormerPrimary = dolphinv1.ErrantFormerPrimaryHold
	}
	if s.Failover.Detection.Attempts == 0 {
		s.Failover.Detection.Attempts = DefaultDetectionAttempts
	}
	return c
}

// Image is the database server image of a cluster: spec.engine.image, or the official image
// of the flavor at the requested version.
func Image(c *dolphinv1.MySQLCluster) string {
	if c.Spec.Engine.Image != "" {
		return c.Spec.Engine.Image
	}
	return "docker.io/library/" + string(c.Spec.Engine.Flavor) + ":" + c.Spec.Engine.Version
}

// serverBinary is the server executable of a flavor inside its official image.
func serverBinary(f dolphinv1.Flavor) string {
	if f == dolphinv1.FlavorMySQL {
		return "mysqld"
	}
	return "mariadbd"
}

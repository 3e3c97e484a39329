package v1alpha1

import (
	"fmt"

	apiconversion "k8s.io/apimachinery/pkg/conversion"
	"sigs.k8s.io/controller-runtime/pkg/conversion"

	"github.com/dolphin-operator/dolphin/api/v1beta1"
)

// Conversion to and from the hub (v1beta1). conversion-gen writes the field-by-field code
// (zz_generated.conversion.go) and refuses to convert a type whose fields differ until a
// function below says how; the round-trip fuzz test (conversion_test.go) proves that every
// field survives v1alpha1 → v1beta1 → v1alpha1 and the reverse.
//
// What moved between the versions:
//   - spec.replicas is spec.instances;
//   - spec.failover.detectionInterval and detectionAttempts are
//     spec.failover.detection.interval and attempts.
//
// Every v1alpha1 field has a v1beta1 home and the reverse, so no conversion needs to keep
// anything in annotations.

// Convert_v1alpha1_MySQLClusterSpec_To_v1beta1_MySQLClusterSpec renames replicas to instances.
func Convert_v1alpha1_MySQLClusterSpec_To_v1beta1_MySQLClusterSpec(in *MySQLClusterSpec, out *v1beta1.MySQLClusterSpec, s apiconversion.Scope) error {
	if err := autoConvert_v1alpha1_MySQLClusterSpec_To_v1beta1_MySQLClusterSpec(in, out, s); err != nil {
		return err
	}
	out.Instances = in.Replicas
	return nil
}

// Convert_v1beta1_MySQLClusterSpec_To_v1alpha1_MySQLClusterSpec renames instances to replicas.
func Convert_v1beta1_MySQLClusterSpec_To_v1alpha1_MySQLClusterSpec(in *v1beta1.MySQLClusterSpec, out *MySQLClusterSpec, s apiconversion.Scope) error {
	if err := autoConvert_v1beta1_MySQLClusterSpec_To_v1alpha1_MySQLClusterSpec(in, out, s); err != nil {
		return err
	}
	out.Replicas = in.Instances
	return nil
}

// Convert_v1alpha1_FailoverSpec_To_v1beta1_FailoverSpec moves the detection settings into
// failover.detection.
func Convert_v1alpha1_FailoverSpec_To_v1beta1_FailoverSpec(in *FailoverSpec, out *v1beta1.FailoverSpec, s apiconversion.Scope) error {
	if err := autoConvert_v1alpha1_FailoverSpec_To_v1beta1_FailoverSpec(in, out, s); err != nil {
		return err
	}
	out.Detection = v1beta1.DetectionSpec{Interval: in.DetectionInterval, Attempts: in.DetectionAttempts}
	return nil
}

// Convert_v1beta1_FailoverSpec_To_v1alpha1_FailoverSpec moves failover.detection back to the
// flat v1alpha1 fields.
func Convert_v1beta1_FailoverSpec_To_v1alpha1_FailoverSpec(in *v1beta1.FailoverSpec, out *FailoverSpec, s apiconversion.Scope) error {
	if err := autoConvert_v1beta1_FailoverSpec_To_v1alpha1_FailoverSpec(in, out, s); err != nil {
		return err
	}
	out.DetectionInterval, out.DetectionAttempts = in.Detection.Interval, in.Detection.Attempts
	return nil
}

// hubOf asserts that hub is the v1beta1 type T (the conversion webhook only ever passes the
// hub of the same kind).
func hubOf[T conversion.Hub](hub conversion.Hub) (T, error) {
	h, ok := hub.(T)
	if !ok {
		var want T
		return want, fmt.Errorf("cannot convert between %T and %T", hub, want)
	}
	return h, nil
}

// ConvertTo converts this MySQLCluster to the hub version (v1beta1).
func (src *MySQLCluster) ConvertTo(hub conversion.Hub) error {
	dst, err := hubOf[*v1beta1.MySQLCluster](hub)
	if err != nil {
		return err
	}
	return Convert_v1alpha1_MySQLCluster_To_v1beta1_MySQLCluster(src.DeepCopy(), dst, nil)
}

// ConvertFrom converts the hub version (v1beta1) to this MySQLCluster.
func (dst *MySQLCluster) ConvertFrom(hub conversion.Hub) error {
	src, err := hubOf[*v1beta1.MySQLCluster](hub)
	if err != nil {
		return err
	}
	return Convert_v1beta1_MySQLCluster_To_v1alpha1_MySQLCluster(src.DeepCopy(), dst, nil)
}

// ConvertTo converts this MySQLBackup to the hub version (v1beta1).
func (src *MySQLBackup) ConvertTo(hub conversion.Hub) error {
	dst, err := hubOf[*v1beta1.MySQLBackup](hub)
	if err != nil {
		return err
	}
	return Convert_v1alpha1_MySQLBackup_To_v1beta1_MySQLBackup(src.DeepCopy(), dst, nil)
}

// ConvertFrom converts the hub version (v1beta1) to this MySQLBackup.
func (dst *MySQLBackup) ConvertFrom(hub conversion.Hub) error {
	src, err := hubOf[*v1beta1.MySQLBackup](hub)
	if err != nil {
		return err
	}
	return Convert_v1beta1_MySQLBackup_To_v1alpha1_MySQLBackup(src.DeepCopy(), dst, nil)
}

// ConvertTo converts this MySQLUser to the hub version (v1beta1).
func (src *MySQLUser) ConvertTo(hub conversion.Hub) error {
	dst, err := hubOf[*v1beta1.MySQLUser](hub)
	if err != nil {
		return err
	}
	return Convert_v1alpha1_MySQLUser_To_v1beta1_MySQLUser(src.DeepCopy(), dst, nil)
}

// ConvertFrom converts the hub version (v1beta1) to this MySQLUser.
func (dst *MySQLUser) ConvertFrom(hub conversion.Hub) error {
	src, err := hubOf[*v1beta1.MySQLUser](hub)
	if err != nil {
		return err
	}
	return Convert_v1beta1_MySQLUser_To_v1alpha1_MySQLUser(src.DeepCopy(), dst, nil)
}

// ConvertTo converts this MySQLDatabase to the hub version (v1beta1).
func (src *MySQLDatabase) ConvertTo(hub conversion.Hub) error {
	dst, err := hubOf[*v1beta1.MySQLDatabase](hub)
	if err != nil {
		return err
	}
	return Convert_v1alpha1_MySQLDatabase_To_v1beta1_MySQLDatabase(src.DeepCopy(), dst, nil)
}

// ConvertFrom converts the hub version (v1beta1) to this MySQLDatabase.
func (dst *MySQLDatabase) ConvertFrom(hub conversion.Hub) error {
	src, err := hubOf[*v1beta1.MySQLDatabase](hub)
	if err != nil {
		return err
	}
	return Convert_v1beta1_MySQLDatabase_To_v1alpha1_MySQLDatabase(src.DeepCopy(), dst, nil)
}

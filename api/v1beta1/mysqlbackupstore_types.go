package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MySQLBackupStore describes a place backups are written to — a bucket of an S3-compatible
// object storage or a PersistentVolumeClaim — once, for the clusters of its namespace that
// name it in spec.backup.storeRef and the restores that name it in
// spec.bootstrap.from.storeRef. Dolphin reads it at each use and never changes or deletes it;
// a backup records the store it was written to in its own status.store. A MySQLBackupStore
// that a cluster names cannot be deleted until no cluster names it.
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:resource:shortName=mybs,categories=dolphin
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=".spec.s3.endpoint",description="S3 API endpoint (S3 stores)"
// +kubebuilder:printcolumn:name="Bucket",type=string,JSONPath=".spec.s3.bucket",description="Bucket (S3 stores)"
// +kubebuilder:printcolumn:name="Prefix",type=string,JSONPath=".spec.s3.prefix",priority=1
// +kubebuilder:printcolumn:name="Claim",type=string,JSONPath=".spec.pvc.claimName",description="PersistentVolumeClaim (pvc stores)"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type MySQLBackupStore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the store: exactly one of s3 (a bucket) or pvc (a PersistentVolumeClaim), as in
	// a cluster's spec.backup.store.
	// +required
	Spec BackupStore `json:"spec"`
}

// MySQLBackupStoreList is a list of MySQLBackupStores.
// +kubebuilder:object:root=true
type MySQLBackupStoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MySQLBackupStore `json:"items"`
}

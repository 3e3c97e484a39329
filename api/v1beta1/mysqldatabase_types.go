package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MySQLDatabase is a database (schema) on a MySQLCluster. Dolphin creates it on the cluster's
// primary, so that it replicates to every instance, keeps its default character set and
// collation as declared (changes made by hand are put back), and on deletion drops it or
// leaves it as spec.cleanupPolicy says.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mydb,categories=dolphin
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=".spec.cluster",description="MySQLCluster the database lives on"
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=".status.database",description="Name of the database on the server"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status",description="True when the database exists as declared"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].reason",priority=1
// +kubebuilder:printcolumn:name="Charset",type=string,JSONPath=".status.characterSet",priority=1
// +kubebuilder:printcolumn:name="Collation",type=string,JSONPath=".status.collation",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:validation:XValidation:rule="has(self.spec.name) || (self.metadata.name.size() <= 64 && !self.metadata.name.contains('.') && !(self.metadata.name in ['mysql', 'sys', 'performance_schema', 'information_schema']))",message="metadata.name cannot be the database name (at most 64 characters, no '.', not one of the server's own databases): set spec.name"
type MySQLDatabase struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the database as it should be.
	// +required
	Spec MySQLDatabaseSpec `json:"spec"`

	// Status is what Dolphin observed; written by the operator only.
	// +optional
	Status MySQLDatabaseStatus `json:"status,omitempty"`
}

// MySQLDatabaseList is a list of MySQLDatabase.
//
// +kubebuilder:object:root=true
type MySQLDatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MySQLDatabase `json:"items"`
}

// MySQLDatabaseSpec is a database as it should be.
// +kubebuilder:validation:XValidation:rule="has(self.name) == has(oldSelf.name) && (!has(self.name) || self.name == oldSelf.name)",message="spec.name is immutable: create another MySQLDatabase for another database"
// +kubebuilder:validation:XValidation:rule="!has(self.collation) || !has(self.characterSet) || self.collation == self.characterSet || self.collation.startsWith(self.characterSet + '_') || ((self.characterSet == 'utf8' || self.characterSet == 'utf8mb3') && (self.collation.startsWith('utf8_') || self.collation.startsWith('utf8mb3_')))",message="collation must belong to characterSet (e.g. utf8mb4_unicode_ci for utf8mb4): fix one of them, or set only the collation"
type MySQLDatabaseSpec struct {
	// Cluster is the name of the MySQLCluster, in the same namespace, the database lives on.
	// It cannot be changed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.cluster is immutable: create a MySQLDatabase for the other cluster instead"
	// +required
	Cluster string `json:"cluster"`

	// Name is the database's name on the server; metadata.name when empty. Letters, digits,
	// '_', '$' and '-', at most 64 characters. It cannot be changed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_$-]+$`
	// +kubebuilder:validation:XValidation:rule="!(self.lowerAscii() in ['mysql', 'sys', 'performance_schema', 'information_schema'])",message="mysql, sys, performance_schema and information_schema are the server's own databases: Dolphin does not manage them"
	// +optional
	Name string `json:"name,omitempty"`

	// CharacterSet is the database's default character set, e.g. utf8mb4. Empty: the
	// server's default (or the one the collation implies). Changing it changes the default
	// for new tables only; existing tables keep theirs.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+$`
	// +optional
	CharacterSet string `json:"characterSet,omitempty"`

	// Collation is the database's default collation, e.g. utf8mb4_unicode_ci. Empty: the
	// character set's default collation.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9_]+$`
	// +optional
	Collation string `json:"collation,omitempty"`

	// CleanupPolicy says what deleting this MySQLDatabase does to the database: Retain
	// (default) leaves it and its data on the server; Delete drops it, with every table in it.
	// +kubebuilder:default=Retain
	// +optional
	CleanupPolicy CleanupPolicy `json:"cleanupPolicy,omitempty"`
}

// CleanupPolicy says what deleting a MySQLUser or MySQLDatabase does on the server.
// +kubebuilder:validation:Enum=Delete;Retain
type CleanupPolicy string

const (
	// CleanupDelete drops the user or database from the server.
	CleanupDelete CleanupPolicy = "Delete"
	// CleanupRetain leaves it on the server; Dolphin stops managing it.
	CleanupRetain CleanupPolicy = "Retain"
)

// MySQLDatabaseStatus is what Dolphin observed of a MySQLDatabase.
type MySQLDatabaseStatus struct {
	// ObservedGeneration is the generation of the spec last applied to the server.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (reasons Applied, ClusterNotFound, ClusterNotReady, NoWritablePrimary,
	// ApplyFailed, Conflict, Deleting).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Database is the name of the database on the server.
	// +optional
	Database string `json:"database,omitempty"`
	// CharacterSet and Collation are the database's defaults as the server reported them.
	// +optional
	CharacterSet string `json:"characterSet,omitempty"`
	// +optional
	Collation string `json:"collation,omitempty"`
}

// SQLObjectFinalizer holds a MySQLUser or MySQLDatabase back while it is deleted, until its
// cleanup policy was carried out on the server.
const SQLObjectFinalizer = "mysql.dolphin.dev/sql-cleanup"

// Reasons of the Ready condition of MySQLUser and MySQLDatabase.
const (
	// ReasonApplied: the server has the object as declared.
	ReasonApplied = "Applied"
	// ReasonClusterNotFound: spec.cluster names no MySQLCluster in the namespace.
	ReasonClusterNotFound = "ClusterNotFound"
	// ReasonClusterNotReady: the cluster has no primary yet (creating, paused, failing over).
	ReasonClusterNotReady = "ClusterNotReady"
	// ReasonNoWritablePrimary: the instance Dolphin reached is read-only (fenced, or a
	// failover is starting); Dolphin retries.
	ReasonNoWritablePrimary = "NoWritablePrimary"
	// ReasonApplyFailed: the server refused a statement; the message has its error.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonConflict: another resource of the same kind manages the same user or database.
	ReasonConflict = "Conflict"
	// ReasonPasswordSecretNotFound: the password Secret or key does not exist.
	ReasonPasswordSecretNotFound = "PasswordSecretNotFound"
	// ReasonPasswordTooWeak: the password in the user's own Secret is too weak to apply.
	ReasonPasswordTooWeak = "PasswordTooWeak"
	// ReasonDeleting: the cleanup policy is being carried out.
	ReasonDeleting = "Deleting"
)

// StatusConditions returns the status conditions, for the reconciler that writes them.
func (in *MySQLDatabase) StatusConditions() *[]metav1.Condition { return &in.Status.Conditions }

// StatusObservedGeneration returns the generation the status last applied (0: never).
func (in *MySQLDatabase) StatusObservedGeneration() int64 { return in.Status.ObservedGeneration }

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MySQLCluster is a highly available MySQL-family database: one primary and up to eight
// replicas kept in sync with GTID replication and lossless semi-synchronous replication.
// Dolphin creates the StatefulSet, Services, configuration and credentials for it, and keeps a
// writable primary behind the `<name>-primary` Service.
//
// +kubebuilder:object:root=true
// +kubebuilder:deprecatedversion:warning="mysql.dolphin.dev/v1alpha1 MySQLCluster is deprecated: use mysql.dolphin.dev/v1beta1 (docs/upgrading.md says what changed)"
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=myc,categories=dolphin
// +kubebuilder:selectablefield:JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=".status.phase",description="Lifecycle phase of the cluster"
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=".status.currentPrimary",description="Pod that currently accepts writes"
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=".status.readyInstances",description="Instances that are ready"
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=".spec.replicas",description="Instances requested"
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=".spec.engine.flavor",priority=1
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=".spec.engine.version",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type MySQLCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state of the cluster.
	// +required
	Spec MySQLClusterSpec `json:"spec"`

	// Status is the state Dolphin observed; it is written by the operator only.
	// +optional
	Status MySQLClusterStatus `json:"status,omitempty"`
}

// MySQLClusterList is a list of MySQLCluster.
//
// +kubebuilder:object:root=true
type MySQLClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MySQLCluster `json:"items"`
}

// MySQLClusterSpec is the desired state of a MySQLCluster.
// +kubebuilder:validation:XValidation:rule="!has(self.bootstrap) || !has(self.bootstrap.external) || !has(self.engine) || !has(self.engine.flavor) || self.engine.flavor == 'mariadb'",message="bootstrap.external copies a MariaDB server into a MariaDB cluster: set engine.flavor to mariadb"
// +kubebuilder:validation:XValidation:rule="has(self.bootstrap) == has(oldSelf.bootstrap)",message="spec.bootstrap can only be set when the cluster is created: to restore a backup, create a new MySQLCluster"
// +kubebuilder:validation:XValidation:rule="[has(self.podTemplate) && has(self.podTemplate.securityContext) && has(self.podTemplate.securityContext.runAsUser) ? self.podTemplate.securityContext.runAsUser : 999, has(self.podTemplate) && has(self.podTemplate.securityContext) && has(self.podTemplate.securityContext.runAsGroup) ? self.podTemplate.securityContext.runAsGroup : 999, has(self.podTemplate) && has(self.podTemplate.securityContext) && has(self.podTemplate.securityContext.fsGroup) ? self.podTemplate.securityContext.fsGroup : 999] == [has(oldSelf.podTemplate) && has(oldSelf.podTemplate.securityContext) && has(oldSelf.podTemplate.securityContext.runAsUser) ? oldSelf.podTemplate.securityContext.runAsUser : 999, has(oldSelf.podTemplate) && has(oldSelf.podTemplate.securityContext) && has(oldSelf.podTemplate.securityContext.runAsGroup) ? oldSelf.podTemplate.securityContext.runAsGroup : 999, has(oldSelf.podTemplate) && has(oldSelf.podTemplate.securityContext) && has(oldSelf.podTemplate.securityContext.fsGroup) ? oldSelf.podTemplate.securityContext.fsGroup : 999]",message="podTemplate.securityContext runAsUser, runAsGroup and fsGroup cannot change after the cluster is created: the data files belong to the user and group that wrote them. Keep them, or restore a backup into a new MySQLCluster with the new ones"
type MySQLClusterSpec struct {
	// Engine selects the database server: flavor (mariadb or mysql), version and image.
	// +kubebuilder:default={flavor:"mariadb",version:"10.11"}
	// +optional
	Engine EngineSpec `json:"engine,omitempty"`

	// Replicas is the number of database instances, primary included (1 to 9).
	// One instance has no failover; three is the usual choice for high availability.
	// +kubebuilder:default=3
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 9",message="replicas must be between 1 and 9: use 1 for a single instance without failover, 3 or more for high availability"
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// Storage is the persistent volume each instance keeps its data on.
	// +kubebuilder:default={}
	// +optional
	Storage StorageSpec `json:"storage,omitempty"`

	// Resources are the CPU and memory requests and limits of the database container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// MySQLConfig adds or overrides mysqld settings in the generated my.cnf, for example
	// `innodb_buffer_pool_size: 512M`. Keys use underscores. Settings that Dolphin manages
	// itself for replication and failover (server_id, log_bin, gtid_*, read_only,
	// rpl_semi_sync_*, port, datadir …) are rejected, and so are options Dolphin does not know
	// for the engine version (write them with the loose_ prefix to pass them unchecked).
	// Settings the server takes at run time (max_connections, long_query_time …) are applied
	// with SET GLOBAL on every instance without a restart; others roll the instances one at
	// a time.
	// +kubebuilder:validation:MaxProperties=100
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z][a-z0-9_]{0,63}$'))",message="mysqlConfig keys must be lower-case mysqld option names with underscores, e.g. innodb_buffer_pool_size (not innodb-buffer-pool-size)"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k in ['server_id','log_bin','log_bin_index','skip_log_bin','disable_log_bin','log_slave_updates','log_replica_updates','binlog_format','gtid_mode','gtid_strict_mode','enforce_gtid_consistency','gtid_domain_id','read_only','super_read_only','skip_slave_start','skip_replica_start','init_rpl_role','relay_log','relay_log_index','datadir','socket','port','bind_address','user','pid_file','log_error','sync_binlog','innodb_flush_log_at_trx_commit']) && !k.startsWith('rpl_semi_sync_'))",message="mysqlConfig may not set replication and durability settings that Dolphin manages (server_id, log_bin, binlog_format, gtid_*, read_only, rpl_semi_sync_*, sync_binlog, innodb_flush_log_at_trx_commit, datadir, port, socket …): remove that key"
	// +kubebuilder:validation:XValidation:rule="self.all(k, type(self[k]) != string || (!self[k].contains('\\n') && !self[k].contains('\\r') && !self[k].contains('#')))",message="mysqlConfig values must be a single line without '#' (my.cnf would cut the value at '#')"
	// +optional
	MySQLConfig map[string]MySQLConfigValue `json:"mysqlConfig,omitempty"`

	// Credentials chooses where account passwords come from.
	// +optional
	Credentials CredentialsSpec `json:"credentials,omitempty"`

	// TLS serves encrypted connections on every instance.
	// +optional
	TLS TLSSpec `json:"tls,omitempty"`

	// PrimaryService configures the `<name>-primary` Service, which always points at the
	// writable primary.
	// +optional
	PrimaryService ServiceSpec `json:"primaryService,omitempty"`

	// ReplicaService configures the `<name>-replicas` Service, which load-balances read-only
	// connections over the replicas that replicate and are not too far behind.
	// +optional
	ReplicaService ReplicaServiceSpec `json:"replicaService,omitempty"`

	// PodTemplate adds scheduling constraints, metadata, identity, security settings, volumes
	// and containers to the instance pods, merged with what Dolphin sets.
	// +optional
	PodTemplate PodTemplateOverrides `json:"podTemplate,omitempty"`

	// Failover controls automatic promotion of a replica when the primary is lost.
	// +kubebuilder:default={}
	// +optional
	Failover FailoverSpec `json:"failover,omitempty"`

	// Durability says what the primary does when no replica acknowledges a write. Required
	// (the default): it never acknowledges a write that no replica has received; writes wait
	// until a replica is back, and the cluster is Degraded saying so. Preferred: after 30 s
	// without an acknowledgement it stays writable by acknowledging writes alone
	// (asynchronous replication); a failover while that is so waits for the old primary
	// unless a person accepts the loss (annotation mysql.dolphin.dev/failover-accept-loss).
	// A single instance has no replica: every write exists on one server either way.
	// +kubebuilder:default=Required
	// +optional
	Durability Durability `json:"durability,omitempty"`

	// Paused stops Dolphin from changing this cluster until it is set back to false: no
	// Kubernetes object is changed, no scheduled backup is taken, and nothing is repaired,
	// tuned or switched over in the databases. Failover of a lost primary stays on (set
	// failover.enabled to false to turn it off too). Use it for manual maintenance.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// Backup says where backups of this cluster go, when they are taken and how long they
	// are kept (see MySQLBackup).
	// +optional
	Backup *BackupSpec `json:"backup,omitempty"`

	// Bootstrap creates the cluster's data from a backup, or from a MariaDB server outside
	// the cluster, instead of empty servers. It cannot be changed after creation.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.bootstrap is immutable: to restore another backup or copy another server, create a new MySQLCluster"
	// +optional
	Bootstrap *BootstrapSpec `json:"bootstrap,omitempty"`
}

// MySQLConfigValue is the value of one mysqld setting, written as is into my.cnf: a string,
// or a whole number as YAML writes it (`max_connections: 500`). Quote ON and OFF
// (`performance_schema: "ON"`): YAML reads them unquoted as true and false.
// +kubebuilder:validation:XIntOrString
// +kubebuilder:validation:Type=""
// +kubebuilder:validation:MaxLength=1024
type MySQLConfigValue string

// Flavor names a MySQL-family database server.
// +kubebuilder:validation:Enum=mariadb;mysql
type Flavor string

const (
	// FlavorMariaDB is MariaDB (10.11, 11.4 or 11.8).
	FlavorMariaDB Flavor = "mariadb"
	// FlavorMySQL is Oracle MySQL (8.4 LTS).
	FlavorMySQL Flavor = "mysql"
)

// EngineSpec selects the database server.
// +kubebuilder:validation:XValidation:rule="self.flavor == 'mariadb' ? self.version.matches('^(10\\\\.11|11\\\\.4|11\\\\.8)(\\\\.[0-9]+)?$') : self.version.matches('^8\\\\.4(\\\\.[0-9]+)?$')",message="unsupported engine version: use 10.11, 11.4 or 11.8 (optionally with a patch level, e.g. 11.8.3) for mariadb, and 8.4 (e.g. 8.4.3) for mysql"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.version) || !has(self.version) || self.flavor != oldSelf.flavor || int(self.version.split('.')[0]) * 1000 + int(self.version.split('.')[1]) >= int(oldSelf.version.split('.')[0]) * 1000 + int(oldSelf.version.split('.')[1])",message="engine.version cannot go back to an older release series: a server cannot start on a data directory a newer series has upgraded. Keep the version, or restore a backup taken before the upgrade into a new MySQLCluster"
type EngineSpec struct {
	// Flavor is the server family: `mariadb` or `mysql`. It cannot be changed after creation.
	// +kubebuilder:default=mariadb
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="engine.flavor is immutable: create a new MySQLCluster with the other flavor and move the data with a dump or backup"
	// +optional
	Flavor Flavor `json:"flavor,omitempty"`

	// Version is the server version as MAJOR.MINOR or MAJOR.MINOR.PATCH, for example 10.11,
	// 11.4.5 or 8.4.3.
	// +kubebuilder:default="10.11"
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+\\\\.[0-9]+(\\\\.[0-9]+)?$')",message="engine.version must look like MAJOR.MINOR or MAJOR.MINOR.PATCH, for example 10.11 or 11.4.5"
	// +optional
	Version string `json:"version,omitempty"`

	// Image overrides the container image of the database server. By default Dolphin uses
	// the official image for the flavor and version (docker.io/library/mariadb:<version>
	// or docker.io/library/mysql:<version>).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`
}

// StorageSpec describes the persistent volume of each instance.
// +kubebuilder:validation:XValidation:rule="!has(self.size) || quantity(string(self.size)).compareTo(quantity('64Mi')) >= 0",message="storage.size must be at least 64Mi, for example 10Gi"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.size) || !has(self.size) || quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) >= 0",message="storage.size cannot shrink: volumes can only grow; to use less space, create a new cluster and restore into it"
// +kubebuilder:validation:XValidation:rule="has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storage.storageClassName is immutable: create a new cluster with the other storage class and restore into it"
type StorageSpec struct {
	// Size of each instance's data volume, for example 10Gi. It can grow but never shrink.
	// +kubebuilder:default="1Gi"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName of the data volumes; empty uses the cluster's default class.
	// It cannot be changed after creation.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// DeletePolicy says what happens to the data volumes when the MySQLCluster is deleted or
	// scaled down: `Retain` (default) keeps them, `Delete` removes them.
	// +kubebuilder:validation:Enum=Retain;Delete
	// +kubebuilder:default=Retain
	// +optional
	DeletePolicy VolumeDeletePolicy `json:"deletePolicy,omitempty"`
}

// VolumeDeletePolicy says whether data volumes outlive their instances.
type VolumeDeletePolicy string

const (
	// VolumeRetain keeps the data volumes.
	VolumeRetain VolumeDeletePolicy = "Retain"
	// VolumeDelete deletes the data volumes with their instances.
	VolumeDelete VolumeDeletePolicy = "Delete"
)

// TLSSpec configures the instances' server certificate.
// +kubebuilder:validation:XValidation:rule="!has(self.certificateSecret) || self.enabled",message="tls.certificateSecret is used only with tls.enabled: true"
// +kubebuilder:validation:XValidation:rule="!has(self.requireForClients) || !self.requireForClients || self.enabled",message="tls.requireForClients needs tls.enabled: true"
type TLSSpec struct {
	// Enabled makes every instance serve TLS with a certificate for its pod's DNS name
	// (<pod>.<name>-instances.<namespace>.svc), the cluster's Services (<name>-primary,
	// <name>-replicas, with and without .<namespace>.svc), localhost and 127.0.0.1 (for
	// port-forwarding), issued by a CA of this cluster: clients verify the server against ca.crt
	// of the Secret <name>-ca. Turning it on or off restarts the instances one at a time.
	// Dolphin's own connections, replication and the binlog archiver then use TLS too,
	// verifying the CA, with every instance whose pod was started with the certificate.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// RequireForClients makes every instance refuse TCP logins that do not use TLS
	// (require_secure_transport), whatever the account: clients see "access denied" (1045).
	// Applied once every instance serves TLS, and lifted while one does not (in the middle of
	// the rollout that turns TLS on), so that Dolphin never cuts an instance off. To require
	// TLS of some accounts only, use MySQLUser spec.require instead.
	// +optional
	RequireForClients bool `json:"requireForClients,omitempty"`
	// CertificateSecret names a Secret you manage (for example written by cert-manager) with
	// tls.crt, tls.key and ca.crt, covering the names above; Dolphin checks it and reports a
	// certificate that is malformed, expired, or lacks a name. Empty: Dolphin issues the
	// certificate (Secret <name>-tls, 90 days, renewed after 60).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CertificateSecret string `json:"certificateSecret,omitempty"`
	// ExtraNames are more names the issued certificate carries: DNS names (a LoadBalancer's
	// external name, a DNS alias) or IP addresses, so that clients outside the cluster can
	// verify the server. Adding one renews the certificate; the servers load it without a
	// restart. Ignored with certificateSecret (your certificate carries what you issued).
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9*]([-A-Za-z0-9.:*]*[A-Za-z0-9])?$`
	// +optional
	// +listType=set
	ExtraNames []string `json:"extraNames,omitempty"`
}

// TLSStatus is the certificate the instances are given.
type TLSStatus struct {
	// Secret holds the certificate (tls.crt, tls.key, ca.crt).
	Secret string `json:"secret"`
	// NotAfter is when the certificate expires.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`
}

// CredentialsSpec chooses where the passwords of the accounts Dolphin uses come from.
type CredentialsSpec struct {
	// SecretName names an existing Secret in the cluster's namespace holding the keys
	// root-password (root@localhost, for local access inside a pod), replication-password,
	// operator-password (Dolphin's own account) and monitor-password.
	// When empty, Dolphin generates `<name>-credentials` with strong random passwords and
	// never overwrites it. Changing a password in the Secret rotates it on every instance
	// without downtime (condition CredentialsApplied). It cannot be changed after creation.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="credentials.secretName is immutable: change the passwords inside the Secret instead"
	// +optional
	SecretName string `json:"secretName,omitempty"`
}

// ServiceSpec customises a client-facing Service.
// +kubebuilder:validation:XValidation:rule="!has(self.labels) || self.labels.all(k, !k.startsWith('app.kubernetes.io/') && !k.startsWith('mysql.dolphin.dev/'))",message="service labels under app.kubernetes.io/ and mysql.dolphin.dev/ are set by Dolphin: use another key"
type ServiceSpec struct {
	// Type of the Service: ClusterIP (default), NodePort or LoadBalancer.
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	// +kubebuilder:default=ClusterIP
	// +optional
	Type corev1.ServiceType `json:"type,omitempty"`

	// Annotations added to the Service, for example for a cloud load balancer.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// Labels added to the Service.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
}

// ReplicaServiceSpec configures the `<name>-replicas` Service.
type ReplicaServiceSpec struct {
	ServiceSpec `json:",inline"`

	// MaxLagSeconds is how far behind the primary (Seconds_Behind_Master) a replica may be
	// and still take reads through the Service. A replica further behind, or whose applier
	// stopped on an error, leaves the Service (its role label is removed, an event and
	// status.topology.instances[].unpublished say why) and comes back once caught up. 0 keeps
	// every replicating replica whatever its lag.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:default=60
	// +optional
	MaxLagSeconds *int32 `json:"maxLagSeconds,omitempty"`
}

// Durability is what the primary does when no replica acknowledges a write.
// +kubebuilder:validation:Enum=Required;Preferred
type Durability string

const (
	// DurabilityRequired means the primary never acknowledges a write no replica has received
	// (semi-sync replication never falls back to asynchronous); writes wait instead.
	DurabilityRequired Durability = "Required"
	// DurabilityPreferred means the primary falls back to asynchronous replication after 30 s
	// without an acknowledgement, to stay writable; a failover then waits for it or for a
	// person's consent.
	DurabilityPreferred Durability = "Preferred"
)

// FailoverSpec controls automatic failover.
type FailoverSpec struct {
	// Enabled turns automatic failover on (default). When off, a lost primary leaves the
	// cluster read-only until an operator acts.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// DetectionInterval is how often the primary is probed, for example 1s.
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('1m')",message="failover.detectionInterval must be between 100ms and 1m"
	// +optional
	DetectionInterval *metav1.Duration `json:"detectionInterval,omitempty"`

	// DetectionAttempts is how many consecutive failed probes declare the primary lost.
	// Failover starts after about detectionInterval × detectionAttempts.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=60
	// +optional
	DetectionAttempts int32 `json:"detectionAttempts,omitempty"`

	// ErrantFormerPrimary is what Dolphin does with an instance an unplanned failover
	// replaced that comes back holding transactions the new primary lacks (writes it may
	// have acknowledged). Hold (default): it is kept out of the topology until the cluster
	// is annotated mysql.dolphin.dev/reclone-approved=<instance>. RecloneAfterCopy: Dolphin
	// re-clones it by itself once a copy of those transactions is kept
	// (status.keptTransactions); when no copy can be made (its binary logs are purged) it
	// still waits for the annotation.
	// +kubebuilder:validation:Enum=Hold;RecloneAfterCopy
	// +kubebuilder:default=Hold
	// +optional
	ErrantFormerPrimary ErrantFormerPrimaryPolicy `json:"errantFormerPrimary,omitempty"`
}

// ErrantFormerPrimaryPolicy is spec.failover.errantFormerPrimary.
type ErrantFormerPrimaryPolicy string

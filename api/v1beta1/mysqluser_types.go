package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MySQLUser is an application account on a MySQLCluster: a user name and host pattern, a
// password kept in a Secret, and the privileges it holds. Dolphin creates it on the cluster's
// primary, so that it replicates to every instance, and keeps it as declared: a grant removed
// by hand comes back, a privilege removed from spec.grants is revoked, a password changed in
// the Secret is applied without disconnecting anyone. Unlike Dolphin's own accounts, an
// application account is stopped by read_only, so its writes can never land on a fenced
// former primary.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=myuser,categories=dolphin
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=".spec.cluster",description="MySQLCluster the account lives on"
// +kubebuilder:printcolumn:name="Account",type=string,JSONPath=".status.account",description="user@host on the server"
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=".status.passwordSecret",description="Secret holding the password"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status",description="True when the account exists as declared"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].reason",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:validation:XValidation:rule="has(self.spec.name) || (self.metadata.name.size() <= 80 && !self.metadata.name.startsWith('dolphin') && !(self.metadata.name in ['root', 'mariadb.sys', 'mysql.sys', 'mysql.session', 'mysql.infoschema']))",message="metadata.name cannot be the user name (at most 80 characters, not root or a server's own account, not starting with dolphin): set spec.name"
// +kubebuilder:validation:XValidation:rule="has(self.spec.passwordSecretKeyRef) || self.metadata.name.size() <= 243",message="metadata.name is too long for the generated Secret mysqluser-<name>: use a shorter name or set spec.passwordSecretKeyRef"
type MySQLUser struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the account as it should be.
	// +required
	Spec MySQLUserSpec `json:"spec"`

	// Status is what Dolphin observed; written by the operator only.
	// +optional
	Status MySQLUserStatus `json:"status,omitempty"`
}

// MySQLUserList is a list of MySQLUser.
//
// +kubebuilder:object:root=true
type MySQLUserList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MySQLUser `json:"items"`
}

// MySQLUserSpec is an application account as it should be.
// +kubebuilder:validation:XValidation:rule="has(self.name) == has(oldSelf.name) && (!has(self.name) || self.name == oldSelf.name)",message="spec.name is immutable: create another MySQLUser for another account"
// +kubebuilder:validation:XValidation:rule="!has(self.grants) || self.grants.all(g, self.grants.exists_one(h, h.database == g.database && h.table == g.table))",message="each database and table may appear in one grant only: merge the privileges of grants on the same database and table"
type MySQLUserSpec struct {
	// Cluster is the name of the MySQLCluster, in the same namespace, the account lives on.
	// It cannot be changed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.cluster is immutable: create a MySQLUser for the other cluster instead"
	// +required
	Cluster string `json:"cluster"`

	// Name is the user name on the server; metadata.name when empty. Letters, digits, '_',
	// '.', '$' and '-', at most 80 characters (MySQL allows 32). root and names starting with
	// dolphin are reserved. It cannot be changed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=80
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.$-]+$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('dolphin') && !(self in ['root', 'mariadb.sys', 'mysql.sys', 'mysql.session', 'mysql.infoschema', 'PUBLIC'])",message="this user name is reserved for the server or for Dolphin's own accounts: choose another spec.name"
	// +optional
	Name string `json:"name,omitempty"`

	// Host is the host pattern the account may connect from: '%' (default, anywhere), a host
	// name, an IP address, a pattern such as 10.0.0.% or an address with a netmask such as
	// 10.0.0.0/255.255.255.0, in lower case (the server stores host names in lower case). It
	// is part of the account's identity and cannot be changed.
	// +kubebuilder:default="%"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-z0-9._%:/-]+$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.host is immutable (it is part of the account's identity): create another MySQLUser for another host"
	// +optional
	Host string `json:"host,omitempty"`

	// PasswordSecretKeyRef names a Secret key, in the same namespace, holding the password.
	// Changing the password there changes it on the server without disconnecting sessions
	// already open. When empty, Dolphin generates a strong password into the Secret
	// mysqluser-<metadata.name> (keys username, password, host, port), owned by this
	// MySQLUser.
	// +optional
	PasswordSecretKeyRef *SecretKeyReference `json:"passwordSecretKeyRef,omitempty"`

	// MaxUserConnections limits the account's simultaneous connections; 0 (default) means no
	// limit beyond the server's max_connections.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MaxUserConnections int32 `json:"maxUserConnections,omitempty"`

	// Require says what the account's connections need: None (default), SSL (an encrypted
	// connection) or X509 (an encrypted connection with a client certificate the server's CA
	// signed). SSL and X509 need spec.tls.enabled on the cluster.
	// +kubebuilder:default=None
	// +optional
	Require TLSRequirement `json:"require,omitempty"`

	// Grants are every privilege the account holds; anything else it holds is revoked.
	// Column privileges, roles and proxy grants are not managed (and left alone).
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Grants []Grant `json:"grants,omitempty"`

	// CleanupPolicy says what deleting this MySQLUser does to the account: Delete (default)
	// drops it from the server, Retain leaves it (with its password and privileges).
	// +kubebuilder:default=Delete
	// +optional
	CleanupPolicy CleanupPolicy `json:"cleanupPolicy,omitempty"`
}

// SecretKeyReference names one key of a Secret in the same namespace.
type SecretKeyReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Key in the Secret's data; "password" when empty.
	// +kubebuilder:default=password
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// TLSRequirement is what an account's connections need.
// +kubebuilder:validation:Enum=None;SSL;X509
type TLSRequirement string

const (
	// RequireNone means plain and encrypted connections are accepted.
	RequireNone TLSRequirement = "None"
	// RequireSSL means only encrypted connections.
	RequireSSL TLSRequirement = "SSL"
	// RequireX509 means only encrypted connections with a valid client certificate.
	RequireX509 TLSRequirement = "X509"
)

// Grant is a set of privileges on one database, or one table, or every database.
// +kubebuilder:validation:XValidation:rule="self.database != '*' || self.table == '*'",message="a grant on every database (database '*') covers every table: set table to '*'"
// +kubebuilder:validation:XValidation:rule="self.database != '*' || !self.privileges.exists(p, p == 'ALL' || p == 'ALL PRIVILEGES')",message="ALL PRIVILEGES on every database would include administrative privileges: grant ALL on one database, or list the privileges"
// +kubebuilder:validation:XValidation:rule="self.database == '*' || !self.privileges.exists(p, p in ['PROCESS', 'SHOW DATABASES', 'REPLICATION CLIENT', 'REPLICATION SLAVE', 'BINLOG MONITOR', 'SLAVE MONITOR'])",message="PROCESS, SHOW DATABASES and the replication privileges are global: grant them on database '*'"
// +kubebuilder:validation:XValidation:rule="self.database != '*' || self.privileges.all(p, p in ['SELECT', 'SHOW VIEW', 'LOCK TABLES', 'PROCESS', 'SHOW DATABASES', 'REPLICATION CLIENT', 'REPLICATION SLAVE', 'BINLOG MONITOR', 'SLAVE MONITOR'])",message="on every database (database '*') only reading and monitoring privileges are offered (SELECT, SHOW VIEW, LOCK TABLES, PROCESS, SHOW DATABASES and the replication privileges): grant the others on the databases the account uses"
// +kubebuilder:validation:XValidation:rule="!(self.database in ['mysql', 'sys', 'performance_schema', 'information_schema'])",message="the server's own databases (mysql, sys, performance_schema, information_schema) cannot be granted on: privileges there would let an account change any account's privileges"
// +kubebuilder:validation:XValidation:rule="self.table == '*' || self.privileges.all(p, p in ['ALL', 'ALL PRIVILEGES', 'SELECT', 'INSERT', 'UPDATE', 'DELETE', 'CREATE', 'DROP', 'REFERENCES', 'INDEX', 'ALTER', 'CREATE VIEW', 'SHOW VIEW', 'TRIGGER', 'DELETE HISTORY'])",message="only table privileges (SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, REFERENCES, INDEX, ALTER, CREATE VIEW, SHOW VIEW, TRIGGER, DELETE HISTORY or ALL) can be granted on one table: grant the others on the database (table '*')"
// +kubebuilder:validation:XValidation:rule="!self.privileges.exists(p, p == 'ALL' || p == 'ALL PRIVILEGES') || self.privileges.size() == 1",message="ALL PRIVILEGES already includes every privilege of its level: list it alone"
type Grant struct {
	// Privileges to grant. On a database or a table: SELECT, INSERT, UPDATE, DELETE, CREATE,
	// DROP, REFERENCES, INDEX, ALTER, CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, CREATE
	// VIEW, SHOW VIEW, CREATE ROUTINE, ALTER ROUTINE, EVENT, TRIGGER, DELETE HISTORY or ALL
	// PRIVILEGES (table privileges only on a table). On every database ('*'): SELECT, SHOW
	// VIEW, LOCK TABLES, PROCESS, SHOW DATABASES, REPLICATION CLIENT, REPLICATION SLAVE,
	// BINLOG MONITOR and SLAVE MONITOR (reading and monitoring). Privileges that would let an
	// application bypass read_only or administer the servers (SUPER, READ_ONLY ADMIN, FILE,
	// SHUTDOWN, RELOAD, CREATE USER, the *ADMIN privileges) are not offered, nor anything on
	// the server's own databases.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +required
	Privileges []Privilege `json:"privileges"`

	// Database the privileges apply to (a name, matched literally: '_' and '%' are not
	// wildcards), or '*' for every database.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9_$-]+|\*)$`
	// +required
	Database string `json:"database"`

	// Table the privileges apply to, or '*' (default) for every table of the database.
	// +kubebuilder:default="*"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9_$-]+|\*)$`
	// +optional
	Table string `json:"table,omitempty"`

	// GrantOption lets the account grant these privileges to others.
	// +optional
	GrantOption bool `json:"grantOption,omitempty"`
}

// Privilege is one privilege name, upper-case, as in GRANT statements.
// +kubebuilder:validation:Enum=ALL;ALL PRIVILEGES;SELECT;INSERT;UPDATE;DELETE;CREATE;DROP;REFERENCES;INDEX;ALTER;CREATE TEMPORARY TABLES;LOCK TABLES;EXECUTE;CREATE VIEW;SHOW VIEW;CREATE ROUTINE;ALTER ROUTINE;EVENT;TRIGGER;DELETE HISTORY;PROCESS;SHOW DATABASES;REPLICATION CLIENT;REPLICATION SLAVE;BINLOG MONITOR;SLAVE MONITOR
type Privilege string

// MySQLUserStatus is what Dolphin observed of a MySQLUser.
type MySQLUserStatus struct {
	// ObservedGeneration is the generation of the spec last applied to the server.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (reasons Applied, ClusterNotFound, ClusterNotReady, NoWritablePrimary,
	// PasswordSecretNotFound, PasswordTooWeak, ApplyFailed, Conflict, Deleting).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Account is the account on the server, user@host.
	// +optional
	Account string `json:"account,omitempty"`
	// PasswordSecret is the Secret the password is read from.
	// +optional
	PasswordSecret string `json:"passwordSecret,omitempty"`
	// PasswordSecretVersion is the resourceVersion of that Secret when its password was last
	// set on the server (the password itself, or a hash of it, is never in status).
	// +optional
	PasswordSecretVersion string `json:"passwordSecretVersion,omitempty"`
}

// StatusConditions returns the status conditions, for the reconciler that writes them.
func (in *MySQLUser) StatusConditions() *[]metav1.Condition { return &in.Status.Conditions }

// StatusObservedGeneration returns the generation the status last applied (0: never).
func (in *MySQLUser) StatusObservedGeneration() int64 { return in.Status.ObservedGeneration }

// Package serverid holds the server_id values Dolphin gives its servers: the builders use
// them, and the checks of a server Dolphin does not run (a migration source) refuse them, since
// a replica silently skips events carrying its own server_id. A leaf package, so that the pod
// binary can check without linking the builders.
package serverid

const (
	// InstanceBase is added to a pod's ordinal to form its server's server_id (so no instance
	// gets 0, which disables replication).
	InstanceBase = 1000
	// MaxInstances is the most instances the API allows (spec.instances).
	MaxInstances = 9
	// Archive is the server_id the binlog archiver registers with, far above the instances'.
	Archive = 4000000000
)

// Reserved reports whether id is one Dolphin gives a server of its own: an instance's
// (InstanceBase + ordinal, for any instance count the API allows) or the binlog archiver's.
func Reserved(id uint64) bool {
	return (id >= InstanceBase && id < InstanceBase+MaxInstances) || id == Archive
}

// Package backup takes physical backups of an instance and restores them: the server's backup
// tool streams the data directory, the stream is compressed and checksummed on the fly and
// uploaded to an objectstore.Store without being staged, and a manifest written last commits
// the backup. A backup without a manifest does not exist.
package backup

import "time"

// ManifestKey is the manifest's key inside a backup's prefix. It is written after every other
// object of the backup has been committed.
const ManifestKey = "manifest.json"

// ManifestFormat is the version of the manifest layout written by this code.
const ManifestFormat = 1

// Manifest describes one complete backup.
type Manifest struct {
	// Format is ManifestFormat when written.
	Format int `json:"format"`
	// Name of the backup (the MySQLBackup resource, or what the caller chose).
	Name string `json:"name"`
	// Namespace and Cluster the backup was taken from.
	Namespace string `json:"namespace,omitempty"`
	Cluster   string `json:"cluster,omitempty"`
	// SourceInstance is the pod the backup was taken on (the host, for "external");
	// SourceRole "primary", "replica", or "external" (a server Dolphin does not run).
	SourceInstance string `json:"sourceInstance,omitempty"`
	SourceRole     string `json:"sourceRole,omitempty"`
	// Flavor ("mariadb" or "mysql") and ServerVersion (SELECT VERSION()) of the source.
	Flavor        string `json:"flavor"`
	ServerVersion string `json:"serverVersion"`
	// Tool is the backup tool and its version, e.g. "mariadb-backup 10.11.14-MariaDB".
	Tool string `json:"tool"`
	// StartTime and EndTime of the backup tool's run.
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
	// GTIDPosition is the GTID set the backup contains, consistent with its data: for MariaDB
	// the source's gtid_binlog_pos at the binary log coordinates mariadb-backup read under
	// BACKUP STAGE BLOCK_COMMIT (BINLOG_GTID_POS; not the tool's "GTID of the last change",
	// which can lag the data on a replica, see exactPosition); MySQL's gtid_executed. Restore
	// checks the restored data's binlog info against it, and replication continues from it.
	GTIDPosition string `json:"gtidPosition"`
	// ReplicaGTIDPosition is the source's gtid_slave_pos when it was a replica (informative).
	ReplicaGTIDPosition string `json:"replicaGtidPosition,omitempty"`
	// BinlogFile and BinlogPosition of the source at the lock point (informative: a binlog
	// file name means nothing on another server).
	BinlogFile     string `json:"binlogFile,omitempty"`
	BinlogPosition uint64 `json:"binlogPosition,omitempty"`
	// UpgradeRecord is the source's mariadb-upgrade record (engineupgrade.Record.Encode:
	// "FILE:BASE64"), read the same before and after the copy; empty when it had none.
	// mariadb-backup does not copy that file: a restore writes it, so that the engine upgrade
	// finds the restored system tables as upgraded as the source's instead of checking every
	// table of every restored instance.
	UpgradeRecord string `json:"upgradeRecord,omitempty"`
	// Compression of the data objects: "zstd".
	Compression string `json:"compression"`
	// Objects of the backup besides the manifest, in the order a restore reads them.
	Objects []Object `json:"objects"`
}

// Object is one stored object of a backup.
type Object struct {
	// Key relative to the backup's prefix.
	Key string `json:"key"`
	// Size stored (compressed) in bytes, and SHA256 (hex) of exactly those bytes.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// RawSize is the size of the backup tool's stream before compression.
	RawSize int64 `json:"rawSize"`
}

// StoredBytes is the sum of the objects' sizes.
func (m *Manifest) StoredBytes() int64 {
	var n int64
	for _, o := range m.Objects {
		n += o.Size
	}
	return n
}

// Package agent is the instance agent: a small HTTPS server that runs as a sidecar in every
// database pod, next to the data (the data volume is ReadWriteOnce, so work on the data must
// run in the pod), and the client the operator reaches it with.
//
// The channel is TLS 1.3 with a server certificate from a CA the operator generated
// (NewAgentPKI); the client trusts only that CA and verifies a fixed server name
// (AgentServerName) whatever address it dials, so the operator can dial pod IPs. Every request
// except GET /healthz carries a bearer token read from a file (a mounted Secret).
//
// The API is JSON, versioned under /v1:
//
//	POST   /v1/backups       BackupRequest → 202 BackupStatus (200 when that ID is known;
//	                         409 ErrorResponse with RunningID when another backup runs)
//	GET    /v1/backups/{id}  → 200 BackupStatus; 404 when the agent does not know the ID
//	DELETE /v1/backups/{id}  cancels it → 200 BackupStatus when it has ended, 202 while it ends
//	POST   /v1/clone         CloneRequest → 200 application/octet-stream: the instance's backup
//	                         stream, ending with the trailers Dolphin-Clone-Status (ok|error),
//	                         Dolphin-Clone-Error and Dolphin-Clone-Bytes
//	POST   /v1/seed          SeedRequest → 202 SeedStatus (200 once Succeeded: nothing runs
//	                         again; 409 while an instruction runs; 422 when this instance
//	                         cannot seed that way); only on `dolphin seed` (ServerOptions.Seed)
//	GET    /v1/seed          → 200 SeedStatus (Waiting, Running, Succeeded or Failed)
//	POST   /v1/keep          KeepRequest → 200 KeepResponse: a copy of the transactions the
//	                         instance holds and the primary lacks (422 code binlogs-purged,
//	                         503 code binlog-being-written); only on `dolphin agent`
//	POST   /v1/gtid-state    GTIDStateRequest → 200 GTIDStateResponse (@@gtid_binlog_state)
//	POST   /v1/engine-upgrade EngineUpgradeRequest → 200 EngineUpgradeResponse (mariadb-upgrade);
//	                         only on `dolphin agent`
//	POST   /v1/release-stop  → 204: the server's stop is released (the preStop hold of a
//	                         deleted pod ends); only on `dolphin agent`
//	GET    /healthz          → 200 "ok", no token needed
//
// Errors are an ErrorResponse with a 4xx/5xx status.
package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dolphin-operator/dolphin/internal/backup"
)

// DefaultPort is the port the agent listens on unless told otherwise.
const DefaultPort = 9443

// MaxRequestBytes bounds a request body; a larger one is refused with 413.
const MaxRequestBytes = 1 << 20

// MaxFinishedBackups is how many finished backup jobs the agent remembers (the oldest is
// forgotten first). The running job is always remembered.
const MaxFinishedBackups = 16

// Trailers of a clone stream. They are sent after the body; a stream whose status trailer is
// not "ok" (or is missing because the connection broke) failed, whatever bytes it carried.
const (
	// CloneStatusTrailer is "ok" or "error".
	CloneStatusTrailer = "Dolphin-Clone-Status"
	// CloneErrorTrailer is the error message when the status is "error".
	CloneErrorTrailer = "Dolphin-Clone-Error"
	// CloneBytesTrailer is the number of body bytes the server wrote (decimal).
	CloneBytesTrailer = "Dolphin-Clone-Bytes"
	// CloneUpgradeRecordTrailer is the source's mariadb-upgrade record
	// (engineupgrade.Record.Encode), sent when the data directory held the same one before and
	// after the stream: the clone's system tables are as upgraded as that record says.
	// Absent from agents before it existed; the clone then records nothing and the engine
	// upgrade checks every table, as before.
	CloneUpgradeRecordTrailer = "Dolphin-Clone-Upgrade-Record"
)

// ErrUnknownBackup is wrapped by the client's errors when the agent does not know a backup ID
// (404): the agent restarted since the backup was started, or the job was forgotten.
var ErrUnknownBackup = errors.New("the agent does not know this backup")

// ErrBackupRunning is wrapped by StartBackup's error when another backup is running (409);
// StatusError.RunningID names it.
var ErrBackupRunning = errors.New("another backup is running on the agent")

// StoreConfig is where a backup goes, passed through to the Backup function unchanged (it
// decodes it, e.g. into an objectstore.Config). It may hold credentials and is never logged.
type StoreConfig = json.RawMessage

// DBConn is how the agent reaches the database server it sits next to: Socket, or Host and
// Port. Password is never logged (String and MarshalLog leave it out).
type DBConn struct {
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	Socket   string `json:"socket,omitempty"`
	Host     string `json:"host,omitempty"`
	Port     int    `json:"port,omitempty"`
}

// String describes the connection without its password.
func (c DBConn) String() string {
	addr := c.Socket
	switch {
	case addr == "" && c.Host == "":
		addr = "(the agent's socket)"
	case addr == "":
		addr = fmt.Sprintf("%s:%d", c.Host, c.Port)
	}
	return fmt.Sprintf("%s@%s", c.User, addr)
}

// MarshalLog implements logr.Marshaler: the connection without its password.
func (c DBConn) MarshalLog() any { return c.String() }

// BackupMeta describes the backup for its manifest.
type BackupMeta struct {
	// Name of the backup (the MySQLBackup resource).
	Name string `json:"name,omitempty"`
	// Namespace and Cluster the backup is taken from.
	Namespace string `json:"namespace,omitempty"`
	Cluster   string `json:"cluster,omitempty"`
	// SourceInstance is this pod; SourceRole "primary" or "replica".
	SourceInstance string `json:"sourceInstance,omitempty"`
	SourceRole     string `json:"sourceRole,omitempty"`
	// Flavor is "mariadb" or "mysql".
	Flavor string `json:"flavor,omitempty"`
}

// BackupRequest is the body of POST /v1/backups.
type BackupRequest struct {
	// ID names the job; the caller chooses it (e.g. the MySQLBackup's UID). Starting a known
	// ID again returns that job's status, so a caller that restarted resumes polling; a
	// failed backup is retried under a new ID. 1 to 128 characters of [A-Za-z0-9._-].
	ID string `json:"id"`
	// Store is where the backup goes (required).
	Store StoreConfig `json:"store"`
	// Prefix is the backup's prefix inside the store.
	Prefix string `json:"prefix"`
	// DB is how to reach the database server.
	DB DBConn `json:"db"`
	// Meta describes the backup for its manifest.
	Meta BackupMeta `json:"meta"`
}

// String describes the request without its password and store configuration.
func (r BackupRequest) String() string {
	return fmt.Sprintf("backup %s (prefix %q, db %s, meta %+v)", r.ID, r.Prefix, r.DB, r.Meta)
}

// MarshalLog implements logr.Marshaler: the request without its password and store.
func (r BackupRequest) MarshalLog() any {
	return struct {
		ID, Prefix, DB string
		Meta           BackupMeta
	}{r.ID, r.Prefix, r.DB.String(), r.Meta}
}

// BackupPhase is where a backup job is.
type BackupPhase string

// The phases of a backup job: Running, then Succeeded or Failed.
const (
	BackupRunning   BackupPhase = "Running"
	BackupSucceeded BackupPhase = "Succeeded"
	BackupFailed    BackupPhase = "Failed"
)

// BackupStatus is a backup job as the agent reports it.
type BackupStatus struct {
	ID    string      `json:"id"`
	Phase BackupPhase `json:"phase"`
	// StoredBytes is how much has been stored so far (the manifest's total once Succeeded).
	StoredBytes int64 `json:"storedBytes"`
	// StartedAt and FinishedAt (zero while Running) are the agent's clock.
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// Manifest is the committed backup's manifest, when Succeeded.
	Manifest *backup.Manifest `json:"manifest,omitempty"`
	// Error says why the job failed, when Failed ("cancelled" after DELETE).
	Error string `json:"error,omitempty"`
}

// Finished reports whether the job has ended (Succeeded or Failed).
func (s BackupStatus) Finished() bool { return s.Phase == BackupSucceeded || s.Phase == BackupFailed }

// CloneRequest is the body of POST /v1/clone.
type CloneRequest struct {
	// DB is how to reach the database server.
	DB DBConn `json:"db"`
}

// ErrorResponse is the body of every 4xx/5xx answer.
type ErrorResponse struct {
	Error string `json:"error"`
	// RunningID names the running backup on a 409.
	RunningID string `json:"runningID,omitempty"`
	// Code says which known condition the error is, for the client to match (e.g.
	// "binlogs-purged" from /v1/keep).
	Code string `json:"code,omitempty"`
}

// validID reports whether id is 1 to 128 characters of [A-Za-z0-9._-].
func validID(id string) bool {
	if id == "" || len(id) > 128 || id == "." || id == ".." {
		return false
	}
	for _, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

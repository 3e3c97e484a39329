// Package topology is Dolphin's per-cluster database loop: observe every instance in
// parallel with a deadline, decide (a pure function of the observation), then act by running
// the decided plan of small idempotent steps. It touches databases only; it meets the
// Kubernetes side through a Reporter (status, role labels, events).
package topology

import (
	"database/sql"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// InstanceView is what one observation learned about one instance.
type InstanceView struct {
	// Name identifies the instance (the pod name in a cluster).
	Name string
	// Host and Port are where other instances reach it (replication source address).
	Host string
	Port int
	// TLSServerName is the member's (Member.TLSServerName): set when the instance serves TLS.
	TLSServerName string
	// Absent is the member's (Member.Absent): the instance has no pod.
	Absent bool
	// Stopping is the member's (Member.Stopping): its pod is being deleted.
	Stopping bool
	// Status is nil when the instance could not be observed; Err then says why.
	Status *dbsql.Status
	Err    error
	// Fresh is true when the instance answered only to the bootstrap credentials: a newly
	// initialised server whose accounts Dolphin has not created yet.
	Fresh bool
	// NeedsAccounts is true until this engine has made sure of Dolphin's accounts on the
	// instance (after a start, when the instance is new, or when it has an older
	// credentials generation than the current one).
	NeedsAccounts bool
	// NeedsVariables is true until this engine has set the run-time variables on the
	// instance (Config.Variables).
	NeedsVariables bool
	// CredentialsGeneration is the credentials generation the operator logged in with.
	CredentialsGeneration string
	// ReplicationGeneration is the generation of the replication password the instance
	// was last pointed at its source with ("" when unknown).
	ReplicationGeneration string
	// ReceiverSilentFor is how long the replica's receiver has got nothing from its
	// source, neither an event nor a heartbeat (dbsql.ReplicaStatus.Progress unchanged over
	// this engine's observations); 0 when it got something since the previous observation
	// or when unknown. A receiver still "running" but silent for longer than the heartbeat
	// period is not evidence that its source is alive.
	ReceiverSilentFor time.Duration
}

// Reachable reports whether the instance answered.
func (v InstanceView) Reachable() bool { return v.Status != nil }

// Settings are the parts of the spec the decision depends on.
type Settings struct {
	// FailoverEnabled allows automatic failover.
	FailoverEnabled bool
	// DetectionAttempts is how many consecutive observations must miss the primary before
	// it is declared lost.
	DetectionAttempts int
	// AckAlone allows the primary to acknowledge writes no replica has received once no
	// replica acknowledged for SemiSyncFallbackTimeout (spec.durability Preferred). When
	// false (Required) semi-sync never falls back: writes wait for a replica.
	AckAlone bool
	// FallbackAfter replaces SemiSyncFallbackTimeout when AckAlone (zero: that default).
	FallbackAfter time.Duration
	// MaxReplicaLag is how far behind its source a replica may be and still be published
	// (spec.replicaService.maxLagSeconds); zero: no limit.
	MaxReplicaLag time.Duration
	// Paused (spec.paused) withholds every plan but those that protect the data and the
	// clients: a failover of a lost primary (when FailoverEnabled) and the fence of a second
	// writable server. Nothing is repaired, tuned or switched over until it is false.
	Paused bool
}

// SemiSyncFallbackTimeout is how long a primary that may acknowledge writes alone (Settings.
// AckAlone) waits for a replica's acknowledgement before it does.
const SemiSyncFallbackTimeout = 30 * time.Second

// semiSyncNeverMS is the largest semi-sync timeout both flavors accept, in milliseconds:
// about 49.7 days, which for a write waiting on a replica is never.
const semiSyncNeverMS = 4294967295

// SemiSyncTimeoutMS is the semi-sync timeout the primary runs with under these settings.
func (s Settings) SemiSyncTimeoutMS() int64 {
	if s.AckAlone {
		if s.FallbackAfter > 0 {
			return s.FallbackAfter.Milliseconds()
		}
		return SemiSyncFallbackTimeout.Milliseconds()
	}
	return semiSyncNeverMS
}

// AckedAlone records writes a primary acknowledged while no replica had received them:
// semi-sync had fallen back to asynchronous replication (Settings.AckAlone), or its source
// side was restarted to end a stall (docs/design/0010). Until a replica holds UpTo, those
// writes may exist on that primary only, so a failover from it promotes only a candidate
// that holds them, or waits for it, unless a person accepts the loss (docs/design/0043).
type AckedAlone struct {
	// Primary is the instance that acknowledged them.
	Primary string
	// UpTo is the primary's executed set the last time it was seen acknowledging alone.
	UpTo dbsql.GTIDSet
	// Since is when it was first seen doing so.
	Since time.Time
	// Refresh asks the next observation to move UpTo to the primary's executed set: its
	// source side was restarted after this one, which may have released a commit beyond it.
	Refresh bool
}

// FailoverProgress is persisted while a failover runs, so that a restarted operator resumes
// it instead of starting over blind.
type FailoverProgress struct {
	// From is the lost primary.
	From string `json:"from"`
	// Fenced is true once every candidate stopped receiving (positions are frozen).
	Fenced bool `json:"fenced"`
	// Received is the most any candidate was seen to have received from the lost primary
	// since the failover began (nil: nothing seen yet), and ReceivedBy the candidate that had
	// it. No candidate holding less is promoted: a write the lost primary acknowledged may
	// exist only there — a replica lost meanwhile, or restarted, which discards the relay log
	// it had not applied (docs/design/0039).
	Received   dbsql.GTIDSet `json:"-"`
	ReceivedBy string        `json:"-"`
}

// FailoverTail is what a failover promoted that the other replicas may not hold yet: the
// transactions the lost primary sent, up to the most any candidate had received, which the
// promoted instance applied. A write the lost primary acknowledged may exist only on the new
// primary until every replica has fetched it, so a failover of the new primary in that window
// promotes only a candidate holding it, as the failover that promoted it did (restarting the
// lost one and waiting otherwise). It ends once every other instance holds it
// (docs/design/0039).
type FailoverTail struct {
	// From is the primary the failover replaced.
	From string
	// Received is the transactions that must not be given up.
	Received dbsql.GTIDSet
	// HeldBy is the instance promoted with them.
	HeldBy string
}

// SwitchoverRequest asks for a planned change of primary.
type SwitchoverRequest struct {
	// To is the instance to promote; empty lets Dolphin choose the most advanced replica.
	To string
	// Fenced is true once the old primary is read-only and its clients are disconnected.
	Fenced bool
	// From is the primary that was fenced (set with Fenced). A request whose From is no longer
	// the primary (a failover came in between) is dropped: its fence and the GTIDs the target
	// must apply describe another primary.
	From string
}

// ClusterView is one observation of the whole cluster plus the state carried between
// observations.
type ClusterView struct {
	// Instances are the desired instances in ordinal order.
	Instances []InstanceView
	// Primary is the last known primary ("" before bootstrap).
	Primary string
	// PrimaryMisses counts consecutive observations in which the primary did not answer.
	PrimaryMisses int
	// Errant are instances previously found to hold transactions the primary lacks.
	Errant map[string]bool
	// Replaced are the primaries an unplanned failover replaced that have not been the
	// primary again since: one that comes back errant (or meets error 1236: MariaDB compares
	// GTID sequence numbers, so a diverged history can look like a position behind) may hold
	// the only copy of writes it acknowledged, and is not re-cloned without consent
	// (docs/design/0043). Replicating again is no proof it holds nothing the primary lacks.
	Replaced map[string]bool
	// Failover is the progress of a running failover, nil otherwise.
	Failover *FailoverProgress
	// Switchover is a pending planned switchover, nil otherwise.
	Switchover *SwitchoverRequest
	// Tail is what the last failover promoted that not every replica holds yet, nil
	// otherwise.
	Tail *FailoverTail
	// AckedAlone is what a primary acknowledged that no replica may hold, nil otherwise.
	AckedAlone *AckedAlone
	// Seen is what each instance held (received, or executed) when this engine last observed
	// it answering: a replica lost together with the primary may hold acknowledged writes no
	// candidate has (docs/design/0045).
	Seen map[string]dbsql.GTIDSet
	// Unseen are instances the last status showed answering that this engine has not
	// observed since it started (an operator restart): what they hold is unknown, so a
	// failover waits for them rather than promote a candidate that may hold less.
	Unseen map[string]bool
	// PrimarySeenAt is when this engine last observed the recorded primary answering (zero:
	// not since it started at Started). A candidate whose server started after it may have
	// discarded what it received and had not applied (MariaDB re-fetches on a restart).
	PrimarySeenAt, Started time.Time
	// Now is the time of the observation.
	Now time.Time
	// AcceptLossFrom names the lost primary whose waiting failover may promote a candidate
	// holding less than was received (Engine.AcceptFailoverLoss): a user chose a primary over
	// the writes only the lost primary still holds.
	AcceptLossFrom string
	// SwitchoverWaited is how long the pending switchover has been waiting since it was
	// requested (since the operator started, for a request it resumed).
	SwitchoverWaited time.Duration
	Settings         Settings
	// CredentialsGeneration is the current credentials generation ("" when not tracked).
	CredentialsGeneration string
	// TLSCAFile is the CA file replicas verify a source serving TLS with (Config.TLSCAFile).
	TLSCAFile string
	// TLSRequired asks for plain TCP logins to be refused once every instance serves TLS
	// (Config.TLSRequired).
	TLSRequired bool
	// External is the server outside the cluster the primary replicates from until a cutover
	// (Config.External); nil when the cluster is its own source of writes.
	External *ExternalSource
	// Verified is the ID of the last verification made against External ("" when none).
	Verified string
	// CutoverFailed is the ID of the last cutover request that failed ("" when none).
	CutoverFailed string
	// Fallback is the way back to the server after a cutover (Config.Fallback), nil when
	// the cluster was not cut over or keeps none. FallbackStarted is the outcome of pointing
	// the server at the cluster (nil before), FallbackSeen what the server reports of it,
	// FallBackFailed the ID of the last fall back that failed, and FellBack the fall back
	// once done: the cluster is then read-only for good.
	Fallback        *Fallback
	FallbackStarted *FallbackStart
	FallbackSeen    *FallbackObservation
	FallBackFailed  string
	FellBack        *CutoverRecord
}

// ExternalSource is a server outside the cluster that the cluster follows after copying it
// (a migration): the primary stays read-only and replicates from it, semi-sync towards its
// own replicas, so that what it applies is on a replica too before it moves on; the replicas
// replicate from the primary as always. Every promotion (bootstrap, failover, switchover)
// points the new primary at the source instead of opening it for writes, until a cutover.
type ExternalSource struct {
	// Host and Port are where the cluster's servers reach the source.
	Host string
	Port int
	// User and Password are the replication account on the source.
	User, Password string
	// TLS, when set, is how the servers verify the source (the CA file as they see it).
	TLS *dbsql.SourceTLS
	// ID identifies the address, account and TLS settings (a hash of them): the primary is
	// pointed at the source again when it changes.
	ID string
	// Cutover asks for the cutover by an ID of the request ("" asks none): writes move from
	// the source to the cluster (StepCutover). The cutover's record (Persisted.Cutover) ends
	// following; a failed attempt (Persisted.CutoverFailed) is not made again for the same ID.
	Cutover string
	// Verify asks for a verification of the copy (StepVerifyExternal) by an ID of the
	// request: it runs once per ID ("" asks none).
	Verify string
	// FallBack is the fall-back request set while the cluster follows (""): the cutover
	// records it as one that never acts (CutoverRecord.FallBackIgnored).
	FallBack string
	// Open connects the operator to the source (the account, and TLS with the CA in memory),
	// for the cutover's fence.
	Open func() (*sql.DB, error) `json:"-"`
	// Unavailable, when set, says why the account is not known (its Secret was deleted or
	// lacks a key): replication that runs goes on with what the servers hold, but no instance
	// is pointed at the source, and no cutover or verification begins, until it is back.
	Unavailable string
}

// VerificationRecord is the outcome of a verification of a following cluster against its
// source (migrate.Verify): every user table's checksum on both sides at one GTID position.
type VerificationRecord struct {
	// ID is the request's.
	ID string
	// At is when it ended.
	At time.Time
	// Position is the source's GTID position both sides were compared at.
	Position string
	// Tables is how many tables were compared.
	Tables int
	// Mismatched are the tables whose checksums differ.
	Mismatched []string
	// Error is why the verification could not be made ("" when it was).
	Error string
}

// CutoverFailure is a cutover attempt that failed before the primary opened (undone, or
// not: Error says).
type CutoverFailure struct {
	// ID is the request's.
	ID string
	// At is when it failed.
	At time.Time
	// Error is what failed, and what was undone.
	Error string
}

// CutoverRecord is the cutover of a cluster that followed an external source: from then on
// it is its own source of writes.
type CutoverRecord struct {
	// Source is the server the cluster followed (host:port).
	Source string
	// Instance is the instance opened for writes.
	Instance string
	// At is when it was opened.
	At time.Time
	// Position is the source's final GTID position, which the instance held when it opened
	// ("" when the record was rebuilt from a writable primary after an operator restart).
	Position string
	// Pause is how long no server took writes: from the source's fence to the opening.
	Pause time.Duration
	// Warning is what a person should look at (a write that reached the source after its
	// fence), "" when none.
	Warning string
	// FallBackIgnored is the fall-back request already set when the cluster was cut over
	// (ExternalSource.FallBack): it never moves writes back, a new value does.
	FallBackIgnored string
}

// Fallback is the way back to the server a cluster was cut over from
// (spec.bootstrap.external.fallback): after the cutover the server replicates from the
// cluster's primary, and a request moves writes back to it (StepFallBack).
type Fallback struct {
	// Source names the server (host:port), for messages and records.
	Source string
	// Open connects the operator to the server (the migration account).
	Open func() (*sql.DB, error) `json:"-"`
	// PrimaryHost and PrimaryPort are where the server reaches the cluster's primary.
	PrimaryHost string
	PrimaryPort int
	// FallBack asks to move writes back by an ID of the request ("" asks none).
	FallBack string
	// AccountID identifies the account Open uses (a hash), so that a changed one restarts
	// the engine with it.
	AccountID string
}

// FallbackStart is the outcome of pointing the server at the cluster after the cutover.
type FallbackStart struct {
	// At is when it was tried.
	At time.Time
	// Error is why it failed ("" when the server was pointed at the cluster).
	Error string
	// Permanent is true when trying again cannot help (the server took writes after the
	// cutover's fence: it is no longer at the final position).
	Permanent bool
	// Generation is the credentials generation whose replication password the server was
	// given: when the cluster's credentials change, the server is pointed again.
	Generation string
}

// FallbackObservation is what the server reports of its replication from the cluster.
type FallbackObservation struct {
	// Replicating is true while its receiver and applier both run.
	Replicating bool
	// Lag is Seconds_Behind_Master, when known.
	Lag *int64
	// Error is the last error of its replication, or why it could not be read.
	Error string
	// Read is true when the server answered (Detached and Writable are known).
	Read bool
	// Detached is true when the server has no replication connection (a fall back detaches
	// it before it opens it); Writable when its read_only is off.
	Detached, Writable bool
}

// replicationGeneration is what an instance pointed at the source records as its
// replication generation (InstanceView.ReplicationGeneration).
func (x *ExternalSource) replicationGeneration() string { return "external:" + x.ID }

// String names the source for messages.
func (x *ExternalSource) String() string { return net.JoinHostPort(x.Host, strconv.Itoa(x.Port)) }

// member is the instance's address as a Member.
func (in InstanceView) member() Member {
	return Member{Name: in.Name, Host: in.Host, Port: in.Port, TLSServerName: in.TLSServerName, Absent: in.Absent, Stopping: in.Stopping}
}

// replicationTLSMatches reports whether a replica's replication connection is configured as
// want says (nil: plain).
func replicationTLSMatches(rs *dbsql.ReplicaStatus, want *dbsql.SourceTLS) bool {
	if want == nil {
		return !rs.SSL
	}
	return rs.SSL && rs.SSLCAFile == want.CAFile && rs.SSLVerifyName == want.VerifyName
}

func (v ClusterView) instance(name string) (InstanceView, bool) {
	for _, in := range v.Instances {
		if in.Name == name {
			return in, true
		}
	}
	return InstanceView{}, false
}

// StepKind names an action on one instance.
type StepKind string

// The steps a plan is made of. Each is idempotent: running it twice leaves the same state.
const (
	// StepEnsureAccounts creates Dolphin's accounts (and locks install-time root accounts).
	StepEnsureAccounts StepKind = "EnsureAccounts"
	// StepStopIO stops receiving from the source (fencing before a failover).
	StepStopIO StepKind = "StopIO"
	// StepFence makes an instance read-only, turns its semi-sync source side off and
	// disconnects its clients.
	StepFence StepKind = "Fence"
	// StepRefuseClients makes the instance refuse application logins (an init_connect that
	// fails; Dolphin's own account is exempt) and disconnects its clients, Dolphin's own
	// spared: a switchover's fenced primary, right before the promotion, so that no reader
	// stays on it across the promotion — it is a replica, and stale, from then on.
	StepRefuseClients StepKind = "RefuseClients"
	// StepWaitApplied waits until the instance has applied GTID.
	StepWaitApplied StepKind = "WaitApplied"
	// StepPromote makes the instance the primary: replication reset, semi-sync source
	// on (when SemiSync), read-only off.
	StepPromote StepKind = "Promote"
	// StepReplicate points the instance at Source and starts replication; Rejoin first
	// seeds the replication position from the instance's own binary log.
	StepReplicate StepKind = "Replicate"
	// StepStartReplication starts stopped replication threads.
	StepStartReplication StepKind = "StartReplication"
	// StepStopReplication stops replication (an errant instance is kept out of the way).
	StepStopReplication StepKind = "StopReplication"
	// StepSemiSyncSource turns the semi-sync source side on or off (SemiSync).
	StepSemiSyncSource StepKind = "SemiSyncSource"
	// StepApplyVariables sets the run-time variables (SET GLOBAL) of the configuration.
	StepApplyVariables StepKind = "ApplyVariables"
	// StepSecureTransport turns require_secure_transport on or off (Secure).
	StepSecureTransport StepKind = "SecureTransport"
	// StepRestartSemiSyncSource turns the semi-sync source side off and on again, which
	// ends a MariaDB ack-receiver stall (see dbsql.SemiSyncStatus.StalledDumps).
	StepRestartSemiSyncSource StepKind = "RestartSemiSyncSource"
	// StepSemiSyncTimeout sets the primary's semi-sync timeout to Settings.SemiSyncTimeoutMS.
	StepSemiSyncTimeout StepKind = "SemiSyncTimeout"
	// StepVerifyExternal compares every user table of the external source and of the
	// instance, the primary that follows it, at one GTID position of the source
	// (migrate.Verify): its replication is stopped meanwhile and started again.
	StepVerifyExternal StepKind = "VerifyExternal"
	// StepCutover moves writes from the external source to the instance, the primary that
	// follows it: the source fenced (read_only, its clients' sessions ended), the instance
	// caught up to the source's final position, detached and opened (migrate.Cutover).
	StepCutover StepKind = "Cutover"
	// StepStartFallback points the server a cluster was cut over from at the instance, the
	// primary, from the cutover's final position (migrate.Fallback): the way back.
	StepStartFallback StepKind = "StartFallback"
	// StepFallBack moves writes back from the instance, the primary, to that server: the
	// instance fenced (read_only, its clients' sessions ended), the server caught up to its
	// final position, detached and opened (migrate.Cutover the other way round).
	StepFallBack StepKind = "FallBack"
	// StepFollowExternal makes the instance the primary of a cluster that follows an
	// external source (ClusterView.External): its semi-sync source side on (when SemiSync),
	// read-only kept on, pointed at the source and replicating from it.
	StepFollowExternal StepKind = "FollowExternal"
)

// Step is one action of a plan.
type Step struct {
	Kind     StepKind
	Instance string
	// Source is the instance to replicate from (StepReplicate).
	Source string
	// GTID is the set to wait for (StepWaitApplied).
	GTID dbsql.GTIDSet
	// Rejoin seeds the position of a former primary (StepReplicate).
	Rejoin bool
	// SemiSync enables the semi-sync source side (StepPromote, StepSemiSyncSource).
	SemiSync bool
	// Secure makes the instance refuse plain TCP logins (StepSecureTransport).
	Secure bool
}

func (s Step) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s(%s", s.Kind, s.Instance)
	if s.Source != "" {
		fmt.Fprintf(&b, " from %s", s.Source)
	}
	if s.GTID != nil {
		fmt.Fprintf(&b, " gtid %s", s.GTID)
	}
	if s.Rejoin {
		b.WriteString(" rejoin")
	}
	if s.Kind == StepPromote || s.Kind == StepSemiSyncSource || s.Kind == StepFollowExternal {
		fmt.Fprintf(&b, " semisync=%t", s.SemiSync)
	}
	if s.Kind == StepSecureTransport {
		fmt.Fprintf(&b, " on=%t", s.Secure)
	}
	b.WriteString(")")
	return b.String()
}

package topology

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// Small builders for observations, so that each case reads like the situation it covers.

func gtid(s string) dbsql.GTIDSet {
	g, err := dbsql.ParseMariaDBGTID(s)
	if err != nil {
		panic(err)
	}
	return g
}

type ib struct{ v InstanceView }

func inst(i int) *ib {
	name := fmt.Sprintf("db-%d", i)
	return &ib{InstanceView{Name: name, Host: name + ".svc", Port: 3306,
		Status: &dbsql.Status{ReadOnly: true, Executed: gtid("")}}}
}
func (b *ib) down() *ib  { b.v.Status, b.v.Err = nil, errors.New("connection refused"); return b }
func (b *ib) fresh() *ib { b.v.Fresh = true; return b }
func (b *ib) writable() *ib {
	b.v.Status.ReadOnly = false
	b.v.Status.SemiSync.SourceEnabled, b.v.Status.SemiSync.SourceActive = true, true
	return b
}
func (b *ib) executed(s string) *ib  { b.v.Status.Executed = gtid(s); return b }
func (b *ib) serverID(id uint32) *ib { b.v.Status.ServerID = id; return b }
func (b *ib) replicaOf(src int, received string) *ib {
	host := fmt.Sprintf("db-%d.svc", src)
	b.v.Status.Replica = &dbsql.ReplicaStatus{SourceHost: host, SourcePort: 3306, IORunning: true, SQLRunning: true, Received: gtid(received)}
	return b
}
func (b *ib) ioStopped() *ib { b.v.Status.Replica.IORunning = false; return b }

// silent says the receiver got nothing from its source for d (InstanceView.ReceiverSilentFor).
func (b *ib) silent(d time.Duration) *ib { b.v.ReceiverSilentFor = d; return b }

// heartbeat sets the replica's heartbeat period.
func (b *ib) heartbeat(d time.Duration) *ib { b.v.Status.Replica.HeartbeatPeriod = d; return b }

// tls marks the instance as serving TLS (its pod started with a certificate).
func (b *ib) tls() *ib { b.v.TLSServerName = b.v.Host; return b }

// replicatingOverTLS marks its replication connection as using TLS with the test CA file,
// the source's name verified.
func (b *ib) replicatingOverTLS() *ib {
	r := b.v.Status.Replica
	r.SSL, r.SSLCAFile, r.SSLVerifyName = true, testCAFile, true
	return b
}

const testCAFile = "/etc/mysql/tls/ca.crt"

func withCAFile(v ClusterView) ClusterView { v.TLSCAFile = testCAFile; return v }

func tlsRequired(v ClusterView) ClusterView { v.TLSRequired = true; return withCAFile(v) }

// secure marks the instance as refusing plain TCP logins.
func (b *ib) secure() *ib { b.v.Status.RequireSecureTransport = true; return b }
func (b *ib) sqlError(errno int) *ib {
	b.v.Status.Replica.SQLRunning, b.v.Status.Replica.LastSQLErrno = false, errno
	return b
}

func cluster(primary string, ins ...*ib) ClusterView {
	v := ClusterView{Primary: primary, Settings: Settings{FailoverEnabled: true, DetectionAttempts: 3}}
	for _, b := range ins {
		v.Instances = append(v.Instances, b.v)
	}
	// A writable server's semi-sync clients are the replicas receiving from it, as
	// Rpl_semi_sync_master_clients counts them.
	for i, src := range v.Instances {
		if src.Status == nil || src.Status.ReadOnly {
			continue
		}
		n := 0
		for _, r := range v.Instances {
			if r.Status != nil && r.Status.Replica != nil && r.Status.Replica.IORunning &&
				r.Status.Replica.SourceHost == src.Host && r.Status.Replica.SourcePort == src.Port {
				n++
			}
		}
		v.Instances[i].Status.SemiSync.Clients = n
	}
	return v
}

func steps(d Decision) []string {
	var out []string
	for _, s := range d.Plan {
		out = append(out, s.String())
	}
	return out
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name    string
		view    func() ClusterView
		state   State
		primary string
		plan    []string
		errant  []string
	}{
		{"bootstrap a single instance",
			func() ClusterView { return cluster("", inst(0).fresh()) },
			StateBootstrap, "db-0", []string{"EnsureAccounts(db-0)", "Promote(db-0 semisync=false)"}, nil},
		{"bootstrap three instances",
			func() ClusterView { return cluster("", inst(0).fresh(), inst(1).fresh(), inst(2).fresh()) },
			StateBootstrap, "db-0", []string{"EnsureAccounts(db-0)", "EnsureAccounts(db-1)", "EnsureAccounts(db-2)",
				"Promote(db-0 semisync=true)", "Replicate(db-1 from db-0)", "Replicate(db-2 from db-0)"}, nil},
		{"bootstrap waits for every instance",
			func() ClusterView { return cluster("", inst(0), inst(1).down(), inst(2)) },
			StateWaiting, "", nil, nil},
		{"bootstrap picks the instance with the most data",
			func() ClusterView { return cluster("", inst(0), inst(1).executed("0-2-5"), inst(2).executed("0-2-3")) },
			StateBootstrap, "db-1", []string{"Promote(db-1 semisync=true)", "Replicate(db-0 from db-1)", "Replicate(db-2 from db-1 rejoin)"}, nil},
		{"healthy cluster does nothing",
			healthy3, StateHealthy, "db-0", nil, nil},
		{"a replica connection stuck ending on the primary (MariaDB ack-receiver stall): restart its semi-sync source side",
			func() ClusterView {
				v := healthy3()
				ss := &v.Instances[0].Status.SemiSync
				ss.SourceActive, ss.Clients, ss.StalledDumps = false, 0, 1
				return v
			},
			StateDegraded, "db-0", []string{"RestartSemiSyncSource(db-0)"}, nil},
		{"a stuck connection while another replica acknowledges is left alone (no stall)",
			func() ClusterView {
				v := healthy3()
				ss := &v.Instances[0].Status.SemiSync
				ss.Clients, ss.StalledDumps = 1, 1
				return v
			},
			StateHealthy, "db-0", nil, nil},
		{"TLS turned on: replicas of a source that serves TLS are re-pointed over TLS",
			func() ClusterView {
				return withCAFile(cluster("db-0", inst(0).tls().writable().executed("0-1-10"),
					inst(1).tls().executed("0-1-10").replicaOf(0, "0-1-10"),
					inst(2).tls().executed("0-1-10").replicaOf(0, "0-1-10").replicatingOverTLS()))
			},
			StateHealing, "db-0", []string{"Replicate(db-1 from db-0)"}, nil},
		{"a replica whose own pod has no certificate yet replicates in plain text (it has no CA to verify with)",
			func() ClusterView {
				return withCAFile(cluster("db-0", inst(0).tls().writable().executed("0-1-10"),
					inst(1).executed("0-1-10").replicaOf(0, "0-1-10")))
			},
			StateHealthy, "db-0", nil, nil},
		{"a source restarted without TLS: its replicas go back to plain text",
			func() ClusterView {
				return withCAFile(cluster("db-0", inst(0).writable().executed("0-1-10"),
					inst(1).tls().executed("0-1-10").replicaOf(0, "0-1-10").replicatingOverTLS()))
			},
			StateHealing, "db-0", []string{"Replicate(db-1 from db-0)"}, nil},
		{"replication over TLS as wanted does nothing",
			func() ClusterView {
				return withCAFile(cluster("db-0", inst(0).tls().writable().executed("0-1-10"),
					inst(1).tls().executed("0-1-10").replicaOf(0, "0-1-10").replicatingOverTLS()))
			},
			StateHealthy, "db-0", nil, nil},
		{"TLS required for clients and every instance serves TLS: plain logins are refused everywhere",
			func() ClusterView {
				return tlsRequired(cluster("db-0", inst(0).tls().writable().executed("0-1-10"),
					inst(1).tls().executed("0-1-10").replicaOf(0, "0-1-10").replicatingOverTLS().secure()))
			},
			StateHealing, "db-0", []string{"SecureTransport(db-0 on=true)"}, nil},
		{"TLS required but an instance serves none yet (rollout): plain logins stay allowed, and are allowed again where refused",
			func() ClusterView {
				return tlsRequired(cluster("db-0", inst(0).tls().writable().executed("0-1-10").secure(),
					inst(1).executed("0-1-10").replicaOf(0, "0-1-10")))
			},
			StateHealing, "db-0", []string{"SecureTransport(db-0 on=false)"}, nil},
		{"TLS no longer required: plain logins are allowed again",
			func() ClusterView {
				return withCAFile(cluster("db-0", inst(0).tls().writable().executed("0-1-10").secure(),
					inst(1).tls().executed("0-1-10").replicaOf(0, "0-1-10").replicatingOverTLS().secure()))
			},
			StateHealing, "db-0", []string{"SecureTransport(db-0 on=false)", "SecureTransport(db-1 on=false)"}, nil},
		{"TLS required while an instance's pod is being re-created: plain logins stay refused on the others",
			func() ClusterView {
				v := tlsRequired(cluster("db-0", inst(0).tls().writable().executed("0-1-10").secure(),
					inst(1).tls().executed("0-1-10").replicaOf(0, "0-1-10").replicatingOverTLS().secure(),
					inst(2).down()))
				v.Instances[2].Absent = true
				return v
			},
			StateDegraded, "db-0", nil, nil},
		{"TLS required and refused everywhere: nothing to do",
			func() ClusterView {
				return tlsRequired(cluster("db-0", inst(0).tls().writable().executed("0-1-10").secure(),
					inst(1).tls().executed("0-1-10").replicaOf(0, "0-1-10").replicatingOverTLS().secure()))
			},
			StateHealthy, "db-0", nil, nil},
		{"no replica connected and none Dolphin can re-point: the writes wait, and the state says so",
			func() ClusterView {
				return cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).down(), inst(2).down())
			},
			StateDegraded, "db-0", nil, nil},
		{"a stopped replica is restarted",
			func() ClusterView {
				return cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped())
			},
			StateHealing, "db-0", []string{"StartReplication(db-1)"}, nil},
		{"a restarted primary that came back read-only is made writable again",
			func() ClusterView {
				return cluster("db-0", inst(0).executed("0-1-10"), inst(1).executed("0-1-10").replicaOf(0, "0-1-10"))
			},
			StateHealing, "db-0", []string{"Promote(db-0 semisync=true)"}, nil},
		{"primary missed fewer observations than the threshold",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).replicaOf(0, "0-1-10"), inst(2).replicaOf(0, "0-1-10"))
				v.PrimaryMisses = 2
				return v
			},
			StatePrimarySuspect, "db-0", nil, nil},
		{"primary lost: first fence every candidate",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).executed("0-1-8").replicaOf(0, "0-1-9").ioStopped(), inst(2).executed("0-1-7").replicaOf(0, "0-1-10").ioStopped())
				v.PrimaryMisses = 3
				return v
			},
			StateFailover, "db-0", []string{"StopIO(db-1)", "StopIO(db-2)"}, nil},
		{"primary unreachable for Dolphin but replicas still receive from it: no failover",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).replicaOf(0, "0-1-9"), inst(2).replicaOf(0, "0-1-10").ioStopped())
				v.PrimaryMisses = 9
				return v
			},
			StatePrimarySuspect, "db-0", nil, nil},
		{"primary hung: receivers show as running but got nothing for longer than the heartbeat period: fence",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).replicaOf(0, "0-1-9").silent(ReceiverSilence), inst(2).replicaOf(0, "0-1-10").silent(2*ReceiverSilence))
				v.PrimaryMisses = 3
				return v
			},
			StateFailover, "db-0", []string{"StopIO(db-1)", "StopIO(db-2)"}, nil},
		{"primary unreachable for Dolphin; one receiver silent, the other heard from it lately: no failover",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).replicaOf(0, "0-1-9").silent(5*ReceiverSilence), inst(2).replicaOf(0, "0-1-10").silent(ReceiverSilence-1))
				v.PrimaryMisses = 3
				return v
			},
			StatePrimarySuspect, "db-0", nil, nil},
		{"heartbeats every 0.5 s: receivers silent for 1 s are silent enough: fence",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(),
					inst(1).replicaOf(0, "0-1-9").heartbeat(500*time.Millisecond).silent(time.Second),
					inst(2).replicaOf(0, "0-1-10").heartbeat(500*time.Millisecond).silent(1200*time.Millisecond))
				v.PrimaryMisses = 3
				return v
			},
			StateFailover, "db-0", []string{"StopIO(db-1)", "StopIO(db-2)"}, nil},
		{"heartbeats every 1 s (a replica configured before 0.5 s): 1.2 s of silence is not enough",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(),
					inst(1).replicaOf(0, "0-1-9").heartbeat(time.Second).silent(1200*time.Millisecond),
					inst(2).replicaOf(0, "0-1-10").heartbeat(500*time.Millisecond).silent(5*time.Second))
				v.PrimaryMisses = 3
				return v
			},
			StatePrimarySuspect, "db-0", nil, nil},
		{"fenced, but a receiver runs again: fence again before choosing",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).replicaOf(0, "0-1-9"), inst(2).replicaOf(0, "0-1-10").ioStopped())
				v.PrimaryMisses, v.Failover = 1, &FailoverProgress{From: "db-0", Fenced: true}
				return v
			},
			StateFailover, "db-0", []string{"StopIO(db-1)"}, nil},
		{"interrupted promotion: the candidate whose replication was already reset is still chosen",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).executed("0-1-10"), inst(2).executed("0-1-9").replicaOf(0, "0-1-9").ioStopped())
				v.PrimaryMisses, v.Failover = 5, &FailoverProgress{From: "db-0", Fenced: true}
				return v
			},
			StateFailover, "db-1", []string{"Promote(db-1 semisync=true)", "Replicate(db-2 from db-1)"}, nil},
		{"the primary lost before, restarted (no replica, read-only), holds the most: promoted without a wait for what it wrote itself",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).executed("0-1-9").replicaOf(0, "0-1-9").ioStopped(),
					inst(2).serverID(3).executed("0-3-12"))
				v.PrimaryMisses, v.Failover = 5, &FailoverProgress{From: "db-0", Fenced: true}
				return v
			},
			StateFailover, "db-2", []string{"Promote(db-2 semisync=true)", "Replicate(db-1 from db-2)"}, nil},
		{"stale record: the old primary came back read-only while another took over",
			func() ClusterView {
				return cluster("db-0", inst(0).executed("0-1-10"), inst(1).writable().executed("0-2-15"), inst(2).executed("0-2-15").replicaOf(1, "0-2-15"))
			},
			StateHealing, "db-1", []string{"Replicate(db-0 from db-1 rejoin)"}, nil},
		{"primary lost, replicas at different positions: the one that received most wins",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).executed("0-1-9").replicaOf(0, "0-1-9").ioStopped(), inst(2).executed("0-1-7").replicaOf(0, "0-1-10").ioStopped())
				v.PrimaryMisses, v.Failover = 5, &FailoverProgress{From: "db-0", Fenced: true}
				return v
			},
			StateFailover, "db-2", []string{"WaitApplied(db-2 gtid 0-1-10)", "Promote(db-2 semisync=true)", "Replicate(db-1 from db-2)"}, nil},
		{"operator restarted mid-failover after the promotion: the promoted replica is adopted",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped(), inst(2).writable().executed("0-1-10"))
				v.PrimaryMisses = 1
				return v
			},
			StateDegraded, "db-2", []string{"Replicate(db-1 from db-2)"}, nil},
		{"operator restarted mid-failover after fencing: it promotes without fencing again",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped(), inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped())
				v.PrimaryMisses, v.Failover = 1, &FailoverProgress{From: "db-0", Fenced: true}
				return v
			},
			StateFailover, "db-1", []string{"WaitApplied(db-1 gtid 0-1-10)", "Promote(db-1 semisync=true)", "Replicate(db-2 from db-1)"}, nil},
		{"primary restarted behind a replica that received its rolled-back tail: fence the replicas (no wait for them to lose it)",
			func() ClusterView {
				return cluster("db-0", inst(0).serverID(1).executed("0-1-10"),
					inst(1).executed("0-1-11").replicaOf(0, "0-1-12"), inst(2).executed("0-1-10").replicaOf(0, "0-1-10"))
			},
			StateFailover, "db-0", []string{"StopIO(db-1)", "StopIO(db-2)"}, nil},
		{"primary restarted behind a replica, replicas fenced: the replica with the tail is promoted",
			func() ClusterView {
				v := cluster("db-0", inst(0).serverID(1).executed("0-1-10"),
					inst(1).executed("0-1-11").replicaOf(0, "0-1-12").ioStopped(), inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped())
				v.Failover = &FailoverProgress{From: "db-0", Fenced: true}
				return v
			},
			StateFailover, "db-1", []string{"WaitApplied(db-1 gtid 0-1-12)", "Promote(db-1 semisync=true)", "Replicate(db-2 from db-1)"}, nil},
		{"primary restarted behind a replica, failover disabled: neither promoted",
			func() ClusterView {
				v := cluster("db-0", inst(0).serverID(1).executed("0-1-10"), inst(1).executed("0-1-11").replicaOf(0, "0-1-12"))
				v.Settings.FailoverEnabled = false
				return v
			},
			StatePrimaryLost, "db-0", nil, nil},
		{"restarted primary and a replica ahead with its own writes: the primary stays, the replica is errant",
			func() ClusterView {
				return cluster("db-0", inst(0).serverID(1).executed("0-1-10"), inst(1).executed("0-2-11").replicaOf(0, "0-2-11"))
			},
			StateDegraded, "db-0", []string{"Promote(db-0 semisync=true)", "StopReplication(db-1)"}, []string{"db-1"}},
		{"all instances down",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).down(), inst(2).down())
				v.PrimaryMisses = 10
				return v
			},
			StatePrimaryLost, "db-0", nil, nil},
		{"failover disabled",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).replicaOf(0, "0-1-1"))
				v.PrimaryMisses, v.Settings.FailoverEnabled = 9, false
				return v
			},
			StatePrimaryLost, "db-0", nil, nil},
		{"split brain: a replica accepts writes besides the primary",
			func() ClusterView {
				return cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).writable().executed("0-1-10"), inst(2).executed("0-1-10").replicaOf(0, "0-1-10"))
			},
			StateSplitBrain, "db-0", []string{"Fence(db-1)"}, nil},
		{"split brain with the primary lost: everyone fenced, nobody promoted",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).writable(), inst(2).writable())
				v.PrimaryMisses = 9
				return v
			},
			StateSplitBrain, "db-0", []string{"Fence(db-1)", "Fence(db-2)"}, nil},
		{"split brain without a recorded primary",
			func() ClusterView { return cluster("", inst(0).writable(), inst(1).writable()) },
			StateSplitBrain, "", []string{"Fence(db-0)", "Fence(db-1)"}, nil},
		{"errant replica is marked and stopped",
			func() ClusterView {
				return cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).executed("0-2-11").replicaOf(0, "0-1-10"), inst(2).executed("0-1-10").replicaOf(0, "0-1-10"))
			},
			StateDegraded, "db-0", []string{"StopReplication(db-1)"}, []string{"db-1"}},
		{"replica whose applier hit an out-of-order GTID is errant",
			func() ClusterView {
				return cluster("db-0", inst(0).writable().executed("0-1-20"), inst(1).executed("0-2-11").replicaOf(0, "0-1-20").sqlError(1950))
			},
			StateDegraded, "db-0", []string{"StopReplication(db-1)"}, []string{"db-1"}},
		{"errant replica is never promoted",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).executed("0-2-99").replicaOf(0, "0-2-99").ioStopped(), inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped())
				v.PrimaryMisses, v.Failover, v.Errant = 5, &FailoverProgress{From: "db-0", Fenced: true}, map[string]bool{"db-1": true}
				return v
			},
			StateFailover, "db-2", []string{"WaitApplied(db-2 gtid 0-1-10)", "Promote(db-2 semisync=true)"}, []string{"db-1"}},
		{"crashed old primary rejoins as a replica",
			func() ClusterView {
				return cluster("db-1", inst(0).executed("0-1-10"), inst(1).writable().executed("0-1-12"), inst(2).executed("0-1-12").replicaOf(1, "0-1-12"))
			},
			StateHealing, "db-1", []string{"Replicate(db-0 from db-1 rejoin)"}, nil},
		{"old primary with unacknowledged transactions is errant, not rejoined",
			func() ClusterView {
				return cluster("db-1", inst(0).executed("0-1-13"), inst(1).writable().executed("0-1-12"), inst(2).executed("0-1-12").replicaOf(1, "0-1-12"))
			},
			StateDegraded, "db-1", nil, []string{"db-0"}},
		{"switchover: first fence the primary",
			func() ClusterView { v := healthy3(); v.Switchover = &SwitchoverRequest{To: "db-2"}; return v },
			StateSwitchover, "db-0", []string{"Fence(db-0)"}, nil},
		{"switchover: then promote the target and re-point the rest",
			func() ClusterView {
				v := healthy3()
				v.Instances[0].Status.ReadOnly = true
				v.Switchover = &SwitchoverRequest{To: "db-2", Fenced: true}
				return v
			},
			StateSwitchover, "db-2", []string{"WaitApplied(db-2 gtid 0-1-10)", "RefuseClients(db-0)", "Promote(db-2 semisync=true)", "Replicate(db-0 from db-2 rejoin)", "Replicate(db-1 from db-2)"}, nil},
		{"switchover: a target whose receiver stopped after the fence is started before the wait",
			func() ClusterView {
				v := healthy3()
				v.Instances[0].Status.ReadOnly = true
				v.Instances[2].Status.Replica.IORunning = false
				v.Switchover = &SwitchoverRequest{To: "db-2", Fenced: true}
				return v
			},
			StateSwitchover, "db-2", []string{"StartReplication(db-2)", "WaitApplied(db-2 gtid 0-1-10)", "RefuseClients(db-0)", "Promote(db-2 semisync=true)", "Replicate(db-0 from db-2 rejoin)", "Replicate(db-1 from db-2)"}, nil},
		{"switchover resumed after its target was promoted but not recorded: adopted, not fenced as a split brain",
			func() ClusterView {
				v := cluster("db-0",
					inst(0).executed("0-1-10"),
					inst(1).executed("0-1-10").replicaOf(0, "0-1-10"),
					inst(2).writable().executed("0-1-10"))
				v.Switchover = &SwitchoverRequest{To: "db-2", Fenced: true, From: "db-0"}
				return v
			},
			StateHealing, "db-2", []string{"Replicate(db-0 from db-2 rejoin)", "Replicate(db-1 from db-2)"}, nil},
		{"a fenced switchover of a primary replaced by a failover is dropped, never promoted unfenced",
			func() ClusterView {
				v := cluster("db-1",
					inst(0).down(),
					inst(1).writable().executed("0-1-12"),
					inst(2).executed("0-1-12").replicaOf(1, "0-1-12"))
				v.Switchover = &SwitchoverRequest{To: "db-2", Fenced: true, From: "db-0"}
				return v
			},
			StateDegraded, "db-1", nil, nil},
		{"switchover to an unknown instance is refused",
			func() ClusterView { v := healthy3(); v.Switchover = &SwitchoverRequest{To: "db-7"}; return v },
			StateHealthy, "db-0", nil, nil},
		{"lost record of the primary: replicas tell who it is",
			func() ClusterView {
				return cluster("", inst(0).executed("0-1-10"), inst(1).executed("0-1-10").replicaOf(0, "0-1-10"))
			},
			StateHealing, "db-0", []string{"Promote(db-0 semisync=true)"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.view()
			d := Decide(v)
			if d.State != tc.state || d.Primary != tc.primary || !slices.Equal(steps(d), tc.plan) {
				t.Errorf("got  state=%s primary=%s plan=%v\nwant state=%s primary=%s plan=%v\nmessage: %s",
					d.State, d.Primary, steps(d), tc.state, tc.primary, tc.plan, d.Message)
			}
			var errant []string
			for name, yes := range d.Errant {
				if yes {
					errant = append(errant, name)
				}
			}
			slices.Sort(errant)
			if !slices.Equal(errant, tc.errant) {
				t.Errorf("errant %v, want %v", errant, tc.errant)
			}
			if d.Message == "" {
				t.Error("a decision must explain itself")
			}
		})
	}
}

// TestDecideClearsMootSwitchovers: a switchover request that is done (its target adopted) or
// moot (the primary it fenced was failed over) is not carried into the next cycle.
func TestDecideClearsMootSwitchovers(t *testing.T) {
	adopted := cluster("db-0",
		inst(0).executed("0-1-10"),
		inst(1).executed("0-1-10").replicaOf(0, "0-1-10"),
		inst(2).writable().executed("0-1-10"))
	adopted.Switchover = &SwitchoverRequest{To: "db-2", Fenced: true, From: "db-0"}
	failedOver := cluster("db-1",
		inst(0).down(),
		inst(1).writable().executed("0-1-12"),
		inst(2).executed("0-1-12").replicaOf(1, "0-1-12"))
	failedOver.Switchover = &SwitchoverRequest{To: "db-2", Fenced: true, From: "db-0"}
	pending := cluster("db-0",
		inst(0).executed("0-1-10"),
		inst(1).executed("0-1-10").replicaOf(0, "0-1-10"),
		inst(2).executed("0-1-10").replicaOf(0, "0-1-10"))
	pending.Switchover = &SwitchoverRequest{To: "db-2", Fenced: true, From: "db-0"}
	for name, v := range map[string]ClusterView{"target adopted": adopted, "primary failed over": failedOver} {
		if d := Decide(v); d.Switchover != nil {
			t.Errorf("%s: the switchover is still pending: %+v (%s)", name, *d.Switchover, d.Message)
		}
	}
	// The control: a fenced switchover of the current primary goes on (and ends with the
	// promotion, which clears it).
	if d := Decide(pending); d.State != StateSwitchover || d.Primary != "db-2" {
		t.Errorf("a fenced switchover of the current primary: %s %s (%s), want Switchover to db-2", d.State, d.Primary, d.Message)
	}
}

// A primary waiting for acknowledgements with no replica connected says so (the stall is what
// clients feel), unless this very plan re-points or restarts a replica.
func TestDecideNoSemiSyncReplica(t *testing.T) {
	alone := cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).down(), inst(2).down())
	d := Decide(alone)
	if !d.NoSemiSyncReplica || !strings.Contains(d.Message, "no replica acknowledges db-0's writes") {
		t.Errorf("both replicas down: NoSemiSyncReplica=%v, message %q", d.NoSemiSyncReplica, d.Message)
	}
	restarting := cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped())
	if d := Decide(restarting); d.NoSemiSyncReplica {
		t.Errorf("the plan restarts the only replica's receiver, yet NoSemiSyncReplica: %q", d.Message)
	}
	if d := Decide(cluster("db-0", inst(0).writable().executed("0-1-10"),
		inst(1).executed("0-1-10").replicaOf(0, "0-1-10"))); d.NoSemiSyncReplica {
		t.Errorf("a replica receives, yet NoSemiSyncReplica: %q", d.Message)
	}
}

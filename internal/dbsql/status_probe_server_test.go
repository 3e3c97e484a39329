package dbsql

import (
	"context"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// TestServerStatusOneTrip: on real MariaDB servers, a source with semi-sync on and a
// connected semi-sync replica, the one-round-trip probe reads the same Status as the
// query-per-part reading, field by field.
func TestServerStatusOneTrip(t *testing.T) {
	dbtest.RequireMariaDB(t)
	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv := c.Instances
	op := accountsAsRoot(ctx, t, srv)
	must(t, op[1].ConfigureReplication(ctx, semiSyncPair(ctx, t, op, srv)))
	semiSyncConnected(ctx, t, op[0], srv[0].Name)

	for i, in := range op {
		steps, err := in.(*instance).statusInSteps(ctx)
		if err != nil {
			t.Fatalf("%s: in steps: %v", srv[i].Name, err)
		}
		one, err := in.(*instance).statusInOneTrip(ctx)
		if err != nil {
			t.Fatalf("%s: in one trip: %v", srv[i].Name, err)
		}
		// Uptime is whole seconds read at two moments.
		if d := one.Uptime - steps.Uptime; d < 0 || d > 2*time.Second {
			t.Errorf("%s: uptime %s in one trip, %s in steps", srv[i].Name, one.Uptime, steps.Uptime)
		}
		one.Uptime = steps.Uptime
		if one.ServerID != steps.ServerID || one.Version != steps.Version || one.ReadOnly != steps.ReadOnly ||
			one.SuperReadOnly != steps.SuperReadOnly || one.RequireSecureTransport != steps.RequireSecureTransport ||
			!one.Executed.Equal(steps.Executed) || one.SemiSync != steps.SemiSync {
			t.Errorf("%s: one trip %+v, in steps %+v", srv[i].Name, one, steps)
		}
		if (one.Replica == nil) != (steps.Replica == nil) {
			t.Fatalf("%s: replica status in one trip %+v, in steps %+v", srv[i].Name, one.Replica, steps.Replica)
		}
		if r1, r2 := one.Replica, steps.Replica; r1 != nil {
			if !r1.Received.Equal(r2.Received) {
				t.Errorf("%s: received %s in one trip, %s in steps", srv[i].Name, r1.Received, r2.Received)
			}
			r1.Received, r2.Received = nil, nil
			// Progress counts heartbeats, which may arrive between the two reads.
			r1.Progress, r2.Progress = "", ""
			if (r1.SecondsBehindSource == nil) != (r2.SecondsBehindSource == nil) ||
				(r1.SecondsBehindSource != nil && *r1.SecondsBehindSource != *r2.SecondsBehindSource) {
				t.Errorf("%s: seconds behind %v in one trip, %v in steps", srv[i].Name, r1.SecondsBehindSource, r2.SecondsBehindSource)
			}
			r1.SecondsBehindSource, r2.SecondsBehindSource = nil, nil
			if *r1 != *r2 {
				t.Errorf("%s: replica one trip %+v, in steps %+v", srv[i].Name, *r1, *r2)
			}
		}
	}
	// The fields this compares are set: a source with its replica, a replica of it. (Not
	// Uptime: a server started less than a second ago reports 0, as it did once in CI.)
	src, rep := status(ctx, t, op[0]), status(ctx, t, op[1])
	if !src.SemiSync.SourceEnabled || !src.SemiSync.SourceActive || src.SemiSync.Clients != 1 || src.Replica != nil || src.Version == "" {
		t.Errorf("source: %+v", src)
	}
	if rep.Replica == nil || !rep.Replica.IORunning || !rep.SemiSync.ReplicaEnabled || !rep.ReadOnly || rep.Replica.HeartbeatPeriod == 0 {
		t.Errorf("replica: %+v %+v", rep, rep.Replica)
	}
}

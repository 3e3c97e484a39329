package binlog

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// An archiver told to read only from replicas refuses a writable server (a primary reached
// through a Service), says why in its status, archives nothing from it, and reads once the
// server is read-only (a replica again, as the Service would send it to one).
func TestServerReplicaOnlyRefusesAPrimary(t *testing.T) {
	src := startServers(t, 1)[0]
	createApp(src)
	store, _ := newStore(t)
	var ep atomic.Pointer[Endpoint]
	e := src.endpoint()
	e.ReplicaOnly = true
	ep.Store(&e)
	opts := ArchiverOptions{Store: store, Prefix: "c1/binlog", SegmentMaxBytes: 32 << 10, SegmentMaxAge: 500 * time.Millisecond}
	a, _ := runArchiver(t, opts, &ep)
	waitFor(t, "the writable source refused", func() (bool, string) {
		st := a.Status()
		return strings.Contains(st.LastError, "writable"), fmt.Sprintf("status %+v", st)
	})
	if st := a.Status(); st.Segment != 0 || st.Connected {
		t.Fatalf("the archiver read from a writable source: %+v", st)
	}
	src.exec("SET GLOBAL read_only = ON")
	end := src.pos()
	waitArchived(t, a, end)
}

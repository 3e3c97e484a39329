package topology

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// A primary whose probe is refused (nothing listens: the server died) is probed again after a
// quarter Interval; one whose probe times out (a hung server: the kernel accepts, nobody
// answers) after half an Interval. Real TCP endpoints, no mock of the driver's errors.
func TestProbeSpacingFollowsHowThePrimaryMissed(t *testing.T) {
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	go func() { // accept and hold: the handshake never comes
		var held []net.Conn
		for {
			c, err := hung.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := closed.Addr().(*net.TCPAddr)
	closed.Close()
	hungAddr := hung.Addr().(*net.TCPAddr)

	for _, tc := range []struct {
		name        string
		port        int
		wantRefused bool
	}{
		{"killed", refusedAddr.Port, true},
		{"hung", hungAddr.Port, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			interval := time.Second
			e := New(Config{
				Flavor:         dbsql.FlavorMariaDB,
				Interval:       interval,
				ObserveTimeout: 300 * time.Millisecond,
				Members: func() []Member {
					return []Member{{Name: "db-0", Host: "127.0.0.1", Port: tc.port}}
				},
				Credentials: Credentials{Accounts: dbsql.Accounts{Operator: dbsql.Account{User: "dolphin", Password: "x"}}},
				Log:         logr.Discard(),
			}, Persisted{Primary: "db-0"})
			_, _ = e.Cycle(context.Background())
			e.mu.Lock()
			misses, refused := e.misses, e.lastMissRefused
			e.mu.Unlock()
			if misses != 1 {
				t.Fatalf("misses = %d after one failed probe of the primary, want 1", misses)
			}
			if refused != tc.wantRefused {
				t.Fatalf("lastMissRefused = %v for the %s primary at port %s, want %v",
					refused, tc.name, strconv.Itoa(tc.port), tc.wantRefused)
			}
			want := interval / 2
			if tc.wantRefused {
				want = interval / 4
			}
			if got := probeSpacing(interval, refused); got != want {
				t.Fatalf("next probe after %v, want %v", got, want)
			}
		})
	}
}

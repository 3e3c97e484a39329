package localproxy

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
)

// These tests reproduce how `sysbench --mysql-ignore-errors=all` through the local primary
// Service hung for good after a kill -9 of the primary: dials to the vanished endpoint had no
// timeout, so every reconnect held two descriptors for minutes; at the descriptor limit Accept
// failed and the listener stopped accepting while its socket stayed open (clients in
// SYN-SENT). They run without servers (-short too).

// flakyListener fails Accept with EMFILE a number of times, then accepts normally.
type flakyListener struct {
	net.Listener
	failures atomic.Int32
}

func (f *flakyListener) Accept() (net.Conn, error) {
	if f.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return f.Listener.Accept()
}

func startListener(t *testing.T, ln net.Listener, dialTimeout time.Duration, backends ...string) *listener {
	t.Helper()
	l := newListener(Route{Listen: ln.Addr().String()}, ln, dialTimeout)
	l.setBackends(backends)
	go l.serve(testr.New(t))
	t.Cleanup(l.close)
	return l
}

func TestAcceptErrorsDoNotStopTheListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln}
	fl.failures.Store(3) // out of descriptors three times in a row
	startListener(t, fl, time.Second, greeter(t, "127.0.0.1", "primary"))
	c, got, err := dialGreeting(ln.Addr().String())
	if err != nil || got != "primary" {
		t.Fatalf("after accept errors: %q, %v (the listener must keep accepting)", got, err)
	}
	c.Close()
}

// unanswered returns the address of a listener whose accept queue is full: the kernel drops
// further SYNs, so a connect to it hangs, like one to a partitioned or vanished pod.
func unanswered(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	// Fill the queue until a connect no longer completes.
	for i := 0; i < 16; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("this kernel completes connects to a full accept queue; cannot simulate an unanswered endpoint")
	return ""
}

// waitClosed waits until the proxy closes c (a read returns EOF or a reset).
func waitClosed(c net.Conn, within time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("still open")
	}
	return nil
}

func TestUnansweredEndpointDoesNotHoldClients(t *testing.T) {
	backend := unanswered(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := startListener(t, ln, 300*time.Millisecond, backend)
	var clients []net.Conn
	for range 50 { // a reconnect storm
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err != nil {
			t.Fatalf("the proxy stopped accepting: %v", err)
		}
		clients = append(clients, c)
	}
	for i, c := range clients {
		if err := waitClosed(c, 10*time.Second); err != nil {
			t.Fatalf("client %d: %v after the dial timeout: a dial without a bound holds the client and its descriptors", i, err)
		}
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.open() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := l.open(); n > 0 {
		t.Fatalf("%d client connections still held", n)
	}
}

func TestEndpointThatLeavesDropsPendingDials(t *testing.T) {
	backend := unanswered(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := startListener(t, ln, time.Minute, backend) // a dial that would wait a minute
	c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for l.open() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	l.setBackends([]string{greeter(t, "127.0.0.1", "new-primary")}) // the failover moved the endpoint
	if err := waitClosed(c, 5*time.Second); err != nil {
		t.Fatalf("a client whose dial went to the endpoint that left: %v", err)
	}
	got, err := func() (string, error) {
		c2, g, err := dialGreeting(ln.Addr().String())
		if err == nil {
			c2.Close()
		}
		return g, err
	}()
	if err != nil || got != "new-primary" {
		t.Fatalf("reconnect reaches %q, %v; want new-primary", got, err)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd here")
	}
	return len(ents)
}

// TestClientThatLeavesEndsItsDial: a client that gives up while the proxy dials an endpoint
// that does not answer is let go at once — not held in CLOSE-WAIT, with its descriptors,
// until the dial times out (sysbench's reconnect loop made thousands of those).
func TestClientThatLeavesEndsItsDial(t *testing.T) {
	backend := unanswered(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := startListener(t, ln, time.Minute, backend) // a dial that would wait a minute
	for range 20 {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	deadline := time.Now().Add(3 * time.Second)
	for l.open() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := l.open(); n > 0 {
		t.Fatalf("%d connections of clients that left are still held (their dials wait for the 1-minute timeout)", n)
	}
}

// TestReconnectStormStaysBounded reproduces the sysbench storm: clients reconnecting every
// millisecond while the endpoint answers no connect. The proxy keeps accepting, holds at most
// maxDialsInFlight dials (the rest are refused at once, with a reset), gives its descriptors
// back when the storm ends, and the next client reaches the endpoint that replaced the dead one.
func TestReconnectStormStaysBounded(t *testing.T) {
	backend := unanswered(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	before := openFDs(t)
	l := startListener(t, ln, time.Minute, backend)
	// Clients that stay: each waits for a greeting that cannot come.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	refused := 0
	for range 3 * maxDialsInFlight {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if errors.Is(err, syscall.ECONNRESET) {
			refused++ // accepted and refused before the connect call returned
			continue
		}
		if err != nil {
			t.Fatalf("the proxy stopped accepting during the storm: %v", err)
		}
		held = append(held, c)
	}
	waiting := 0
	settle := time.Now().Add(100 * time.Millisecond)
	for _, c := range held {
		if waitClosed(c, max(time.Until(settle), time.Millisecond)) == nil {
			refused++
		} else {
			waiting++
		}
	}
	if got, want := waiting, maxDialsInFlight; got > want {
		t.Fatalf("%d clients wait on dials; at most %d dials may be under way", got, want)
	}
	if refused == 0 {
		t.Fatal("no client refused although the dials in flight reached the bound")
	}
	// Clients retrying every millisecond, as sysbench does, for a second.
	stop := time.Now().Add(time.Second)
	done := make(chan int)
	for range 4 {
		go func() {
			n := 0
			for time.Now().Before(stop) {
				if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
					_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
					_, _ = c.Read(make([]byte, 1))
					c.Close()
					n++
				}
				time.Sleep(time.Millisecond)
			}
			done <- n
		}()
	}
	attempts := 0
	for range 4 {
		attempts += <-done
	}
	if attempts < 100 {
		t.Fatalf("only %d connects in a second of retrying: the proxy stopped accepting", attempts)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	// The failover moved the endpoint; the storm is over.
	l.setBackends([]string{greeter(t, "127.0.0.1", "new-primary")})
	c, got, err := dialGreeting(ln.Addr().String())
	if err != nil || got != "new-primary" {
		t.Fatalf("after the storm: %q, %v; want new-primary", got, err)
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for l.open() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := l.open(); n > 0 {
		t.Fatalf("%d client connections still held after the storm", n)
	}
	// The greeter and unanswered sockets of this test stay open; a leak would be hundreds.
	for time.Now().Before(deadline) && openFDs(t) > before+20 {
		time.Sleep(20 * time.Millisecond)
	}
	if after := openFDs(t); after > before+20 {
		t.Fatalf("descriptors: %d before the storm, %d after (%d attempts): leaked", before, after, attempts)
	}
	t.Logf("%d held clients refused of %d; %d storm connects", refused, 3*maxDialsInFlight, attempts)
}

// TestClientBytesBeforeTheGreetingAreForwarded: what a client sends before the backend
// answers (the proxy reads it while dialing) reaches the backend in order.
func TestClientBytesBeforeTheGreetingAreForwarded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	startListener(t, ln, time.Second, greeter(t, "127.0.0.1", "primary"))
	for i := range 20 {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "early-%d\n", i)
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		r := bufio.NewReader(c)
		greeting, err1 := r.ReadString('\n')
		echo, err2 := r.ReadString('\n')
		c.Close()
		if err1 != nil || err2 != nil || greeting != "primary\n" || echo != fmt.Sprintf("early-%d\n", i) {
			t.Fatalf("connection %d: greeting %q (%v), echo %q (%v)", i, greeting, err1, echo, err2)
		}
	}
}

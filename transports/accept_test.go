package transports

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// tempError is a temporary accept error, like EMFILE.
type tempError struct{}

func (tempError) Error() string   { return "fake: too many open files" }
func (tempError) Timeout() bool   { return false }
func (tempError) Temporary() bool { return true }

// fakeListener returns errs temporary errors (forever if errs < 0), then
// conn once, then blocks until closed.
type fakeListener struct {
	mu     sync.Mutex
	errs   int
	conn   net.Conn
	closed chan struct{}
	once   sync.Once
}

func newFakeListener(errs int, conn net.Conn) *fakeListener {
	return &fakeListener{errs: errs, conn: conn, closed: make(chan struct{})}
}

func (l *fakeListener) Accept() (net.Conn, error) {
	select {
	case <-l.closed:
		return nil, net.ErrClosed
	default:
	}
	l.mu.Lock()
	if l.errs != 0 {
		l.errs--
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "fake", Err: tempError{}}
	}
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *fakeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func TestNextDelay(t *testing.T) {
	var got []time.Duration
	d := time.Duration(0)
	for range 10 {
		d = nextDelay(d)
		got = append(got, d)
	}
	ms := time.Millisecond
	want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
}

func TestTemporaryAcceptErrorBackoff(t *testing.T) {
	server, client := net.Pipe()
	defer client.Close()
	l := newFakeListener(3, server)

	var mu sync.Mutex
	var delays []time.Duration
	s := &Server{
		Name: "fake",
		Handler: func(_ context.Context, c net.Conn) {
			_, _ = io.WriteString(c, "hi")
		},
		Events: Events{OnAcceptError: func(err error, d time.Duration) {
			var te tempError
			if !errors.As(err, &te) {
				t.Errorf("OnAcceptError(%v), want the temporary error", err)
			}
			mu.Lock()
			delays = append(delays, d)
			mu.Unlock()
		}},
	}
	begin := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(l) }()
	defer s.Close()

	_ = client.SetDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(client)
	if err != nil || string(got) != "hi" {
		t.Fatalf("read %q, %v; want \"hi\"", got, err)
	}
	// The conn came after three pauses: 5 + 10 + 20 ms at least.
	if el := time.Since(begin); el < 35*time.Millisecond {
		t.Fatalf("conn served after %v, want at least 35ms of backoff", el)
	}
	mu.Lock()
	want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}
	if len(delays) != len(want) || delays[0] != want[0] || delays[1] != want[1] || delays[2] != want[2] {
		t.Fatalf("delays %v, want %v", delays, want)
	}
	mu.Unlock()

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != ErrServerClosed {
		t.Fatalf("Serve = %v, want ErrServerClosed", err)
	}
}

// TestShutdownInterruptsBackoff checks that a Serve pausing after accept
// errors returns at once on Shutdown instead of finishing its pause.
func TestShutdownInterruptsBackoff(t *testing.T) {
	l := newFakeListener(-1, nil)
	paused := make(chan time.Duration, 100)
	s := &Server{
		Handler: func(context.Context, net.Conn) {},
		Events: Events{OnAcceptError: func(_ error, d time.Duration) {
			select {
			case paused <- d:
			default:
			}
		}},
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(l) }()
	// Wait until Serve is in a long pause (640ms).
	for d := time.Duration(0); d < 640*time.Millisecond; {
		select {
		case d = <-paused:
		case <-time.After(5 * time.Second):
			t.Fatal("no accept errors reported")
		}
	}
	begin := time.Now()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != ErrServerClosed {
			t.Fatalf("Serve = %v, want ErrServerClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	if el := time.Since(begin); el > 500*time.Millisecond {
		t.Fatalf("Serve took %v to return after Shutdown; it finished its pause", el)
	}
}

func TestPermanentAcceptError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Name: "stomp", Handler: func(context.Context, net.Conn) {}}
	defer s.Close()
	// Closed behind the Server's back: Accept fails with a permanent error.
	l.Close()
	err = s.Serve(l)
	if !errors.Is(err, net.ErrClosed) || err == ErrServerClosed {
		t.Fatalf("Serve = %v, want a wrapped net.ErrClosed", err)
	}
	if want := "transports: stomp: "; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Fatalf("Serve = %q, want prefix %q", err, want)
	}
}

// TestRejectingBounded checks that a flood over MaxConns runs at most
// maxRejecting OnLimit hooks at once, and closes the rest at once.
func TestRejectingBounded(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var running, peak, calls int
	s := &Server{
		Handler:  func(ctx context.Context, _ net.Conn) { <-ctx.Done() },
		MaxConns: 1,
		OnLimit: func(net.Conn) {
			mu.Lock()
			running++
			calls++
			peak = max(peak, running)
			mu.Unlock()
			<-release
			mu.Lock()
			running--
			mu.Unlock()
		},
	}
	// Drive startConn directly with pipes: the accept loop only calls it.
	var clients []net.Conn
	for range maxRejecting + 11 {
		srv, cli := net.Pipe()
		clients = append(clients, cli)
		s.startConn(srv)
	}
	st := s.Stats()
	if st.Open != 1 || st.Rejected != maxRejecting+10 {
		t.Fatalf("Stats = %+v, want 1 open, %d rejected", st, maxRejecting+10)
	}
	// The last connections were closed without a hook.
	_ = clients[len(clients)-1].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := clients[len(clients)-1].Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read from conn over the hook cap: %v, want EOF", err)
	}
	close(release)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if peak > maxRejecting || calls != maxRejecting {
		t.Fatalf("OnLimit ran %d times, %d at once; want %d, <= %d", calls, peak, maxRejecting, maxRejecting)
	}
	if st := s.Stats(); st.Open != 0 {
		t.Fatalf("Stats after Close = %+v, want 0 open", st)
	}
	for _, c := range clients {
		c.Close()
	}
}

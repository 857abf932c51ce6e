package transports_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/junctionmq/junction/transports"
)

// timeout bounds every wait in these tests; none should come near it.
const timeout = 5 * time.Second

// echo copies everything it reads back to the peer.
func echo(_ context.Context, c net.Conn) { _, _ = io.Copy(c, c) }

// start serves s on a fresh loopback listener. It returns the address and
// a channel that receives Serve's result. The Server is closed at cleanup.
func start(t *testing.T, s *transports.Server) (string, <-chan error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(l) }()
	t.Cleanup(func() { _ = s.Close() })
	return l.Addr().String(), errc
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg on c and checks that it comes back.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	if string(buf) != msg {
		t.Fatalf("read %q, want %q", buf, msg)
	}
}

// expectEOF checks that the peer closed c, after sending want.
func expectEOF(t *testing.T, c net.Conn, want string) {
	t.Helper()
	got, err := io.ReadAll(c)
	if err != nil && !isReset(err) {
		t.Fatalf("read: %v, want EOF", err)
	}
	if string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

// isReset reports whether err is a connection reset, which a force-closed
// socket may produce instead of EOF.
func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

func waitErr(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(timeout):
		t.Fatal("Serve did not return")
		return nil
	}
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

func TestEcho(t *testing.T) {
	s := &transports.Server{Name: "test", Handler: echo}
	addr, _ := start(t, s)
	c := dial(t, addr)
	roundTrip(t, c, "hello\n")
	roundTrip(t, c, "again\n")
	if st := s.Stats(); st.Open != 1 || st.Accepted != 1 || st.Rejected != 0 {
		t.Fatalf("Stats = %+v, want 1 open, 1 accepted", st)
	}
}

func TestManyConns(t *testing.T) {
	const n = 64
	var closed sync.WaitGroup
	closed.Add(n)
	s := &transports.Server{
		Handler: echo,
		Events:  transports.Events{OnClose: func(net.Conn, time.Duration) { closed.Done() }},
	}
	addr, _ := start(t, s)

	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			c, err := net.DialTimeout("tcp", addr, timeout)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(timeout))
			r := bufio.NewReader(c)
			for i := range 10 {
				msg := string(rune('a'+i)) + "\n"
				if _, err := io.WriteString(c, msg); err != nil {
					errs <- err
					return
				}
				got, err := r.ReadString('\n')
				if err != nil || got != msg {
					errs <- errors.New("bad echo: " + got)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	closed.Wait()
	if st := s.Stats(); st.Open != 0 || st.Accepted != n {
		t.Fatalf("Stats = %+v, want 0 open, %d accepted", st, n)
	}
}

func TestMaxConns(t *testing.T) {
	limited := make(chan struct{}, 10)
	closed := make(chan struct{}, 10)
	s := &transports.Server{
		Handler:  echo,
		MaxConns: 2,
		OnLimit: func(c net.Conn) {
			_, _ = io.WriteString(c, "busy\n")
			limited <- struct{}{}
		},
		Events: transports.Events{OnClose: func(net.Conn, time.Duration) { closed <- struct{}{} }},
	}
	addr, _ := start(t, s)

	c1, c2 := dial(t, addr), dial(t, addr)
	// A round trip proves each handler is running, hence counted.
	roundTrip(t, c1, "1")
	roundTrip(t, c2, "2")

	c3 := dial(t, addr)
	expectEOF(t, c3, "busy\n")
	recv(t, limited, "OnLimit")
	if st := s.Stats(); st.Open != 2 || st.Accepted != 3 || st.Rejected != 1 {
		t.Fatalf("Stats = %+v, want 2 open, 3 accepted, 1 rejected", st)
	}

	c1.Close()
	recv(t, closed, "OnClose")
	c4 := dial(t, addr)
	roundTrip(t, c4, "4")
	roundTrip(t, c2, "2")
	if st := s.Stats(); st.Open != 2 || st.Accepted != 4 || st.Rejected != 1 {
		t.Fatalf("Stats = %+v, want 2 open, 4 accepted, 1 rejected", st)
	}
}

func TestMaxConnsWithoutOnLimit(t *testing.T) {
	s := &transports.Server{Handler: echo, MaxConns: 1}
	addr, _ := start(t, s)
	c1 := dial(t, addr)
	roundTrip(t, c1, "1")
	c2 := dial(t, addr)
	expectEOF(t, c2, "")
	if st := s.Stats(); st.Open != 1 || st.Rejected != 1 {
		t.Fatalf("Stats = %+v, want 1 open, 1 rejected", st)
	}
}

func TestShutdownGraceful(t *testing.T) {
	started := make(chan struct{}, 1)
	var onClose atomic.Int32
	s := &transports.Server{
		Handler: func(ctx context.Context, c net.Conn) {
			started <- struct{}{}
			<-ctx.Done()
			_, _ = io.WriteString(c, "bye")
		},
		Events: transports.Events{OnClose: func(net.Conn, time.Duration) { onClose.Add(1) }},
	}
	addr, errc := start(t, s)
	c := dial(t, addr)
	recv(t, started, "handler start")

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v, want nil", err)
	}
	expectEOF(t, c, "bye")
	if err := waitErr(t, errc); err != transports.ErrServerClosed {
		t.Fatalf("Serve = %v, want ErrServerClosed", err)
	}
	// Shutdown waited for the handler, including its OnClose.
	if n := onClose.Load(); n != 1 {
		t.Fatalf("OnClose ran %d times, want 1", n)
	}
	if st := s.Stats(); st.Open != 0 {
		t.Fatalf("Stats = %+v, want 0 open", st)
	}
	if _, err := net.DialTimeout("tcp", addr, timeout); err == nil {
		t.Fatal("dial after Shutdown succeeded")
	}
}

func TestShutdownTimeoutForceCloses(t *testing.T) {
	started := make(chan struct{}, 1)
	exited := make(chan struct{})
	s := &transports.Server{
		// Ignores ctx; returns only when its conn fails.
		Handler: func(_ context.Context, c net.Conn) {
			defer close(exited)
			started <- struct{}{}
			_, _ = io.Copy(io.Discard, c)
		},
	}
	addr, errc := start(t, s)
	c := dial(t, addr)
	recv(t, started, "handler start")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded", err)
	}
	recv(t, exited, "handler exit")
	expectEOF(t, c, "")
	if err := waitErr(t, errc); err != transports.ErrServerClosed {
		t.Fatalf("Serve = %v, want ErrServerClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close after Shutdown = %v", err)
	}
	if st := s.Stats(); st.Open != 0 {
		t.Fatalf("Stats = %+v, want 0 open", st)
	}
}

func TestCloseForceClosesAndWaits(t *testing.T) {
	started := make(chan struct{}, 1)
	var exited atomic.Bool
	s := &transports.Server{
		Handler: func(_ context.Context, c net.Conn) {
			started <- struct{}{}
			_, _ = io.Copy(io.Discard, c)
			exited.Store(true)
		},
	}
	addr, errc := start(t, s)
	c := dial(t, addr)
	recv(t, started, "handler start")
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if !exited.Load() {
		t.Fatal("Close returned before the handler")
	}
	expectEOF(t, c, "")
	if err := waitErr(t, errc); err != transports.ErrServerClosed {
		t.Fatalf("Serve = %v, want ErrServerClosed", err)
	}
}

func TestIdempotent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, tc := range []struct {
		name string
		stop func(*transports.Server) error
	}{
		{"Close", func(s *transports.Server) error { return s.Close() }},
		{"Shutdown", func(s *transports.Server) error { return s.Shutdown(ctx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &transports.Server{Handler: echo}
			_, errc := start(t, s)
			for i := range 2 {
				if err := tc.stop(s); err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
			}
			if err := waitErr(t, errc); err != transports.ErrServerClosed {
				t.Fatalf("Serve = %v, want ErrServerClosed", err)
			}
			// Both kinds of stop, in any order, any number of times.
			if err := s.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown after stop: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close after stop: %v", err)
			}
		})
	}
}

func TestStopZeroServer(t *testing.T) {
	var s transports.Server
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestServeAfterStop(t *testing.T) {
	for _, stop := range []string{"Close", "Shutdown"} {
		t.Run(stop, func(t *testing.T) {
			s := &transports.Server{Handler: echo}
			if stop == "Close" {
				_ = s.Close()
			} else {
				_ = s.Shutdown(context.Background())
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Serve(l); err != transports.ErrServerClosed {
				t.Fatalf("Serve = %v, want ErrServerClosed", err)
			}
			if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("listener not closed: Accept = %v", err)
			}
			if err := s.ListenAndServe("127.0.0.1:0"); err != transports.ErrServerClosed {
				t.Fatalf("ListenAndServe = %v, want ErrServerClosed", err)
			}
		})
	}
}

// TestShutdownRacesServe stops servers while Serve is starting. Run with
// -race; every Serve must return ErrServerClosed.
func TestShutdownRacesServe(t *testing.T) {
	for range 50 {
		s := &transports.Server{Handler: echo}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- s.Serve(l) }()
		var wg sync.WaitGroup
		wg.Go(func() { _ = s.Shutdown(context.Background()) })
		wg.Go(func() { _ = s.Close() })
		wg.Go(func() { _ = s.Shutdown(context.Background()) })
		wg.Wait()
		if err := waitErr(t, errc); err != transports.ErrServerClosed {
			t.Fatalf("Serve = %v, want ErrServerClosed", err)
		}
		if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("listener not closed: Accept = %v", err)
		}
	}
}

func TestSeveralListeners(t *testing.T) {
	s := &transports.Server{Handler: echo}
	var addrs []string
	var errcs []<-chan error
	for range 2 {
		addr, errc := start(t, s)
		addrs = append(addrs, addr)
		errcs = append(errcs, errc)
	}
	var conns []net.Conn
	for _, addr := range addrs {
		c := dial(t, addr)
		roundTrip(t, c, "x")
		conns = append(conns, c)
	}
	// Both accept loops have run, so both listeners are registered.
	got := s.Addrs()
	if len(got) != 2 {
		t.Fatalf("Addrs = %v, want 2", got)
	}
	for _, a := range got {
		if a.String() != addrs[0] && a.String() != addrs[1] {
			t.Fatalf("Addrs = %v, want %v", got, addrs)
		}
	}
	// Echo handlers return once their peers hang up.
	for _, c := range conns {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, errc := range errcs {
		if err := waitErr(t, errc); err != transports.ErrServerClosed {
			t.Fatalf("Serve = %v, want ErrServerClosed", err)
		}
	}
	if got := s.Addrs(); len(got) != 0 {
		t.Fatalf("Addrs after Shutdown = %v, want none", got)
	}
}

func TestListenAndServe(t *testing.T) {
	s := &transports.Server{Name: "test", Handler: echo}
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe("127.0.0.1:0") }()
	defer s.Close()

	// The address is only known once the listener is registered; poll.
	var addrs []net.Addr
	for deadline := time.Now().Add(timeout); len(addrs) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("listener never registered")
		}
		select {
		case err := <-errc:
			t.Fatalf("ListenAndServe = %v", err)
		case <-time.After(time.Millisecond):
		}
		addrs = s.Addrs()
	}
	roundTrip(t, dial(t, addrs[0].String()), "x")
	_ = s.Close()
	if err := waitErr(t, errc); err != transports.ErrServerClosed {
		t.Fatalf("ListenAndServe = %v, want ErrServerClosed", err)
	}
}

func TestListenAndServeBadAddr(t *testing.T) {
	s := &transports.Server{Name: "stomp", Handler: echo}
	err := s.ListenAndServe("127.0.0.1:-1")
	if err == nil || err == transports.ErrServerClosed {
		t.Fatalf("ListenAndServe = %v, want a listen error", err)
	}
}

func TestNilHandler(t *testing.T) {
	var s transports.Server
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(l); err == nil || err == transports.ErrServerClosed {
		t.Fatalf("Serve = %v, want nil-Handler error", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("listener not closed: Accept = %v", err)
	}
}

func TestHandlerClosesConn(t *testing.T) {
	closed := make(chan struct{}, 2)
	s := &transports.Server{
		Handler: func(_ context.Context, c net.Conn) {
			_, _ = io.WriteString(c, "done")
			c.Close()
		},
		Events: transports.Events{OnClose: func(net.Conn, time.Duration) { closed <- struct{}{} }},
	}
	addr, _ := start(t, s)
	expectEOF(t, dial(t, addr), "done")
	recv(t, closed, "OnClose")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
		t.Fatal("OnClose ran twice")
	default:
	}
}

// TestEvents checks OnAccept and OnClose see the same conn, in order.
func TestEvents(t *testing.T) {
	var mu sync.Mutex
	var log []string
	closed := make(chan struct{}, 1)
	s := &transports.Server{
		Handler: func(ctx context.Context, c net.Conn) {
			mu.Lock()
			log = append(log, "handler")
			mu.Unlock()
		},
		Events: transports.Events{
			OnAccept: func(c net.Conn) {
				mu.Lock()
				log = append(log, "accept "+c.RemoteAddr().String())
				mu.Unlock()
			},
			OnClose: func(c net.Conn, d time.Duration) {
				mu.Lock()
				log = append(log, "close "+c.RemoteAddr().String())
				mu.Unlock()
				if d < 0 {
					t.Errorf("OnClose duration %v", d)
				}
				closed <- struct{}{}
			},
		},
	}
	addr, _ := start(t, s)
	c := dial(t, addr)
	local := c.LocalAddr().String()
	recv(t, closed, "OnClose")
	mu.Lock()
	defer mu.Unlock()
	want := []string{"accept " + local, "handler", "close " + local}
	if len(log) != len(want) {
		t.Fatalf("events %q, want %q", log, want)
	}
	for i := range want {
		if log[i] != want[i] {
			t.Fatalf("events %q, want %q", log, want)
		}
	}
}

package transports

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// ErrServerClosed is returned by [Server.Serve] and [Server.ListenAndServe]
// after a call to [Server.Shutdown] or [Server.Close].
var ErrServerClosed = errors.New("transports: server closed")

// errNilHandler is returned by Serve when the Server has no Handler.
var errNilHandler = errors.New("nil Handler")

const (
	// limitTimeout is the deadline set on a connection before it is passed
	// to OnLimit.
	limitTimeout = time.Second

	// maxRejecting bounds the OnLimit calls in progress at once, so that a
	// flood of connections over the limit cannot start unbounded
	// goroutines. Past it, connections are closed without OnLimit.
	maxRejecting = 64

	// Accept-error backoff, as in net/http: 5ms doubling up to 1s.
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
)

// Handler serves one connection. It must return when ctx is cancelled (the
// Server is shutting down) or when the peer goes away. The Server closes
// conn after Handler returns; Handler may close it earlier.
//
// A protocol's ServeConn method, or any func(context.Context, net.Conn),
// can be used as a Handler without conversion.
type Handler func(ctx context.Context, conn net.Conn)

// Events holds optional callbacks that report what a [Server] does, for
// logging and metrics. A nil field is skipped. Callbacks are never called
// with the Server's lock held.
type Events struct {
	// OnAccept is called in the connection's goroutine before Handler,
	// for every connection that will be served. It is not called for
	// connections rejected by MaxConns.
	OnAccept func(conn net.Conn)

	// OnClose is called in the connection's goroutine once Handler has
	// returned and the Server has closed conn and released its slot
	// under MaxConns; d is how long the connection was open.
	OnClose func(conn net.Conn, d time.Duration)

	// OnAcceptError is called in the accept loop for each temporary
	// accept error (such as "too many open files"), before Serve waits
	// delay and accepts again. It must not block.
	OnAcceptError func(err error, delay time.Duration)

	// OnReject is called in the accept loop for every connection turned
	// away by a limit, before it is closed or passed to OnLimit. It must
	// not block: a flood calls it for every attempt, so a logger should
	// aggregate rather than write a line per call.
	OnReject func(conn net.Conn, reason RejectReason)
}

// Stats is a snapshot of a [Server]'s connection counters.
type Stats struct {
	Open     int    // connections being served now (excluding rejected ones)
	Accepted uint64 // connections accepted in the Server's lifetime, rejected ones included
	Rejected uint64 // connections turned away by a limit: the sum of the three below

	RejectedMaxConns      uint64 // over MaxConns
	RejectedMaxConnsPerIP uint64 // over MaxConnsPerIP
	RejectedRate          uint64 // over ConnRatePerIP
	// UntrackedIPs counts connections admitted without per-IP limits
	// because the per-IP table was full of active sources.
	UntrackedIPs uint64
	// TrackedIPs is the size of the per-IP table now.
	TrackedIPs int
}

// Server accepts connections on one or more listeners and serves each with
// Handler in its own goroutine. The zero value is ready to use once
// Handler is set. Exported fields must not be changed once Serve or
// ListenAndServe has been called. A Server must not be copied after first
// use.
type Server struct {
	// Name names the listener in errors and pprof labels, e.g. "stomp".
	// Empty is allowed.
	Name string

	// Handler serves each accepted connection. It is required.
	Handler Handler

	// MaxConns caps the connections served at once across all of this
	// Server's listeners. Zero or negative means no limit. A connection
	// accepted over the limit is counted in Stats.Rejected and closed.
	MaxConns int

	// MaxConnsPerIP caps the connections served at once from one source
	// IP address (IPv4-mapped IPv6 addresses count as IPv4, other IPv6
	// addresses by their /64 prefix), across all of this Server's
	// listeners. Zero or negative means no limit. A connection over it is
	// rejected as over MaxConns is.
	MaxConnsPerIP int

	// ConnRatePerIP is how many connection attempts per second one
	// source IP may make, on average; ConnBurstPerIP is how many it may
	// make at once (a token bucket; zero means max(1, ConnRatePerIP)).
	// Zero or negative means no limit. An attempt over the rate is
	// counted in Stats.RejectedRate and closed at once, without OnLimit:
	// a flood must cost as little as possible.
	ConnRatePerIP  float64
	ConnBurstPerIP int

	// MaxTrackedIPs bounds the table of source IPs that the per-IP limits
	// keep; zero means DefaultMaxTrackedIPs. Entries go as soon as they
	// say nothing (no connection open, a full bucket), pruned on accept
	// without a goroutine. When the table is full of active sources, a
	// new source is admitted untracked (Stats.UntrackedIPs): the per-IP
	// limits give way to MaxConns rather than shut every new source out.
	MaxTrackedIPs int

	// OnLimit, if set, is given each connection rejected by MaxConns or
	// MaxConnsPerIP before the Server closes it, so the protocol can write
	// an error to the peer first. It runs in its own goroutine with a
	// one-second deadline already set on conn (it may set another), and
	// the Server closes conn when it returns. While 64 calls are in
	// progress, further rejected connections are closed without calling
	// OnLimit.
	OnLimit func(conn net.Conn)

	// Events are optional callbacks for logging and metrics.
	Events Events

	accepted  atomic.Uint64
	rejected  [RejectRate + 1]atomic.Uint64 // by RejectReason
	untracked atomic.Uint64
	open      atomic.Int64 // written only with mu held, read freely

	mu sync.Mutex // guards the fields below

	// ctx is given to every Handler; cancel cancels it when shutdown
	// begins. Both are set on first use by initLocked.
	ctx    context.Context
	cancel context.CancelFunc

	closing   bool                      // shutdown has begun; no goroutine may start
	listeners []*onceCloseListener      // listeners whose Serve is running
	conns     map[*trackedConn]struct{} // connections open now, served or being rejected
	active    int                       // connection goroutines running (handlers and OnLimit)
	rejecting int                       // of active, those running OnLimit
	drained   chan struct{}             // closed once closing is set and active is zero
	ips       ipTable                   // per source IP, when per-IP limits are set
}

// trackedConn is the Server's record of one accepted connection. It is
// keyed by pointer, so any net.Conn implementation can be tracked.
type trackedConn struct {
	net.Conn
	start    time.Time
	rejected bool     // over a limit: being passed to OnLimit, not served
	ip       *ipState // its source's entry, counting it; nil if untracked
}

// onceCloseListener makes Close idempotent, because both Serve and
// Shutdown close the listener.
type onceCloseListener struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *onceCloseListener) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

// initLocked creates the Server's internal state on first use.
func (s *Server) initLocked() {
	if s.ctx != nil {
		return
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.conns = make(map[*trackedConn]struct{})
	s.drained = make(chan struct{})
}

// Serve accepts connections on l and serves each with Handler in a new
// goroutine. It blocks until l fails or the Server shuts down, and always
// closes l before returning.
//
// Serve always returns a non-nil error. After [Server.Shutdown] or
// [Server.Close] it is [ErrServerClosed], also when Serve is called after
// them. Otherwise it is the error from l.Accept, wrapped with the Server's
// Name. Temporary accept errors are retried after a pause that starts at
// 5ms and doubles up to 1s.
//
// Serve may be called concurrently with several listeners.
func (s *Server) Serve(l net.Listener) error {
	ol := &onceCloseListener{Listener: l}
	defer ol.Close()

	if s.Handler == nil {
		return s.wrap(errNilHandler)
	}
	done, ok := s.addListener(ol)
	if !ok {
		return ErrServerClosed
	}
	defer s.removeListener(ol)

	var delay time.Duration
	for {
		c, err := ol.Accept()
		if err != nil {
			select {
			case <-done:
				return ErrServerClosed
			default:
			}
			var te interface{ Temporary() bool }
			if !errors.As(err, &te) || !te.Temporary() {
				return s.wrap(err)
			}
			delay = nextDelay(delay)
			if f := s.Events.OnAcceptError; f != nil {
				f(err, delay)
			}
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-done:
				t.Stop()
				return ErrServerClosed
			}
			continue
		}
		delay = 0
		s.startConn(c)
	}
}

// nextDelay returns the pause after a temporary accept error that
// followed a pause of d (zero for the first error).
func nextDelay(d time.Duration) time.Duration {
	if d == 0 {
		return minAcceptDelay
	}
	return min(2*d, maxAcceptDelay)
}

// ListenAndServe listens on the TCP address addr with the net package's
// defaults and calls [Server.Serve]. It returns [ErrServerClosed] at once,
// without listening, if the Server is already shutting down.
// Use [Server.Addrs] to learn the port chosen for ":0"; callers that need
// it before serving should call [net.Listen] themselves and use Serve.
func (s *Server) ListenAndServe(addr string) error {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return ErrServerClosed
	}
	l, err := Listen(addr)
	if err != nil {
		return s.wrap(err)
	}
	return s.Serve(l)
}

// Addrs returns the addresses of the listeners being served now, in the
// order Serve was called.
func (s *Server) Addrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	addrs := make([]net.Addr, 0, len(s.listeners))
	for _, l := range s.listeners {
		addrs = append(addrs, l.Addr())
	}
	return addrs
}

// Stats returns the Server's connection counters. It may be called at any
// time, concurrently with anything.
func (s *Server) Stats() Stats {
	st := Stats{
		Open:                  int(s.open.Load()),
		Accepted:              s.accepted.Load(),
		RejectedMaxConns:      s.rejected[RejectMaxConns].Load(),
		RejectedMaxConnsPerIP: s.rejected[RejectMaxConnsPerIP].Load(),
		RejectedRate:          s.rejected[RejectRate].Load(),
		UntrackedIPs:          s.untracked.Load(),
	}
	st.Rejected = st.RejectedMaxConns + st.RejectedMaxConnsPerIP + st.RejectedRate
	s.mu.Lock()
	st.TrackedIPs = len(s.ips.m)
	s.mu.Unlock()
	return st
}

// Shutdown stops the Server gracefully. It closes every listener (each
// Serve returns [ErrServerClosed]), cancels the context passed to every
// Handler, and waits for the handlers to return. If ctx is done first, it
// force-closes the connections still open and returns ctx.Err() without
// waiting further; handlers then return once their Read or Write fails.
// Otherwise it returns the first error from closing a listener, if any.
//
// Shutdown may be called more than once, and concurrently with Close and
// Serve.
func (s *Server) Shutdown(ctx context.Context) error {
	drained, err := s.beginClose()
	select {
	case <-drained:
		return err
	case <-ctx.Done():
	}
	select {
	case <-drained:
		return err
	default:
	}
	s.closeConns()
	return ctx.Err()
}

// Close stops the Server at once. It closes every listener and every
// connection, cancels the handlers' context, and waits for every handler
// (and OnLimit call) to return. It returns the first error from closing a
// listener, if any. Close may be called more than once, and after
// Shutdown (for example when Shutdown's context expired).
func (s *Server) Close() error {
	drained, err := s.beginClose()
	s.closeConns()
	<-drained
	return err
}

// beginClose marks the Server as closing, cancels the handlers' context and
// closes the listeners. It returns the channel closed when every
// connection goroutine has finished, and the first listener Close error.
func (s *Server) beginClose() (<-chan struct{}, error) {
	s.mu.Lock()
	s.initLocked()
	if !s.closing {
		s.closing = true
		s.cancel()
		if s.active == 0 {
			close(s.drained)
		}
	}
	lns := append([]*onceCloseListener(nil), s.listeners...)
	drained := s.drained
	s.mu.Unlock()

	var first error
	for _, l := range lns {
		if err := l.Close(); err != nil && first == nil && !errors.Is(err, net.ErrClosed) {
			first = s.wrap(err)
		}
	}
	return drained, first
}

// closeConns closes every connection open now. Conns are closed outside
// the lock: Close of a wrapped conn (TLS) may write.
func (s *Server) closeConns() {
	s.mu.Lock()
	conns := make([]net.Conn, 0, len(s.conns))
	for tc := range s.conns {
		conns = append(conns, tc.Conn)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// addListener registers l for Shutdown. It returns the channel closed when
// shutdown begins, or false if it has begun already.
func (s *Server) addListener(l *onceCloseListener) (<-chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if s.closing {
		return nil, false
	}
	s.listeners = append(s.listeners, l)
	return s.ctx.Done(), true
}

func (s *Server) removeListener(l *onceCloseListener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.listeners {
		if x == l {
			s.listeners = append(s.listeners[:i], s.listeners[i+1:]...)
			return
		}
	}
}

// startConn registers c and starts the goroutine that serves or rejects it,
// or closes c if the Server is closing. It never reads from or writes to c
// and never waits on it, so it cannot stall the accept loop.
func (s *Server) startConn(c net.Conn) {
	s.accepted.Add(1)
	tc := &trackedConn{Conn: c, start: time.Now()}

	s.mu.Lock()
	s.initLocked()
	if s.closing {
		s.mu.Unlock()
		c.Close()
		return
	}
	var reason RejectReason
	if s.perIPLimited() {
		if ip, ok := sourceIP(c); ok {
			tc.ip, reason = s.admitIPLocked(ip, tc.start)
		}
	}
	if reason == 0 && s.MaxConns > 0 && s.open.Load() >= int64(s.MaxConns) {
		reason = RejectMaxConns
	}
	if reason != 0 {
		s.rejected[reason].Add(1)
		if reason == RejectRate || s.OnLimit == nil || s.rejecting >= maxRejecting {
			s.releaseIPLocked(tc)
			s.mu.Unlock()
			s.onReject(c, reason)
			c.Close()
			return
		}
		tc.rejected = true
		s.rejecting++
		s.addLocked(tc)
		s.mu.Unlock()
		s.onReject(c, reason)
		go s.rejectConn(tc)
		return
	}
	s.open.Add(1)
	s.addLocked(tc)
	ctx := s.ctx
	s.mu.Unlock()
	go s.serveConn(ctx, tc)
}

// addLocked registers tc and its goroutine. s.mu must be held and
// s.closing false.
func (s *Server) addLocked(tc *trackedConn) {
	s.conns[tc] = struct{}{}
	s.active++
}

// serveConn is the goroutine that serves one connection.
func (s *Server) serveConn(ctx context.Context, tc *trackedConn) {
	defer s.goroutineDone()
	defer func() {
		tc.Conn.Close()
		s.removeConn(tc)
		if f := s.Events.OnClose; f != nil {
			f(tc.Conn, time.Since(tc.start))
		}
	}()
	if f := s.Events.OnAccept; f != nil {
		f(tc.Conn)
	}
	// The goroutine is the connection's: its labels need no restoring,
	// and without pprof.Do's frames the handler waits at a depth its
	// first 2 KiB of stack hold.
	ctx = pprof.WithLabels(ctx, pprof.Labels("transport", s.Name, "remote", remoteString(tc.Conn)))
	pprof.SetGoroutineLabels(ctx)
	s.Handler(ctx, tc.Conn)
}

// rejectConn is the goroutine that passes a connection over MaxConns to
// OnLimit and closes it.
func (s *Server) rejectConn(tc *trackedConn) {
	defer s.goroutineDone()
	defer s.removeConn(tc)
	defer tc.Conn.Close()
	_ = tc.Conn.SetDeadline(time.Now().Add(limitTimeout))
	s.OnLimit(tc.Conn)
}

// removeConn forgets tc and frees its slot.
func (s *Server) removeConn(tc *trackedConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, tc)
	s.releaseIPLocked(tc)
	if tc.rejected {
		s.rejecting--
	} else {
		s.open.Add(-1)
	}
}

// onReject calls Events.OnReject, if set.
func (s *Server) onReject(c net.Conn, reason RejectReason) {
	if f := s.Events.OnReject; f != nil {
		f(c, reason)
	}
}

// goroutineDone marks the end of a connection goroutine.
func (s *Server) goroutineDone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.closing && s.active == 0 {
		close(s.drained)
	}
}

// wrap prefixes err with the package and the Server's Name.
func (s *Server) wrap(err error) error {
	if s.Name == "" {
		return fmt.Errorf("transports: %w", err)
	}
	return fmt.Errorf("transports: %s: %w", s.Name, err)
}

func remoteString(c net.Conn) string {
	if a := c.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

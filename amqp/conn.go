package amqp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/amqp/internal/encoding"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/core/guard"
	"github.com/junctionmq/junction/internal/inbound"
	"github.com/junctionmq/junction/internal/outbound"
)

// conn is one AMQP connection. The read loop (readLoop, in workers one
// after another) owns the sessions' and links' incoming state; an
// outbound.Writer owns the socket's write side (conn is its encoder);
// core consumers' handlers only queue deliveries. State both sides touch (session windows, delivery ids, unsettled deliveries, the
// credit of client senders) is guarded by mu, which is never held while
// calling into core.
type conn struct {
	s   *Server
	ctx context.Context // ServeConn's: its end closes the connection
	nc  net.Conn
	id  uint64
	br  *bufio.Reader   // from readerPool while data flows (reader); nil while idle
	src io.Reader       // what br reads: through acct and clock
	log *zerolog.Logger // made on first use (logger)
	// The connection's goroutine waits for data with wait (plain TCP
	// only: yield) and for the worker doing the work with working.
	wait    inbound.Waiter
	yield   bool
	woken   bool // Wait has just seen data: the next worker reads without looking
	working sync.WaitGroup
	closed  bool // close has run (in the worker that met the end)
	// midMessage: the last transfer read said more follow; the read
	// loop does not yield until the message's last.
	midMessage bool
	err        error // why the connection ends (errIdle: nothing more to read for now)
	ready      bool  // the handshake is done
	// clock bounds the time of each frame; read deadlines are set
	// through it (guard.Clock). acct charges what the client sends to the
	// broker's pre-authentication budget until SASL (or the anonymous
	// check) has authenticated it. Both are the read loop's.
	clock *guard.Clock
	acct  *guard.Account

	// Set by the handshake, then read-only.
	user         string
	containerID  string
	peerMaxFrame uint32        // the largest frame we send
	peerIdle     time.Duration // the peer's idle timeout; we send at half
	core         *core.Session

	// Owned by the read loop.
	rbuf     *[]byte // from rbufPool while data flows; nil while idle
	sessions map[uint16]*session
	txs      map[string]*core.Tx
	nextTxn  uint32

	mu   sync.Mutex // see the type comment
	hold holdState  // producer links whose credit is withheld

	// The write side (writer.go): conn is the outbound writer's encoder,
	// w its state, made at the first item.
	out *outbound.Writer[outItem]
	w   *writer
	// Heart-beats (an empty frame when nothing was written for half the
	// peer's idle timeout) and the rechecks of held links (hold.go) are
	// timers that queue an item for the writer.
	lastWrite     atomic.Int64 // unix nanoseconds of the last write
	hbEvery       time.Duration
	timerMu       sync.Mutex
	hb            *time.Timer // guarded by timerMu
	recheckT      *time.Timer // guarded by timerMu
	recheckArmed  bool        // guarded by timerMu
	timersStopped bool        // guarded by timerMu
}

// readBuffer is the size of a connection's buffered reader.
const readBuffer = 16 << 10

// The read buffers come from pools while data flows and go back when
// the connection waits (conn.release): an idle connection holds none.
var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBuffer) }}
	rbufPool   = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}
)

// maxPooledFrame is the largest frame buffer given back to rbufPool.
const maxPooledFrame = 64 << 10

// reader returns the connection's buffered reader, taking one from the
// pool if it holds none.
func (c *conn) reader() *bufio.Reader {
	if c.br == nil {
		c.br = readerPool.Get().(*bufio.Reader)
		c.br.Reset(c.src)
	}
	return c.br
}

// buffered returns the number of bytes read ahead.
func (c *conn) buffered() int {
	if c.br == nil {
		return 0
	}
	return c.br.Buffered()
}

// release gives the read buffers back; the buffered reader only when no
// bytes are read ahead, unless all is set (the connection has ended).
func (c *conn) release(all bool) {
	if c.br != nil && (all || c.br.Buffered() == 0) {
		c.br.Reset(nil)
		readerPool.Put(c.br)
		c.br = nil
	}
	if c.rbuf != nil {
		if cap(*c.rbuf) <= maxPooledFrame {
			rbufPool.Put(c.rbuf)
		}
		c.rbuf = nil
	}
}

// Workers. A connection's goroutine (the caller's of ServeConn, which an
// idle connection keeps) does nothing but wait: for data, holding no
// buffer (internal/inbound), and for a worker, a goroutine that does the
// connection's work (its setup, its handshake and frames until it has
// nothing more to read, its end) and returns to the pool
// (inbound.Workers). Done on the connection's goroutine, the handshake's
// work would leave every idle connection a 4 or 8 KiB stack where
// waiting fits in 2 KiB. A connection that is not plain TCP (TLS,
// WebSocket, the one-port listener's) cannot wait without a buffer: its
// worker reads until the end.
const (
	workOpen  = iota // conn.open
	workRun          // conn.work, its error in c.err
	workClose        // conn.close
)

// errIdle: the read loop has read everything that has arrived and yields
// (conn.yield) rather than wait for more.
var errIdle = errors.New("amqp: nothing more to read for now")

// inWorker runs one kind of work in a worker (inbound.Workers), and
// waits for it. It makes no closure, so that this goroutine's stack
// stays as small as waiting needs.
func (c *conn) inWorker(kind int) {
	c.working.Add(1)
	c.s.workers.Go(c, kind)
	c.working.Wait()
}

// Work is the connection's work of one kind, on a worker.
func (c *conn) Work(kind int) {
	defer c.working.Done()
	switch kind {
	case workOpen:
		c.open()
	case workRun:
		c.err = c.work()
		if c.err != errIdle {
			// The end, at once: a goroutine less to start before the
			// goodbye leaves.
			c.close()
			c.closed = true
		}
	case workClose:
		c.close()
	}
}

// serve runs the connection's work in workers, waiting between them,
// until the connection ends; c.err then says why.
func (c *conn) serve() {
	for {
		c.inWorker(workRun)
		if c.err != errIdle {
			return
		}
		if c.err = c.wait.Wait(); c.err != nil {
			return
		}
		c.woken = true
	}
}

// open sets a new connection up and registers it.
func (c *conn) open() {
	s, nc := c.s, c.nc
	c.id = s.nextID.Add(1)
	c.clock = guard.NewClock(nc, guard.Rule{Timeout: s.cfg.FrameTimeout, MinRate: s.cfg.FrameMinRate})
	// Before authentication the frames are SASL's, at most 512 bytes
	// (MIN-MAX-FRAME-SIZE, Part 5 §5.3.1): a connection holds at most
	// what its reader reads ahead.
	c.acct = s.broker.PreAuth(readBuffer)
	c.src = c.acct.Reader(c.clock)
	c.yield = c.wait.Init(nc)
	c.out = outbound.New[outItem](nc, c, outbound.Config{WriteTimeout: s.cfg.WriteTimeout})
	hs := time.Now().Add(s.cfg.HandshakeTimeout)
	c.clock.SetReadDeadline(hs)
	nc.SetWriteDeadline(hs)
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
}

// work runs the handshake, if not done, then reads and handles frames
// (readLoop). The handshake does not yield: it is bounded by its
// timeout.
func (c *conn) work() error {
	handshake := !c.ready
	if !c.ready {
		if err := c.handshake(c.ctx); err != nil {
			return err
		}
		c.ready = true
		// The idle timeout counts from the last byte received, never
		// less (the clock's slack makes it fire up to an eighth late).
		c.clock.SetReadDeadline(time.Time{})
		if idle := c.s.cfg.IdleTimeout; idle > 0 {
			c.clock.SetIdle(idle)
		}
		c.nc.SetWriteDeadline(time.Time{})
		c.debug().Str("container", c.containerID).Str("user", c.user).Msg("connected")
		if iv := c.peerIdle / 2; iv > 0 {
			c.startHeartBeats(iv)
		}
		c.s.watch.Add(c.ctx, c)
	}
	return c.readLoop(handshake)
}

// shutdown closes the connection when ServeConn's context ends.
func (c *conn) shutdown() {
	c.closeWith(&frames.Error{Condition: frames.ErrCondConnectionForced, Description: "the broker is shutting down"})
}

// close ends the connection, with the close frame that says why, if
// any; and forgets it.
func (c *conn) close() {
	// Nothing more is read: the buffers go back before the goodbye.
	c.release(true)
	c.end()
	c.acct.Close()
	c.nc.Close()
	c.release(true)
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
}

func (c *conn) end() {
	err := c.err
	if !c.ready {
		c.debug().Err(err).Msg("handshake failed")
		if errors.Is(err, guard.ErrBudget) {
			c.s.broker.CountPreAuthRefusal("amqp", core.PreAuthBudget)
		}
		if c.core != nil {
			c.core.Close() // our open was not written: free the container-id
		}
		c.out.Close()
		return
	}
	c.s.watch.Remove(c.ctx, c)
	err = c.readErr(err)
	// Release the container-id (and everything else) before the peer
	// can learn that the connection ended: a client that reconnects at
	// once must find its id free.
	c.teardown()

	c.stopTimers()
	var ce *connError
	switch {
	case errors.As(err, &ce):
		c.debug().Str("condition", string(ce.e.Condition)).Str("description", ce.e.Description).Msg("closing with error")
		c.closeWith(ce.e)
		c.out.Finish(outItem{kind: kindNone}, c.s.cfg.WriteTimeout)
	case errors.Is(err, errPeerClosed):
		// The answering close is queued: it goes out last.
		c.out.Finish(outItem{kind: kindNone}, c.s.cfg.WriteTimeout)
	default:
		c.debug().Err(err).Msg("connection lost")
		c.out.Close()
	}
}

// logger returns the connection's logger, made on first use: most
// connections never log.
func (c *conn) logger() *zerolog.Logger {
	if c.log == nil {
		l := c.s.cfg.Logger.With().Uint64("conn", c.id).Str("remote", c.nc.RemoteAddr().String()).Logger()
		c.log = &l
	}
	return c.log
}

// debug returns a debug event, or nil (whose methods do nothing) when
// the server's logger does not log at debug level. It asks the server's
// logger, whose level or sampler may refuse the event, before making
// the connection's: a connection that only opens and closes makes none.
func (c *conn) debug() *zerolog.Event {
	if c.log != nil {
		return c.log.Debug()
	}
	e := c.s.cfg.Logger.Debug()
	if e == nil {
		return nil
	}
	return e.Uint64("conn", c.id).Str("remote", c.nc.RemoteAddr().String())
}

// connError closes the connection with an AMQP error condition.
type connError struct {
	e        *frames.Error
	tooLarge bool // a frame over the size limit (readFrame)
}

func (e *connError) Error() string { return string(e.e.Condition) + ": " + e.e.Description }

func connErr(cond encoding.Symbol, format string, args ...any) error {
	return &connError{e: &frames.Error{Condition: cond, Description: fmt.Sprintf(format, args...)}}
}

// errPeerClosed ends the read loop after the peer's close was answered.
var errPeerClosed = errors.New("amqp: peer closed the connection")

// errRefused ends a handshake that was answered with a refusal.
var errRefused = errors.New("amqp: connection refused")

// teardown ends every session: consumers close (their unsettled
// deliveries go back to their queues), open transactions roll back,
// temporary queues are deleted. It may run twice.
func (c *conn) teardown() {
	for ch, s := range c.sessions {
		s.detachAll()
		delete(c.sessions, ch)
	}
	c.core.Close()
}

// handshake reads the protocol headers, runs SASL if the client asks for
// it, and exchanges open frames. It writes directly: the writer is not
// running yet.
func (c *conn) handshake(ctx context.Context) error {
	hdr, err := c.readProtoHeader()
	if err != nil {
		return err
	}
	switch hdr {
	case frames.ProtoSASL:
		if err := c.sasl(ctx); err != nil {
			return err
		}
		if hdr, err = c.readProtoHeader(); err != nil {
			return err
		}
		if hdr != frames.ProtoAMQP {
			c.nc.Write(frames.ProtoAMQP[:])
			return fmt.Errorf("amqp: unexpected protocol header % x after SASL", hdr[:])
		}
	case frames.ProtoAMQP:
		if c.s.cfg.RequireSASL {
			c.nc.Write(frames.ProtoSASL[:])
			return errors.New("amqp: client skipped SASL, which is required")
		}
		user, err := c.s.broker.AuthenticateFrom(ctx, c.nc.RemoteAddr().String(), "", "")
		if err != nil {
			c.nc.Write(frames.ProtoSASL[:])
			return fmt.Errorf("amqp: client skipped SASL and anonymous clients are refused: %w", err)
		}
		c.user = user
	default:
		// The header we speak, then close (Part 2 §2.2).
		c.nc.Write(frames.ProtoSASL[:])
		return fmt.Errorf("amqp: unsupported protocol header % x", hdr[:])
	}
	// Authenticated: the budget gets its bytes back.
	c.acct.Close()
	if _, err := c.nc.Write(frames.ProtoAMQP[:]); err != nil {
		return err
	}

	h, body, err := c.readFrame(frames.MinMaxFrameSize)
	if err != nil {
		return err
	}
	if h.Type != frames.TypeAMQP || h.Channel != 0 {
		return c.refuse(frames.ErrCondNotAllowed, "the first frame must be open on channel 0")
	}
	perf, _, err := frames.Decode(h.Type, body)
	if err != nil {
		return c.refuse(frames.ErrCondDecodeError, "%v", err)
	}
	open, ok := perf.(*frames.Open)
	if !ok {
		return c.refuse(frames.ErrCondNotAllowed, "expected open, got %T", perf)
	}
	if open.MaxFrameSize < frames.MinMaxFrameSize {
		return c.refuse(frames.ErrCondInvalidField, "max-frame-size %d is below 512", open.MaxFrameSize)
	}
	c.containerID = open.ContainerID
	c.peerMaxFrame = min(open.MaxFrameSize, c.s.cfg.MaxFrameSize)
	c.peerIdle = open.IdleTimeout
	sess, err := c.s.broker.NewSession(core.SessionOptions{User: c.user, ClientID: open.ContainerID,
		Protocol: "amqp", RemoteAddr: c.nc.RemoteAddr().String(),
		// BLOCK addresses are flow-controlled by withholding link
		// credit (hold.go), not by core waiting on the read loop.
		NoWait: true,
		// An administrator's close: the read loop fails and the
		// connection is torn down as for a lost client.
		Close: func() { c.nc.Close() }, Abort: func() { outbound.Abort(c.nc) }})
	if errors.Is(err, core.ErrClientIDInUse) {
		return c.refuse(frames.ErrCondInvalidField, "container-id %q is already connected", open.ContainerID)
	}
	if err != nil {
		return c.refuse(frames.ErrCondInternal, "%v", err)
	}
	c.core = sess
	_, err = c.nc.Write(frames.Append(nil, frames.TypeAMQP, 0, c.s.open(), nil))
	return err
}

// refuse answers the client's open with the refusal pattern: an open
// marked connection-establishment-failed, then a close with the error.
func (c *conn) refuse(cond encoding.Symbol, format string, args ...any) error {
	e := &frames.Error{Condition: cond, Description: fmt.Sprintf(format, args...)}
	buf := frames.Append(nil, frames.TypeAMQP, 0, c.s.refusalOpen(), nil)
	buf = frames.Append(buf, frames.TypeAMQP, 0, &frames.Close{Error: e}, nil)
	c.nc.Write(buf)
	return fmt.Errorf("%w: %s: %s", errRefused, cond, e.Description)
}

func (c *conn) readProtoHeader() ([8]byte, error) {
	var h [8]byte
	_, err := io.ReadFull(c.reader(), h[:])
	return h, err
}

// sasl runs the SASL layer: mechanisms, init, outcome (Part 5 §5.3).
func (c *conn) sasl(ctx context.Context) error {
	mechs := []encoding.Symbol{mechPlain}
	certUser, hasCert := verifiedClient(c.nc)
	if hasCert {
		mechs = append([]encoding.Symbol{mechExternal}, mechs...)
	}
	if _, err := c.s.broker.Authenticate(ctx, "", ""); err == nil {
		mechs = append(mechs, mechAnonymous)
	}
	buf := append([]byte(nil), frames.ProtoSASL[:]...)
	buf = frames.Append(buf, frames.TypeSASL, 0, &frames.SASLMechanisms{Mechanisms: mechs}, nil)
	if _, err := c.nc.Write(buf); err != nil {
		return err
	}
	outcome := func(code uint8) error {
		_, err := c.nc.Write(frames.Append(nil, frames.TypeSASL, 0, &frames.SASLOutcome{Code: code}, nil))
		return err
	}
	// A SASL frame is at most MIN-MAX-FRAME-SIZE (Part 5 §5.3.1).
	h, body, err := c.readFrame(frames.MinMaxFrameSize)
	var ce *connError
	switch {
	case errors.As(err, &ce) && ce.tooLarge:
		c.s.broker.CountPreAuthRefusal("amqp", core.PreAuthFrameTooLarge)
		outcome(frames.SASLCodeSysPerm)
		return err
	case errors.Is(err, guard.ErrBudget):
		outcome(frames.SASLCodeSysTemp) // counted by serve
		return err
	case err != nil:
		return err
	}
	if h.Type != frames.TypeSASL {
		return errors.New("amqp: expected a SASL frame")
	}
	perf, _, err := frames.Decode(h.Type, body)
	if err != nil {
		return err
	}
	init, ok := perf.(*frames.SASLInit)
	if !ok {
		return fmt.Errorf("amqp: expected sasl-init, got %T", perf)
	}
	var login, pass string
	switch init.Mechanism {
	case mechExternal:
		if !hasCert {
			outcome(frames.SASLCodeAuth)
			return errors.New("amqp: SASL EXTERNAL without a verified client certificate")
		}
		// The TLS layer authenticated the client: its certificate's
		// subject is the user.
		c.user = certUser
		return outcome(frames.SASLCodeOK)
	case mechPlain:
		// authzid NUL authcid NUL passwd (RFC 4616).
		parts := bytes.SplitN(init.InitialResponse, []byte{0}, 3)
		if len(parts) != 3 {
			outcome(frames.SASLCodeAuth)
			return errors.New("amqp: malformed PLAIN response")
		}
		login, pass = string(parts[1]), string(parts[2])
	case mechAnonymous:
	default:
		outcome(frames.SASLCodeAuth)
		return fmt.Errorf("amqp: unsupported SASL mechanism %q", init.Mechanism)
	}
	user, err := c.s.broker.AuthenticateFrom(ctx, c.nc.RemoteAddr().String(), login, pass)
	if err != nil {
		outcome(frames.SASLCodeAuth)
		return fmt.Errorf("amqp: SASL %s for %q: %w", init.Mechanism, login, err)
	}
	c.user = user
	return outcome(frames.SASLCodeOK)
}

// SASL mechanisms offered.
const (
	mechPlain     = encoding.Symbol("PLAIN")
	mechAnonymous = encoding.Symbol("ANONYMOUS")
	mechExternal  = encoding.Symbol("EXTERNAL")
)

// verifiedClient returns the user named by the connection's verified TLS
// client certificate: its subject's common name, else the whole subject.
// The conn exposes TLS through ConnectionState (a *tls.Conn, or a
// listener's wrapper around one).
func verifiedClient(nc net.Conn) (string, bool) {
	cs, ok := nc.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return "", false
	}
	st := cs.ConnectionState()
	if !st.HandshakeComplete || len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 {
		return "", false
	}
	subj := st.PeerCertificates[0].Subject
	if subj.CommonName != "" {
		return subj.CommonName, true
	}
	return subj.String(), true
}

// readFrame reads one frame of at most limit bytes into c.rbuf and
// returns its header and body (after the extended header). The body is
// only valid until the next call.
func (c *conn) readFrame(limit uint32) (frames.Header, []byte, error) {
	var hb [frames.HeaderSize]byte
	if _, err := io.ReadFull(c.reader(), hb[:]); err != nil {
		return frames.Header{}, nil, err
	}
	h, err := frames.ParseHeader(hb[:])
	if err != nil {
		return h, nil, connErr(frames.ErrCondFramingError, "%v", err)
	}
	if h.Size > limit {
		err := connErr(frames.ErrCondFramingError, "frame of %d bytes exceeds max-frame-size %d", h.Size, limit)
		err.(*connError).tooLarge = true
		return h, nil, err
	}
	n := int(h.Size) - frames.HeaderSize
	if c.rbuf == nil {
		c.rbuf = rbufPool.Get().(*[]byte)
	}
	if cap(*c.rbuf) < n {
		*c.rbuf = make([]byte, n, max(n, 4<<10))
	}
	buf := (*c.rbuf)[:n]
	if _, err := io.ReadFull(c.br, buf); err != nil {
		return h, nil, err
	}
	ext := int(h.DataOffset)*4 - frames.HeaderSize
	return h, buf[ext:], nil
}

// readLoop reads and handles frames until the connection ends or, on a
// plain TCP connection, until everything that has arrived is handled
// (errIdle): the read buffers are then given back, and the connection's
// goroutine waits for more.
func (c *conn) readLoop(read bool) error {
	// Whether to read without looking (Waiter.Ready, a system call)
	// whether something has arrived: Wait has just seen data. Once this
	// worker has read a frame (read; the handshake's count), it yields
	// without looking when it has read all it had: the peer most likely
	// waits for an answer, and Wait looks before it sleeps.
	known := c.woken
	c.woken = false
	for {
		// A frame's clock starts with its first byte, which may be read
		// ahead already.
		c.clock.Next(c.buffered())
		// Not in the middle of a message in several transfers: its next
		// frame is on its way, and a wait would cost a worker per frame.
		if c.yield && !c.midMessage && c.buffered() == 0 && !known && (read || !c.wait.Ready()) {
			// The deadline of the wait: the idle timeout's.
			if err := c.clock.Arm(); err != nil {
				return err
			}
			c.release(false)
			return errIdle
		}
		known = false
		h, body, err := c.readFrame(c.s.cfg.MaxFrameSize)
		if err != nil {
			return c.readErr(err)
		}
		read = true
		if h.Type != frames.TypeAMQP {
			return connErr(frames.ErrCondFramingError, "frame type %d after open", h.Type)
		}
		perf, payload, err := frames.Decode(h.Type, body)
		if err != nil {
			return connErr(frames.ErrCondDecodeError, "%v", err)
		}
		if perf == nil {
			continue // heartbeat
		}
		if t, ok := perf.(*frames.Transfer); ok {
			c.midMessage = t.More
		}
		if err := c.handle(h.Channel, perf, payload); err != nil {
			return err
		}
	}
}

// readErr turns a read's timeouts into the conditions the connection
// closes with.
func (c *conn) readErr(err error) error {
	switch {
	case errors.Is(err, guard.ErrFrameTimeout):
		c.s.broker.CountFrameTimeout("amqp")
		return connErr(frames.ErrCondResourceLimitExceeded, "a frame took longer than %v plus 1s per %d bytes received to arrive",
			c.s.cfg.FrameTimeout, c.s.cfg.FrameMinRate)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return connErr(frames.ErrCondResourceLimitExceeded, "nothing received for %v (idle timeout)", c.s.cfg.IdleTimeout)
	}
	return err
}

// handle dispatches one performative.
func (c *conn) handle(ch uint16, perf frames.Body, payload []byte) error {
	switch p := perf.(type) {
	case *frames.Open:
		return connErr(frames.ErrCondIllegalState, "open received twice")
	case *frames.Close:
		if p.Error != nil {
			c.debug().Str("condition", string(p.Error.Condition)).Str("description", p.Error.Description).Msg("peer closed with error")
		}
		c.release(true) // nothing more is read: the buffers go back first
		c.teardown()    // before the answer: see serve
		c.closeLater()
		return errPeerClosed
	case *frames.Begin:
		return c.begin(ch, p)
	}
	s := c.sessions[ch]
	if s == nil {
		return connErr(frames.ErrCondIllegalState, "%T on channel %d, which has no session", perf, ch)
	}
	var err error
	switch p := perf.(type) {
	case *frames.End:
		s.end(nil)
		return nil
	case *frames.Attach:
		err = s.attach(p)
	case *frames.Detach:
		err = s.detach(p)
	case *frames.Flow:
		err = s.flow(p)
	case *frames.Transfer:
		err = s.transfer(p, payload)
	case *frames.Disposition:
		err = s.disposition(p)
	default:
		return connErr(frames.ErrCondNotAllowed, "%T is not allowed here", perf)
	}
	var se *sessionError
	if errors.As(err, &se) {
		s.end(se.e)
		return nil
	}
	return err
}

// begin opens a session on channel ch. The broker answers on the same
// channel number: channels are chosen per direction, and mirroring the
// peer's keeps them unique.
func (c *conn) begin(ch uint16, b *frames.Begin) error {
	if ch > c.s.cfg.ChannelMax {
		return connErr(frames.ErrCondFramingError, "channel %d exceeds channel-max %d", ch, c.s.cfg.ChannelMax)
	}
	if c.sessions[ch] != nil {
		return connErr(frames.ErrCondNotAllowed, "channel %d already has a session", ch)
	}
	if b.RemoteChannel != nil {
		return connErr(frames.ErrCondNotAllowed, "begin answers a session the broker did not start")
	}
	s := newSession(c, ch, b)
	if c.sessions == nil {
		c.sessions = make(map[uint16]*session)
	}
	c.sessions[ch] = s
	c.enqueue(outItem{sess: s, body: &frames.Begin{
		RemoteChannel:  &ch,
		NextOutgoingID: 0,
		IncomingWindow: c.s.cfg.SessionWindow,
		OutgoingWindow: maxWindow,
		HandleMax:      c.s.cfg.HandleMax,
	}})
	return nil
}

// maxWindow is the outgoing window the broker advertises: it does not
// limit its own sending by window, only by the peer's.
const maxWindow = 1<<31 - 1

// deliveryTag encodes a core delivery id as a delivery tag: unique per
// link, as the spec requires.
func deliveryTag(dst []byte, id uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, id)
}

package stomp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3/frame"
	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/core/guard"
	"github.com/junctionmq/junction/core/selector"
	"github.com/junctionmq/junction/internal/inbound"
	"github.com/junctionmq/junction/internal/outbound"
	"github.com/junctionmq/junction/stomp/internal/wire"
)

// outHighWater is how many queued control frames (receipts, errors) make
// the reader wait for the writer: a client that sends without reading
// slows down instead of growing the queue. Deliveries are bounded by
// credit and do not count.
const outHighWater = 1024

// errConnClosing ends the read loop after a frame that closes the
// connection (DISCONNECT, or a protocol error already reported).
var errConnClosing = errors.New("stomp: connection closing")

// protocolError is a client mistake reported in an ERROR frame.
type protocolError struct {
	msg    string // the message header
	detail string // the body
}

func (e *protocolError) Error() string { return "stomp: " + e.msg }

func protoErr(msg, format string, args ...any) *protocolError {
	return &protocolError{msg: msg, detail: fmt.Sprintf(format, args...)}
}

// coreErr reports a core error as msg, or as "not authorized" when the
// Authorizer refused (the body says who was refused what, on which
// address), "address full" when the address is over its limit with
// address-full-policy FAIL, or "disk full" when durable sends are
// refused for the store's disk limit (the body says which queue or
// limit).
func coreErr(msg string, err error) *protocolError {
	switch {
	case errors.Is(err, core.ErrUnauthorized):
		msg = "not authorized"
	case errors.Is(err, core.ErrAddressFull):
		msg = "address full"
	case errors.Is(err, core.ErrDiskFull):
		msg = "disk full"
	}
	return &protocolError{msg: msg, detail: err.Error()}
}

type ackMode uint8

const (
	ackAuto ackMode = iota
	ackClient
	ackClientIndividual
)

// subscription is one SUBSCRIBE of the connection.
type subscription struct {
	id       string
	seq      uint64 // connection-local number, part of ack ids
	ack      ackMode
	consumer *core.Consumer
	durable  string // durable subscription name, if any
	// legacy maps message ids to deliveries for STOMP 1.0 and 1.1 ACKs,
	// which name a message-id instead of 1.2's ack id. Guarded by the
	// read loop (only it touches it), filled by the writer through outMu.
	legacy []legacyAck
}

type legacyAck struct {
	messageID  uint64
	deliveryID uint64
}

// outItem is one frame waiting for the writer: a control frame or a
// delivery encoded as MESSAGE.
type outItem struct {
	f         *frame.Frame
	d         core.Delivery
	sub       *subscription
	heartBeat bool // an EOL
	close     bool // close the connection after writing f
}

// conn is one client connection. The read loop (readLoop, in workers one
// after another) owns the protocol state; an outbound.Writer owns the
// socket's write side.
type conn struct {
	s   *Server
	ctx context.Context // ServeConn's: its end stops the connection
	nc  net.Conn
	id  uint64
	log *zerolog.Logger // made on first use (logger)
	rd  *wire.Reader
	// The connection's goroutine waits for data with wait (plain TCP
	// only: yield) and for the worker doing the work with working.
	wait    inbound.Waiter
	yield   bool
	woken   bool // Wait has just seen data: the next worker reads without looking
	working sync.WaitGroup
	started bool  // open has run (in the first worker)
	closed  bool  // close has run (in the worker that met the end)
	err     error // why the read loop ended (errIdle: nothing more to read for now)
	opened  time.Time
	// clock bounds the time of each frame; the read loop sets its read
	// deadlines through it (guard.Clock). acct charges what the client
	// sends to the broker's pre-authentication budget until it has logged
	// in. Both are the read loop's.
	clock *guard.Clock
	acct  *guard.Account

	// Owned by the read loop:
	version   wire.Version
	session   *core.Session
	connected bool
	subs      map[string]*subscription
	subsBySeq map[uint64]*subscription
	subSeq    uint64
	txs       map[string]*core.Tx
	readIdle  time.Duration // max silence from the client; 0 = none
	deferred  bool          // the frame being handled is answered later

	// live is session, for closes from other goroutines (an
	// administrator's, the broker's shutdown): closing it ends a SEND
	// waiting in core for room (address-full-policy BLOCK), which
	// would otherwise hold the read loop until there is room.
	live atomic.Pointer[core.Session]

	// The write side (writer.go); conn is its encoder.
	out *outbound.Writer[outItem]
	// Heart-beats to the client (writer.go): a timer, set at CONNECT.
	hb        *time.Timer // guarded by outMu
	hbEvery   time.Duration
	lastWrite atomic.Int64 // unix nanoseconds of the last write
	// The encoder's (the writer's goroutine's):
	acks    []autoAck // auto-ack deliveries of the write in progress
	wclosed bool      // a frame that closes the connection was encoded

	// outMu guards what follows, and orders the items pushed.
	outMu    sync.Mutex
	stopping bool       // no more items accepted
	drained  *sync.Cond // on outMu: a slot was answered; made on first use
	// slots hold the answers (RECEIPT, or ERROR when the journal failed)
	// to frames still waiting for the journal, and to the frames after
	// them, so that answers leave in frame order. Guarded by outMu.
	slots []*answerSlot
}

// answerSlot is the answer to one frame, ready once its work is done.
type answerSlot struct {
	item  outItem // zero when the frame wants no answer
	ready bool
}

// maxPendingSends bounds the durable SENDs of a connection that wait
// for the journal; past it the read loop waits.
const maxPendingSends = 4096

// Workers. A connection's goroutine (the caller's of ServeConn, which an
// idle connection keeps) does nothing but wait: for data, holding no
// buffer (internal/inbound), and for a worker, a goroutine that does the
// connection's work (its setup, its frames until it has nothing more to
// read, its end) and returns to the pool (inbound.Workers). Done on the
// connection's goroutine, the CONNECT's work would leave every idle
// connection a 4 or 8 KiB stack where waiting fits in 2 KiB. A
// connection that is not plain TCP (TLS, WebSocket, the one-port
// listener's) cannot wait without a buffer: its worker reads until the
// end.
const (
	workRun   = iota // conn.open first, then conn.readLoop, its error in c.err
	workClose        // conn.close
)

// errIdle: the read loop has read everything that has arrived and yields
// (conn.yield) rather than wait for more.
var errIdle = errors.New("stomp: nothing more to read for now")

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
	case workRun:
		if !c.started {
			// The first worker sets the connection up, and reads the
			// CONNECT if it has arrived: a goroutine less per
			// connection.
			c.started = true
			c.open()
		}
		c.err = c.readLoop()
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
	id := s.nextID.Add(1)
	c.id = id
	c.opened = time.Now()
	lim := s.cfg.preAuthLimits()
	c.clock = guard.NewClock(nc, s.cfg.frameRule())
	// At most one frame before login, and what the reader's buffer reads
	// ahead of it.
	c.acct = s.broker.PreAuth(lim.MaxFrameSize + lim.MaxHeaderLength)
	c.yield = c.wait.Init(nc)
	if c.yield {
		c.rd = wire.NewPooledReader(c.acct.Reader(c.clock), lim)
	} else {
		c.rd = wire.NewReader(c.acct.Reader(c.clock), lim)
	}
	c.version = wire.V12
	c.out = outbound.New[outItem](nc, c, outbound.Config{WriteTimeout: s.cfg.WriteTimeout, HighWater: outHighWater})
	c.clock.SetReadDeadline(c.opened.Add(s.cfg.ConnectTimeout))
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.watch.Add(c.ctx, c)
	c.debug().Msg("stomp connection open")
}

// shutdown wakes the read loop (or the wait for data) when ServeConn's
// context ends; the connection says goodbye. A SEND waiting for room
// gives up. Through the clock, which sets the read deadlines: one set on
// nc directly could be replaced.
func (c *conn) shutdown() {
	c.clock.Interrupt()
	if s := c.live.Load(); s != nil {
		s.Close()
	}
}

// close ends the connection: the ERROR that says why, if any, then the
// goodbye and the session's end; and forgets it.
func (c *conn) close() {
	// Nothing more is read: the buffer goes back before the goodbye.
	c.rd.Close()
	ctx, err := c.ctx, c.err
	c.s.watch.Remove(ctx, c)
	c.acct.Close()
	switch {
	case ctx.Err() != nil:
		c.sendError(&protocolError{msg: "server shutting down", detail: "The broker is shutting down; reconnect later."}, nil)
	case err == nil, errors.Is(err, errConnClosing), errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
	default:
		var pe *protocolError
		var fe *wire.FrameError
		var ne net.Error
		switch {
		case errors.As(err, &pe):
			c.sendError(pe, nil)
		case errors.As(err, &fe):
			if !c.connected && errors.Is(fe, wire.ErrFrameTooLarge) {
				c.s.broker.CountPreAuthRefusal("stomp", core.PreAuthFrameTooLarge)
			}
			c.sendError(&protocolError{msg: "malformed frame", detail: fe.Error()}, nil)
		case errors.Is(err, guard.ErrBudget):
			c.s.broker.CountPreAuthRefusal("stomp", core.PreAuthBudget)
			c.sendError(&protocolError{msg: "server busy", detail: "Too many clients are logging in at once; try again later."}, nil)
		case errors.Is(err, guard.ErrFrameTimeout):
			c.s.broker.CountFrameTimeout("stomp")
			r := c.s.cfg.frameRule()
			c.sendError(&protocolError{msg: "frame timeout", detail: fmt.Sprintf(
				"A frame took longer than %v plus 1s per %d bytes received to arrive.", r.Timeout, r.MinRate)}, nil)
		case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
			if c.connected {
				c.sendError(&protocolError{msg: "heart-beat timeout", detail: fmt.Sprintf("No data from the client for %v.", c.readIdle)}, nil)
			} else {
				c.sendError(&protocolError{msg: "connect timeout", detail: "No CONNECT frame in time."}, nil)
			}
		case errors.Is(err, io.ErrUnexpectedEOF):
		default:
			c.debug().Err(err).Msg("stomp read failed")
		}
	}
	c.finish()
	if c.session != nil {
		c.session.Close()
	}
	c.rd.Release()
	c.debug().Dur("duration", time.Since(c.opened)).Err(c.out.Err()).Msg("stomp connection closed")
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
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

// closeFromOutside closes the connection for an administrator: the read
// loop fails and serve tears the connection down as for a lost client.
// The session is closed at once, so that a SEND waiting in core for room
// gives up rather than hold the read loop.
func (c *conn) closeFromOutside() {
	c.nc.Close()
	if s := c.live.Load(); s != nil {
		s.Close()
	}
}

// abortFromOutside is closeFromOutside for the cluster's fence: the
// connection is reset (outbound.Abort), so that what is queued for the
// client is never delivered, and only then is the session closed (which
// gives its deliveries back to be delivered again).
func (c *conn) abortFromOutside() {
	outbound.Abort(c.nc)
	if s := c.live.Load(); s != nil {
		s.Close()
	}
}

// readLoop reads and handles frames until the connection ends or, on a
// plain TCP connection, until everything that has arrived is handled
// (errIdle): its read buffer is then given back, and the connection's
// goroutine waits for more.
func (c *conn) readLoop() error {
	ctx := c.ctx
	// Whether to read without looking (Waiter.Ready, a system call)
	// whether something has arrived: Wait has just seen data. Once this
	// worker has read a frame, it yields without looking when it has read
	// all it had: the client most likely waits for the answer, and Wait
	// looks before it sleeps.
	known, read := c.woken, false
	c.woken = false
	for {
		// A frame's clock starts with its first byte, which may be read
		// ahead already.
		c.clock.Next(c.rd.Buffered())
		if c.rd.Buffered() == 0 {
			// The burst is handled: its answers leave (pushLater)
			// before the loop may wait for more.
			c.out.Flush()
		}
		if c.yield && c.rd.Buffered() == 0 && !known && (read || !c.wait.Ready()) {
			// The deadline of the wait: the connect timeout's, or the
			// heart-beats'.
			if err := c.clock.Arm(); err != nil {
				return err
			}
			c.rd.Release()
			return errIdle
		}
		known = false
		f, err := c.rd.Read()
		if err != nil {
			return err
		}
		read = true
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if f == nil {
			continue // heart-beat
		}
		if err := c.waitWritable(); err != nil {
			return err
		}
		if err := c.handle(ctx, f); err != nil {
			var pe *protocolError
			if errors.As(err, &pe) {
				c.sendError(pe, f)
				return errConnClosing
			}
			return err
		}
	}
}

func (c *conn) handle(ctx context.Context, f *frame.Frame) error {
	if !c.connected {
		switch f.Command {
		case frame.CONNECT, frame.STOMP:
			return c.onConnect(ctx, f)
		}
		return protoErr("not connected", "Expected CONNECT or STOMP, got %s.", f.Command)
	}
	var err error
	switch f.Command {
	case frame.SEND:
		err = c.onSend(ctx, f)
	case frame.SUBSCRIBE:
		err = c.onSubscribe(f)
	case frame.UNSUBSCRIBE:
		err = c.onUnsubscribe(f)
	case frame.ACK, frame.NACK:
		err = c.onAck(f)
	case frame.BEGIN, frame.COMMIT, frame.ABORT:
		err = c.onTx(ctx, f)
	case frame.DISCONNECT:
		// Release the session (and its client id) before the receipt, so
		// a client that reconnects as soon as it has the receipt finds
		// its durable subscriptions free. Nothing more is read: the read
		// buffer goes back first.
		c.rd.Close()
		c.session.Close()
		c.receipt(f, true)
		return errConnClosing
	case frame.CONNECT, frame.STOMP:
		return protoErr("already connected", "A second %s frame is not allowed.", f.Command)
	default:
		return protoErr("unexpected frame", "%s is not a client frame.", f.Command)
	}
	if err != nil {
		return err
	}
	if c.deferred {
		c.deferred = false // answered when the journal completes
		return nil
	}
	c.receipt(f, false)
	return nil
}

// receipt answers a frame's receipt header, after the answers still
// waiting for the journal.
func (c *conn) receipt(f *frame.Frame, closeAfter bool) {
	id, ok := f.Header.Contains(frame.Receipt)
	if !ok {
		return
	}
	c.answer(outItem{f: frame.New(frame.RECEIPT, frame.ReceiptId, id), close: closeAfter})
}

// awaitJournal reserves the answer slot of a frame whose work completes
// later (a durable SEND): its receipt, and the receipts after it, wait.
func (c *conn) awaitJournal(f *frame.Frame) *answerSlot {
	s := &answerSlot{}
	if id, ok := f.Header.Contains(frame.Receipt); ok {
		s.item = outItem{f: frame.New(frame.RECEIPT, frame.ReceiptId, id)}
	}
	c.outMu.Lock()
	c.slots = append(c.slots, s)
	c.outMu.Unlock()
	return s
}

// journaled completes a slot; a failure turns its answer into an ERROR
// that closes the connection (the message was not confirmed).
func (c *conn) journaled(s *answerSlot, f *frame.Frame, err error) {
	c.outMu.Lock()
	s.ready = true
	if err != nil {
		if !errors.Is(err, core.ErrUnauthorized) && !errors.Is(err, core.ErrAddressFull) && !errors.Is(err, core.ErrDiskFull) { // core logs refusals
			c.logger().Warn().Err(err).Msg("durable send failed")
		}
		s.item = outItem{f: errorFrame(coreErr("send failed", err), f), close: true}
	}
	n := 0
	for n < len(c.slots) && c.slots[n].ready {
		if it := c.slots[n].item; it.f != nil {
			c.pushLocked(it)
		}
		n++
	}
	c.slots = c.slots[n:]
	if c.drained != nil {
		c.drained.Broadcast()
	}
	c.outMu.Unlock()
}

// onConnect negotiates the version and heart-beats and opens the session.
func (c *conn) onConnect(ctx context.Context, f *frame.Frame) error {
	version, ok := negotiate(f.Header.Get(frame.AcceptVersion))
	if !ok {
		c.push(outItem{f: frame.New(frame.ERROR, frame.Version, "1.0,1.1,1.2", "content-type", "text/plain",
			frame.Message, "unsupported protocol version"), close: true})
		return errConnClosing
	}
	c.version = version
	c.rd.SetVersion(version)
	cx, cy, err := parseHeartBeat(f.Header.Get(frame.HeartBeat))
	if err != nil {
		return err
	}
	cfg := &c.s.cfg
	// STOMP 1.2 "Heart-beating": each direction uses the larger of what
	// the sender can do and what the receiver wants, or none if either
	// side says 0.
	var sendEvery, recvEvery time.Duration
	if version > wire.V10 {
		if cfg.HeartBeatSend > 0 && cy > 0 {
			sendEvery = max(cfg.HeartBeatSend, cy)
		}
		if cfg.HeartBeatReceive > 0 && cx > 0 {
			recvEvery = max(cfg.HeartBeatReceive, cx)
		}
	}
	user, err := c.s.broker.AuthenticateFrom(ctx, c.nc.RemoteAddr().String(), f.Header.Get(frame.Login), f.Header.Get(frame.Passcode))
	if err != nil {
		return protoErr("authentication failed", "The login or passcode was not accepted.")
	}
	sess, err := c.s.broker.NewSession(core.SessionOptions{User: user, ClientID: f.Header.Get("client-id"),
		Protocol: "stomp", RemoteAddr: c.nc.RemoteAddr().String(),
		// An administrator's close: the read loop fails and serve tears
		// the connection down as for a lost client.
		Close: c.closeFromOutside, Abort: c.abortFromOutside})
	if err != nil {
		return protoErr("connect refused", "%v", err)
	}
	c.session = sess
	c.live.Store(sess)
	c.connected = true
	// Logged in: the budget gets its bytes back, and frames may be as
	// large as the broker allows.
	c.acct.Close()
	c.rd.SetMaxFrameSize(cfg.MaxFrameSize)
	if th := sess.StreamThreshold(); th > 0 {
		c.rd.SetStreaming(th, max(cfg.MaxMessageSize, cfg.MaxFrameSize))
	}
	if recvEvery > 0 {
		// STOMP 1.2 "Heart-beating": any data proves the client alive,
		// the bytes of a long frame as well as heart-beats.
		c.readIdle = time.Duration(float64(recvEvery) * cfg.HeartBeatGrace)
		c.clock.SetIdle(c.readIdle)
	} else {
		c.clock.SetReadDeadline(time.Time{})
	}
	h := []string{frame.Version, version.String(), frame.Server, cfg.ServerName,
		frame.Session, strconv.FormatUint(c.s.nextID.Load(), 10)}
	if version > wire.V10 {
		h = append(h, frame.HeartBeat, strconv.FormatInt(sendEvery.Milliseconds(), 10)+","+strconv.FormatInt(recvEvery.Milliseconds(), 10))
	}
	c.pushLater(outItem{f: frame.New(frame.CONNECTED, h...)})
	if sendEvery > 0 {
		c.startHeartBeats(sendEvery)
	}
	return nil
}

// negotiate picks the highest version both sides speak; no accept-version
// header means a 1.0 client.
func negotiate(accept string) (wire.Version, bool) {
	if accept == "" {
		return wire.V10, true
	}
	best, ok := wire.V10, false
	for _, v := range strings.Split(accept, ",") {
		var cand wire.Version
		switch strings.TrimSpace(v) {
		case "1.0":
			cand = wire.V10
		case "1.1":
			cand = wire.V11
		case "1.2":
			cand = wire.V12
		default:
			continue
		}
		if !ok || cand > best {
			best, ok = cand, true
		}
	}
	return best, ok
}

func parseHeartBeat(h string) (cx, cy time.Duration, err error) {
	if h == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(h, ",")
	x, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 31)
	y, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 31)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, protoErr("invalid heart-beat header", "heart-beat must be two non-negative integers, got %q.", h)
	}
	return time.Duration(x) * time.Millisecond, time.Duration(y) * time.Millisecond, nil
}

func (c *conn) onSend(ctx context.Context, f *frame.Frame) error {
	m, err := messageFromFrame(f, time.Now())
	if err != nil {
		return err
	}
	if n := c.rd.Streaming(); n > 0 {
		// A large body: to its file as it arrives. A client cut off
		// mid-body is gone (the read error ends the connection) and its
		// message was never sent.
		if err := c.session.ReceiveBody(m, c.rd.Body(), int64(n)); err != nil {
			if errors.Is(err, core.ErrDiskFull) || errors.Is(err, core.ErrPersistence) || errors.Is(err, core.ErrSessionClosed) {
				return coreErr("send failed", err)
			}
			return err
		}
	}
	if txID, ok := f.Header.Contains(frame.Transaction); ok {
		tx := c.txs[txID]
		if tx == nil {
			return protoErr("unknown transaction", "Transaction %q was not begun.", txID)
		}
		if err := tx.Send(m); err != nil {
			return coreErr("send failed", err)
		}
		return nil
	}
	if m.Durable {
		// Confirm once the journal has it, without holding up the frames
		// that follow: a producer may pipeline.
		slot := c.awaitJournal(f)
		c.session.SendAsync(m, func(err error) { c.journaled(slot, f, err) })
		c.deferred = true
		return nil
	}
	if err := c.session.Send(ctx, m); err != nil {
		return coreErr("send failed", err)
	}
	return nil
}

func (c *conn) onSubscribe(f *frame.Frame) error {
	dest, ok := f.Header.Contains(frame.Destination)
	if !ok || dest == "" {
		return protoErr("missing destination", "SUBSCRIBE needs a destination header.")
	}
	id, ok := f.Header.Contains(frame.Id)
	if !ok {
		if c.version > wire.V10 {
			return protoErr("missing id", "SUBSCRIBE needs an id header in STOMP %s.", c.version)
		}
		id = dest
	}
	if _, dup := c.subs[id]; dup {
		return protoErr("duplicate subscription", "Subscription id %q is already in use on this connection.", id)
	}
	if n := c.s.cfg.MaxSubscriptions; n > 0 && len(c.subs) >= n {
		return protoErr("too many subscriptions", "This connection has %d subscriptions, the broker's limit.", len(c.subs))
	}
	sub := &subscription{id: id}
	switch mode := f.Header.Get(frame.Ack); mode {
	case "", "auto":
		sub.ack = ackAuto
	case "client":
		sub.ack = ackClient
	case "client-individual":
		sub.ack = ackClientIndividual
	default:
		return protoErr("invalid ack mode", "ack must be auto, client or client-individual, got %q.", mode)
	}
	prefetch := c.s.cfg.DefaultPrefetch
	if p, ok := f.Header.Contains("activemq.prefetchSize"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return protoErr("invalid prefetch", "activemq.prefetchSize must be a positive integer, got %q.", p)
		}
		prefetch = n
	}
	addr, rt := parseDestination(dest)
	opts := core.ConsumerOptions{
		Address:     addr,
		RoutingType: rt,
		Credit:      prefetch,
		Exclusive:   f.Header.Get("activemq.exclusive") == "true",
		Selector:    f.Header.Get(hdrSelector),
		Handler:     func(d core.Delivery) { c.push(outItem{d: d, sub: sub}) },
	}
	if name := f.Header.Get("shared-subscription-name"); name != "" {
		if rt != core.Multicast {
			return protoErr("invalid subscription", "Shared subscriptions are for /topic/ destinations, not %q.", dest)
		}
		opts.SharedSubscriptionName = name
	} else if name := durableName(f.Header); name != "" {
		if rt != core.Multicast {
			return protoErr("invalid subscription", "Durable subscriptions are for /topic/ destinations, not %q.", dest)
		}
		opts.SubscriptionName = name
		sub.durable = name
	}
	c.subSeq++
	sub.seq = c.subSeq
	// Register before Subscribe: deliveries may be written at once.
	if c.subs == nil {
		// Made on first use: many connections only send.
		c.subs = make(map[string]*subscription)
		c.subsBySeq = make(map[uint64]*subscription)
	}
	c.subs[id] = sub
	c.subsBySeq[sub.seq] = sub
	cons, err := c.session.Subscribe(opts)
	if err != nil {
		delete(c.subs, id)
		delete(c.subsBySeq, sub.seq)
		var se *selector.SyntaxError
		if errors.As(err, &se) {
			return protoErr("invalid selector", "Selector %q: %s at offset %d.", opts.Selector, se.Msg, se.Pos)
		}
		return coreErr("subscribe failed", err)
	}
	c.outMu.Lock()
	sub.consumer = cons
	c.outMu.Unlock()
	return nil
}

func durableName(h *frame.Header) string {
	if n := h.Get("activemq.subscriptionName"); n != "" {
		return n
	}
	return h.Get("durable-subscription-name")
}

func (c *conn) onUnsubscribe(f *frame.Frame) error {
	id, ok := f.Header.Contains(frame.Id)
	if !ok && c.version == wire.V10 {
		id, ok = f.Header.Contains(frame.Destination)
	}
	name := durableName(f.Header)
	if !ok && name == "" {
		return protoErr("missing id", "UNSUBSCRIBE needs an id header.")
	}
	if sub := c.subs[id]; ok && sub != nil {
		sub.consumer.Close()
		delete(c.subs, id)
		delete(c.subsBySeq, sub.seq)
		if name == "" {
			return nil
		}
	} else if name == "" {
		return protoErr("unknown subscription", "No subscription with id %q.", id)
	}
	// Deleting a durable subscription, as ActiveMQ does when UNSUBSCRIBE
	// names it.
	if err := c.session.Unsubscribe(name); err != nil {
		return coreErr("unsubscribe failed", err)
	}
	return nil
}

// onAck handles ACK and NACK, inside a transaction when one is named.
func (c *conn) onAck(f *frame.Frame) error {
	sub, deliveryID, err := c.resolveAck(f)
	if err != nil {
		return err
	}
	if sub.ack == ackAuto {
		return protoErr("unexpected "+strings.ToLower(f.Command), "Subscription %q uses ack mode auto.", sub.id)
	}
	cons := sub.consumer
	var tx *core.Tx
	if txID, ok := f.Header.Contains(frame.Transaction); ok {
		if tx = c.txs[txID]; tx == nil {
			return protoErr("unknown transaction", "Transaction %q was not begun.", txID)
		}
	}
	n := 1
	switch {
	case f.Command == frame.NACK:
		// NACK takes effect at once, transaction or not: the message is
		// redelivered (or dead-lettered after max delivery attempts).
		err = cons.Release(deliveryID, true)
	case sub.ack == ackClient && tx != nil:
		n, err = tx.AckUpTo(cons, deliveryID)
	case sub.ack == ackClient:
		n, err = cons.AckUpTo(deliveryID)
	case tx != nil:
		err = tx.Ack(cons, deliveryID)
	default:
		err = cons.Ack(deliveryID)
	}
	if err != nil {
		return protoErr("unknown ack id", "%s: no unacknowledged message matches.", f.Command)
	}
	// Credit comes back as messages are settled, in a transaction too, so
	// a transaction can consume more than the prefetch window.
	cons.Flow(n)
	return nil
}

// resolveAck finds the subscription and delivery an ACK or NACK names:
// STOMP 1.2's id header (the MESSAGE's ack header), or 1.0/1.1's
// message-id (with subscription in 1.1).
func (c *conn) resolveAck(f *frame.Frame) (*subscription, uint64, error) {
	if c.version == wire.V12 {
		id, ok := f.Header.Contains(frame.Id)
		if !ok {
			return nil, 0, protoErr("missing id", "%s needs an id header.", f.Command)
		}
		seqS, dS, ok := strings.Cut(id, "-")
		seq, err1 := strconv.ParseUint(seqS, 10, 64)
		d, err2 := strconv.ParseUint(dS, 10, 64)
		sub := c.subsBySeq[seq]
		if !ok || err1 != nil || err2 != nil || sub == nil {
			return nil, 0, protoErr("unknown ack id", "%s id %q does not match a message of this connection.", f.Command, id)
		}
		return sub, d, nil
	}
	midS, ok := f.Header.Contains(frame.MessageId)
	if !ok {
		return nil, 0, protoErr("missing message-id", "%s needs a message-id header.", f.Command)
	}
	mid, err := strconv.ParseUint(midS, 10, 64)
	if err != nil {
		return nil, 0, protoErr("unknown message-id", "message-id %q was not delivered on this connection.", midS)
	}
	subID, bySub := f.Header.Contains(frame.Subscription)
	c.outMu.Lock()
	defer c.outMu.Unlock()
	for _, sub := range c.subs {
		if bySub && sub.id != subID {
			continue
		}
		for i, la := range sub.legacy {
			if la.messageID != mid {
				continue
			}
			if sub.ack == ackClient {
				sub.legacy = append(sub.legacy[:0], sub.legacy[i+1:]...)
			} else {
				sub.legacy = append(sub.legacy[:i], sub.legacy[i+1:]...)
			}
			return sub, la.deliveryID, nil
		}
	}
	return nil, 0, protoErr("unknown message-id", "message-id %q was not delivered on this connection.", midS)
}

func (c *conn) onTx(ctx context.Context, f *frame.Frame) error {
	id, ok := f.Header.Contains(frame.Transaction)
	if !ok || id == "" {
		return protoErr("missing transaction", "%s needs a transaction header.", f.Command)
	}
	tx := c.txs[id]
	switch f.Command {
	case frame.BEGIN:
		if tx != nil {
			return protoErr("duplicate transaction", "Transaction %q is already open.", id)
		}
		tx, err := c.session.Begin()
		if err != nil {
			return protoErr("begin failed", "%v", err)
		}
		if c.txs == nil {
			c.txs = make(map[string]*core.Tx)
		}
		c.txs[id] = tx
		return nil
	}
	if tx == nil {
		return protoErr("unknown transaction", "Transaction %q was not begun.", id)
	}
	delete(c.txs, id)
	if f.Command == frame.ABORT {
		return tx.Rollback()
	}
	if err := tx.Commit(ctx); err != nil {
		return coreErr("commit failed", err)
	}
	return nil
}

// sendError queues an ERROR frame for pe and marks the connection to
// close once it is written. about is the frame at fault, if any. The
// ERROR goes after the answers still waiting for the journal: a client
// must get the RECEIPT of every message that was stored before the ERROR
// that ends the connection, or it would send those messages again.
func (c *conn) sendError(pe *protocolError, about *frame.Frame) {
	c.debug().Str("error", pe.msg).Str("detail", pe.detail).Msg("stomp error sent")
	c.answer(outItem{f: errorFrame(pe, about), close: true})
}

// answer queues it after the answers still waiting for the journal:
// at once when there are none, else in a ready slot behind them, which
// journaled pushes in order. Only the read loop (and serve, after it)
// adds slots, so none can appear between the check and the push.
func (c *conn) answer(it outItem) {
	c.outMu.Lock()
	if len(c.slots) > 0 {
		c.slots = append(c.slots, &answerSlot{item: it, ready: true})
		c.outMu.Unlock()
		return
	}
	c.outMu.Unlock()
	c.pushLater(it)
}

// errorFrame builds the ERROR frame for pe, naming the receipt of the
// frame at fault, if any.
func errorFrame(pe *protocolError, about *frame.Frame) *frame.Frame {
	h := []string{frame.Message, pe.msg, frame.ContentType, "text/plain"}
	if about != nil {
		if id, ok := about.Header.Contains(frame.Receipt); ok {
			h = append(h, frame.ReceiptId, id)
		}
	}
	f := frame.New(frame.ERROR, h...)
	f.Body = []byte(pe.detail)
	return f
}

// push queues an item for the writer. After the connection started
// closing, items are dropped; undelivered messages stay in flight in
// core and return to their queue when the session closes.
func (c *conn) push(it outItem) {
	c.outMu.Lock()
	c.pushLocked(it)
	c.outMu.Unlock()
}

// pushLater queues an answer of the read loop, which writes it at the
// end of its burst (readLoop's flush) unless the writer runs already.
func (c *conn) pushLater(it outItem) {
	c.outMu.Lock()
	if !c.stopping {
		if it.close {
			c.stopping = true
		}
		c.out.PushLater(it)
	}
	c.outMu.Unlock()
}

// pushLocked queues it; outMu is held, so that items queued under it
// (the answers of slots) keep their order. Control frames count toward
// the writer's high-water mark; deliveries, bounded by credit, do not.
func (c *conn) pushLocked(it outItem) {
	if c.stopping {
		return
	}
	if it.close {
		c.stopping = true
	}
	if it.f != nil {
		c.out.Push(it)
	} else {
		c.out.PushBounded(it)
	}
}

// waitWritable blocks the read loop while too many control frames wait
// for the writer, or too many durable sends for the journal.
func (c *conn) waitWritable() error {
	if c.out.Wait() != nil {
		return c.writerErr()
	}
	c.outMu.Lock()
	defer c.outMu.Unlock()
	for len(c.slots) >= maxPendingSends {
		c.drainedLocked().Wait()
	}
	return nil
}

func (c *conn) drainedLocked() *sync.Cond {
	if c.drained == nil {
		c.drained = sync.NewCond(&c.outMu)
	}
	return c.drained
}

// writerErr says why the writer stopped.
func (c *conn) writerErr() error {
	if err := c.out.Err(); err != nil {
		return err
	}
	return errConnClosing
}

// finish stops accepting output, waits (bounded by the write timeout)
// for the writer to flush what is queued, and closes the socket.
func (c *conn) finish() {
	c.outMu.Lock()
	// Answers still waiting for the journal go out first (a DISCONNECT
	// receipt among them), bounded by the write timeout.
	if len(c.slots) > 0 && c.out.Err() == nil {
		timedOut := false
		t := time.AfterFunc(c.s.cfg.WriteTimeout, func() {
			c.outMu.Lock()
			timedOut = true
			c.drainedLocked().Broadcast()
			c.outMu.Unlock()
		})
		for len(c.slots) > 0 && !timedOut {
			c.drainedLocked().Wait()
		}
		t.Stop()
	}
	c.stopping = true
	if c.hb != nil {
		c.hb.Stop()
	}
	c.outMu.Unlock()
	c.out.Finish(outItem{close: true}, c.s.cfg.WriteTimeout)
	c.nc.Close()
}

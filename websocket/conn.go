package websocket

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	gws "github.com/gorilla/websocket"
)

const (
	// closeTimeout bounds sending a close frame, and then waiting for the
	// peer's, when a session ends.
	closeTimeout = time.Second

	// controlTimeout bounds writing a ping.
	controlTimeout = 5 * time.Second
)

var (
	errTextMessage   = errors.New("websocket: text message on a binary-only subprotocol")
	errMessageTooBig = errors.New("websocket: message larger than the limit")
	errPingTimeout   = errors.New("websocket: no answer to pings")
)

// conn is the net.Conn a protocol handler is given: a byte stream over
// one WebSocket connection.
//
// Read concatenates the payloads of the peer's data messages, so a
// protocol frame may span messages or share one. Write sends each call as
// one message. gorilla allows one reader and one writer at a time (and
// panics on concurrent writes), so each side has its mutex; pings and
// close frames go through WriteControl, which gorilla allows alongside
// both.
type conn struct {
	ws *gws.Conn

	// binaryOnly refuses text messages (close 1003): MQTT and AMQP
	// require binary messages.
	binaryOnly bool
	// mirrorText writes text messages while the peer's last data message
	// was text and the payload is valid UTF-8 (STOMP); otherwise every
	// message written is binary.
	mirrorText bool
	peerText   atomic.Bool // the peer's last data message was text

	rmu      sync.Mutex // one reader at a time; guards the fields below
	r        io.Reader  // the message being read; nil between messages
	rerr     error      // sticky: after one, every Read returns it
	wsFailed bool       // gorilla's reader failed: it must not be called again (it panics after 1000 calls)

	wmu sync.Mutex   // one writer at a time
	wdl atomic.Int64 // write deadline in Unix nanoseconds; 0 for none

	// activity counts frames and reads from the peer; the pinger closes
	// a connection on which it stops moving.
	activity    atomic.Uint64
	pingTimeout atomic.Bool // the pinger gave up on the peer

	goingAway atomic.Bool // close with 1001 (server going away), not 1000
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	pmu      sync.Mutex // guards ptimer and pstopped
	ptimer   *time.Timer
	pstopped bool
	pwg      sync.WaitGroup // a ping callback in progress
	interval time.Duration
	seen     uint64 // owned by the ping callback, which never runs twice at once
	missed   int    // owned by the ping callback
}

func newConn(ws *gws.Conn, p *protocol, maxMessage int64) *conn {
	c := &conn{ws: ws, binaryOnly: p.binaryOnly, mirrorText: p.mirrorText}
	if maxMessage > 0 {
		ws.SetReadLimit(maxMessage) // gorilla sends close 1009 past it
	}
	ws.SetPongHandler(func(string) error {
		c.activity.Add(1)
		return nil
	})
	answer := ws.PingHandler() // gorilla's: a pong through WriteControl
	ws.SetPingHandler(func(data string) error {
		c.activity.Add(1)
		return answer(data)
	})
	return c
}

// Read reads the payloads of the peer's data messages as one stream. A
// close frame from the peer ends it with io.EOF; a connection lost
// without one, with io.ErrUnexpectedEOF. After a deadline passes, reads
// fail with an error wrapping os.ErrDeadlineExceeded, and keep failing:
// gorilla cannot resume a read it abandoned mid-frame.
func (c *conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.rerr == nil && c.closed.Load() {
		c.rerr = c.opError("read", net.ErrClosed)
	}
	if c.rerr != nil {
		return 0, c.rerr
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				c.wsFailed = true
				c.rerr = c.readError(err)
				return 0, c.rerr
			}
			c.activity.Add(1)
			if typ == gws.TextMessage && c.binaryOnly {
				c.ws.WriteControl(gws.CloseMessage,
					gws.FormatCloseMessage(gws.CloseUnsupportedData, "binary messages only"),
					time.Now().Add(closeTimeout))
				c.rerr = errTextMessage
				return 0, c.rerr
			}
			if c.mirrorText {
				c.peerText.Store(typ == gws.TextMessage)
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		switch {
		case err == io.EOF: // end of this message
			c.r = nil
			if n > 0 {
				return n, nil
			}
		case err != nil:
			c.r = nil
			c.wsFailed = true
			c.rerr = c.readError(err)
			if n > 0 {
				return n, nil // the error comes with the next Read
			}
			return 0, c.rerr
		case n > 0:
			c.activity.Add(1)
			return n, nil
		}
	}
}

// readError maps gorilla's read errors onto what a net.Conn returns.
func (c *conn) readError(err error) error {
	var ce *gws.CloseError
	var ne net.Error
	switch {
	case c.pingTimeout.Load():
		return errPingTimeout
	case errors.As(err, &ce):
		if ce.Code == gws.CloseAbnormalClosure { // the TCP stream ended without a close frame
			return io.ErrUnexpectedEOF
		}
		return io.EOF
	case errors.Is(err, gws.ErrReadLimit):
		return errMessageTooBig
	case errors.Is(err, net.ErrClosed):
		return c.opError("read", net.ErrClosed)
	case errors.As(err, &ne) && ne.Timeout():
		// gorilla hides the net package's error behind its own type, so
		// errors.Is(err, os.ErrDeadlineExceeded) would fail.
		return c.opError("read", os.ErrDeadlineExceeded)
	}
	return err
}

// Write sends p as one WebSocket message.
func (c *conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Load() {
		return 0, c.opError("write", net.ErrClosed)
	}
	if len(p) == 0 {
		return 0, nil
	}
	typ := gws.BinaryMessage
	if c.mirrorText && c.peerText.Load() && utf8.Valid(p) {
		typ = gws.TextMessage
	}
	// gorilla's write deadline is a plain field read by the write: set it
	// only here, under wmu.
	var dl time.Time
	if ns := c.wdl.Load(); ns != 0 {
		dl = time.Unix(0, ns)
	}
	c.ws.SetWriteDeadline(dl)
	if err := c.ws.WriteMessage(typ, p); err != nil {
		return 0, c.writeError(err)
	}
	return len(p), nil
}

func (c *conn) writeError(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, gws.ErrCloseSent), errors.Is(err, net.ErrClosed):
		return c.opError("write", net.ErrClosed)
	case errors.As(err, &ne) && ne.Timeout():
		return c.opError("write", os.ErrDeadlineExceeded)
	}
	return err
}

func (c *conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "websocket", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// Close sends a close frame (1000, or 1001 when the server is shutting
// down) unless one was sent already (1002, 1003, 1009, or the answer to
// the peer's), waits up to a second for the peer's close frame if no Read
// is in progress (so that a peer still sending does not get a TCP reset
// that could discard the protocol's last words), then closes the
// connection. It is idempotent and safe to call concurrently with Read
// and Write.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.stopPing()
		code := gws.CloseNormalClosure
		if c.goingAway.Load() {
			code = gws.CloseGoingAway
		}
		err := c.ws.WriteControl(gws.CloseMessage, gws.FormatCloseMessage(code, ""), time.Now().Add(closeTimeout))
		if (err == nil || errors.Is(err, gws.ErrCloseSent)) && c.rmu.TryLock() {
			if !c.wsFailed {
				c.lingerLocked()
			}
			c.rerr = c.opError("read", net.ErrClosed)
			c.rmu.Unlock()
		}
		if err := c.ws.NetConn().Close(); !errors.Is(err, net.ErrClosed) { // closed already by the pinger or a shutdown
			c.closeErr = err
		}
	})
	return c.closeErr
}

// lingerLocked discards what the peer still sends until its close frame
// arrives, for at most closeTimeout. c.rmu is held.
func (c *conn) lingerLocked() {
	c.ws.SetReadDeadline(time.Now().Add(closeTimeout))
	for {
		if _, _, err := c.ws.NextReader(); err != nil {
			break
		}
	}
	c.wsFailed = true
}

// forceClose closes the TCP connection at once, without a close frame:
// blocked reads and writes fail, and the handler returns.
func (c *conn) forceClose() {
	c.ws.NetConn().Close()
}

// NetConn returns the connection the WebSocket runs on, as
// *tls.Conn.NetConn does, so that a front-end can reset it (the
// cluster's fence, outbound.Abort). A handler must not read from it or
// write to it.
func (c *conn) NetConn() net.Conn { return c.ws.NetConn() }

func (c *conn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *conn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }

func (c *conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	return c.ws.SetReadDeadline(t) // the TCP connection's: safe at any time
}

// SetWriteDeadline records t for the next writes and also sets it on the
// TCP connection at once, so that a write blocked now is interrupted.
func (c *conn) SetWriteDeadline(t time.Time) error {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	c.wdl.Store(ns)
	return c.ws.NetConn().SetWriteDeadline(t)
}

// startPing sends a ping every interval and closes the connection once
// nothing (no message, pong or ping) has come from the peer for two
// intervals in a row. The pings run in timer callbacks, one at a time;
// Close stops them and waits for one in progress.
func (c *conn) startPing(interval time.Duration) {
	if interval <= 0 {
		return
	}
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.pstopped {
		return
	}
	c.interval = interval
	c.ptimer = time.AfterFunc(interval, c.ping)
}

func (c *conn) ping() {
	c.pmu.Lock()
	if c.pstopped {
		c.pmu.Unlock()
		return
	}
	c.pwg.Add(1)
	c.pmu.Unlock()
	defer c.pwg.Done()

	if a := c.activity.Load(); a != c.seen {
		c.seen, c.missed = a, 0
	} else {
		c.missed++
	}
	if c.missed >= 2 {
		c.pingTimeout.Store(true)
		c.ws.WriteControl(gws.CloseMessage, gws.FormatCloseMessage(gws.CloseGoingAway, "no answer to pings"),
			time.Now().Add(closeTimeout))
		c.forceClose()
		return
	}
	if err := c.ws.WriteControl(gws.PingMessage, nil, time.Now().Add(controlTimeout)); err != nil {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return // closed or broken: Read and Write see it too
		}
	}
	c.pmu.Lock()
	if !c.pstopped {
		c.ptimer.Reset(c.interval)
	}
	c.pmu.Unlock()
}

func (c *conn) stopPing() {
	c.pmu.Lock()
	c.pstopped = true
	if c.ptimer != nil {
		c.ptimer.Stop()
	}
	c.pmu.Unlock()
	c.pwg.Wait()
}

package mqtt

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"

	"github.com/junctionmq/junction/core/guard"
)

// maxCorked is the most a corked connection holds before it writes
// anyway.
const maxCorked = 64 << 10

// corkConn is the net.Conn handed to mochi. Between cork and uncork its
// writes are gathered and go out in one write when the last cork is
// undone, so that the bridge's writers (PUBACKs of pipelined publishes,
// deliveries of core-served subscriptions) send a burst with one syscall
// instead of one per packet: mochi writes each packet it is given at
// once. Every write of the connection passes through here, mochi's own
// included, so bytes leave in the order they were written. Nothing is
// allocated while the connection is idle: the buffer comes from a pool
// for a burst and goes back after it.
//
// Reads are gathered too: mochi reads through a small buffer of its own
// (allocated for every connection, idle or not), and each time the
// socket is readable the connection reads all that is waiting into a
// large pooled buffer, which goes back to the pool once mochi has taken
// every byte. An idle connection waits holding no buffer of ours.
type corkConn struct {
	net.Conn

	// Read side: only mochi's read goroutine reads, so no lock.
	raw    syscall.RawConn // nil: no read-ahead (not a plain TCP connection)
	replay []byte          // the CONNECT ServeConn read, handed to mochi first
	rbuf   *readBuf        // read ahead, not yet taken; nil when empty
	limit  *packetLimit    // nil: no packet size check of ours (limits.go)
	// clock bounds the time of each packet (core/guard): every read that
	// may wait goes through it, and mochi's deadlines are set through it.
	// packetLimit's framing tells it where packets begin and end.
	clock       *guard.Clock
	timedOut    func() // called once when a packet took too long; may be nil
	timeoutSaid bool   // checkTimeout has run (limits.go)
	// preauth is the CONNECT's charge to the pre-authentication budget,
	// given back once mochi has authenticated the client (limitHook) or
	// the connection ends (ServeConn).
	preauth *guard.Account

	mu    sync.Mutex
	corks int     // guarded by mu
	buf   *[]byte // guarded by mu: pending bytes, nil when empty
	err   error   // guarded by mu: the first failed write; later ones fail too
}

var corkPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

func newCorkConn(c net.Conn) *corkConn {
	cc := &corkConn{Conn: c, clock: guard.NewClock(c, guard.Rule{})}
	// Only a plain TCP connection: a wrapper's SyscallConn would bypass
	// whatever it holds itself (bytes it peeked, TLS).
	if tc, ok := c.(*net.TCPConn); ok {
		cc.raw, _ = tc.SyscallConn()
	}
	return cc
}

// readAhead is the size of the pooled read-ahead buffers.
const readAhead = 32 << 10

type readBuf struct {
	b    [readAhead]byte
	r, w int
}

var readPool = sync.Pool{New: func() any { return new(readBuf) }}

// readBuffered reads into p what was read ahead; else it waits for data and
// reads all that is waiting, up to readAhead bytes, into a pooled buffer
// (taken only once there is something to read, so an idle connection
// waits holding none), and hands p the first of it. Read (limits.go)
// calls it.
func (c *corkConn) readBuffered(p []byte) (int, error) {
	if len(c.replay) > 0 {
		n := copy(p, c.replay)
		c.replay = c.replay[n:]
		if len(c.replay) == 0 {
			c.replay = nil
		}
		return n, nil
	}
	if c.rbuf == nil && c.raw != nil && len(p) < readAhead {
		if err := c.clock.Arm(); err != nil {
			return 0, err
		}
		n, err := c.fill()
		if err = c.clock.Done(n, err); err != nil {
			return 0, err
		}
	}
	if rb := c.rbuf; rb != nil {
		n := copy(p, rb.b[rb.r:rb.w])
		rb.r += n
		if rb.r == rb.w {
			c.rbuf = nil
			rb.r, rb.w = 0, 0
			readPool.Put(rb)
		}
		return n, nil
	}
	if err := c.clock.Arm(); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	return n, c.clock.Done(n, err)
}

// SetDeadline sets the write deadline, and the read deadline through the
// clock (mochi sets both from the keep-alive before each packet).
func (c *corkConn) SetDeadline(t time.Time) error {
	c.clock.SetReadDeadline(t)
	return c.Conn.SetWriteDeadline(t)
}

// SetReadDeadline sets the read deadline through the clock.
func (c *corkConn) SetReadDeadline(t time.Time) error {
	return c.clock.SetReadDeadline(t)
}

// fill waits until the socket is readable and reads what is there, and
// returns how much.
func (c *corkConn) fill() (int, error) {
	var rb *readBuf
	var n int
	var err error
	rerr := c.raw.Read(func(fd uintptr) bool {
		rb = readPool.Get().(*readBuf)
		for {
			n, err = syscall.Read(int(fd), rb.b[:])
			if err != syscall.EINTR {
				break
			}
		}
		if err == syscall.EAGAIN {
			readPool.Put(rb)
			rb = nil
			return false // wait for the socket, holding no buffer
		}
		return true
	})
	switch {
	case rerr != nil: // closed, or past the read deadline
		if rb != nil {
			readPool.Put(rb)
		}
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: unwrapOp(rerr)}
	case err != nil:
		readPool.Put(rb)
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", err)}
	case n == 0:
		readPool.Put(rb)
		return 0, io.EOF
	}
	rb.r, rb.w = 0, n
	c.rbuf = rb
	return n, nil
}

// unwrapOp returns the error inside a *net.OpError (the raw read's).
func unwrapOp(err error) error {
	if oe, ok := err.(*net.OpError); ok {
		return oe.Err
	}
	return err
}

// corkOf returns cl's corkConn, or nil (the bridge's internal client,
// or a connection not established through ServeConn).
func corkOf(cl *mochi.Client) *corkConn {
	c, _ := cl.Net.Conn.(*corkConn)
	return c
}

// Write writes p, or buffers it while the connection is corked.
func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if c.buf != nil && len(*c.buf)+len(p) > maxCorked {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	if c.corks == 0 || len(p) > maxCorked {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		return c.Conn.Write(p) // as mochi would have: its write, its error
	}
	if c.buf == nil {
		c.buf = corkPool.Get().(*[]byte)
	}
	*c.buf = append(*c.buf, p...)
	return len(p), nil
}

// cork starts gathering writes; each cork needs an uncork.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corks++
	c.mu.Unlock()
}

// uncork undoes a cork; the last one writes what was gathered. The error
// is that of the connection: after a failed write it is closed.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corks--
	if c.corks > 0 {
		return c.err
	}
	return c.flushLocked()
}

func (c *corkConn) flushLocked() error {
	if c.err != nil || c.buf == nil {
		return c.err
	}
	b := c.buf
	c.buf = nil
	_, err := c.Conn.Write(*b)
	if cap(*b) <= maxCorked*2 {
		*b = (*b)[:0]
		corkPool.Put(b)
	}
	if err != nil {
		c.failLocked(err)
	}
	return err
}

// failLocked records a failed write of gathered bytes and closes the
// connection, so that mochi's read loop ends the session: the writes it
// stands for were reported as done, and nothing written after them may
// go out in their place.
func (c *corkConn) failLocked(err error) {
	c.err = err
	c.Conn.Close()
}

// Package inbound lets a connection's goroutine wait for data without
// holding a read buffer, so that an idle connection costs one goroutine
// with a small stack and no buffer on the read side.
//
// A front-end serves a connection in two parts: the connection's
// goroutine (the caller of its ServeConn) only waits, in [Waiter.Wait],
// at a depth a 2 KiB stack holds; a worker ([Workers]: a pooled
// goroutine, handed each burst of data) reads and handles what has
// arrived and returns when [Waiter.Ready] says the socket has nothing
// more, after giving its read buffer back to a pool. A goroutine's stack grows for its deepest call
// and shrinks only at a garbage collection, which an idle broker seldom
// has: done on the connection's goroutine, the handshake's work alone
// would leave every idle connection a stack of 4 or 8 KiB.
//
// Only a plain TCP connection can be waited on this way ([Waiter.Init]
// reports false otherwise), or one that replays bytes it read ahead
// before the socket's (the one port's protocol detection: [Replayer]):
// it has data while it holds some. Other wrappers' bytes (TLS records,
// WebSocket frames) are not the socket's, so such a connection's worker
// reads until the end.
package inbound

import (
	"errors"
	"net"
	"syscall"
)

// Replayer is a connection that returns bytes it read ahead (Buffered
// of them are left) before reading on from the connection it wraps
// (NetConn).
type Replayer interface {
	net.Conn
	Buffered() int
	NetConn() net.Conn
}

// Waiter waits until a plain TCP connection has something to read.
// It is used by one goroutine at a time.
type Waiter struct {
	nc     net.Conn
	replay Replayer // nc, if it replays bytes read ahead; else nil
	raw    syscall.RawConn
	// The callbacks, made once (making them allocates), and their state.
	waitFn func(fd uintptr) bool
	peekFn func(fd uintptr)
	waited bool
	ready  bool
	peek   [1]byte
}

// Init prepares w to wait on nc, reporting whether it can: nc must be a
// plain TCP connection, or a Replayer of one.
func (w *Waiter) Init(nc net.Conn) bool {
	socket := nc
	r, replays := nc.(Replayer)
	if replays {
		socket = r.NetConn()
	}
	tc, ok := socket.(*net.TCPConn)
	if !ok {
		return false
	}
	if replays {
		w.replay = r
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	w.nc, w.raw = nc, raw
	w.waitFn, w.peekFn = w.waitReady, w.peekNow
	return true
}

// Ready reports, without waiting or reading anything, whether the socket
// has data, or an end or an error for a read to report.
func (w *Waiter) Ready() bool {
	if w.replay != nil && w.replay.Buffered() > 0 {
		return true
	}
	w.ready = false
	if err := w.raw.Control(w.peekFn); err != nil {
		return true // closed: the read tells
	}
	return w.ready
}

func (w *Waiter) peekNow(fd uintptr) {
	_, _, err := syscall.Recvfrom(int(fd), w.peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	w.ready = err != syscall.EAGAIN
}

// Wait blocks, holding no buffer and reading nothing, until the socket
// has something to read, or until the connection's read deadline passes
// or it is closed (the error is then a read's: os.ErrDeadlineExceeded or
// net.ErrClosed inside a *net.OpError).
func (w *Waiter) Wait() error {
	if w.replay != nil && w.replay.Buffered() > 0 {
		return nil
	}
	w.waited = false
	if err := w.raw.Read(w.waitFn); err != nil {
		return &net.OpError{Op: "read", Net: "tcp", Source: w.nc.LocalAddr(), Addr: w.nc.RemoteAddr(), Err: unwrapOp(err)}
	}
	return nil
}

// waitReady is Wait's callback. The first time it looks (reading
// nothing) whether data came since the worker's last read: the poller
// forgets an event that came before the wait began. With none, the
// poller waits for the socket and calls it again: ready.
func (w *Waiter) waitReady(fd uintptr) bool {
	if w.waited {
		return true
	}
	w.waited = true
	_, _, err := syscall.Recvfrom(int(fd), w.peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err != syscall.EAGAIN // data, an end or an error: the worker's read tells
}

// unwrapOp returns the error inside a *net.OpError (the raw read's).
func unwrapOp(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Err
	}
	return err
}

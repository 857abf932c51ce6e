package mqtt

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/junctionmq/junction/core/guard"
	inwait "github.com/junctionmq/junction/internal/inbound" // mqtt has a type inbound
)

// Reading packets. An MQTT packet is a first byte (type and flags), a
// remaining length of one to four bytes (MQTT 3.1.1 §2.2.3, 5 §1.5.5),
// then that many bytes. packetReader hands the connection's read loop
// one packet at a time, and holds as little memory as the traffic
// needs:
//
//   - While a plain TCP connection is idle it holds no buffer at all: it
//     waits until the socket is readable (syscall.RawConn) and only then
//     takes a buffer from a pool, reads what is waiting, and gives the
//     buffer back once every byte of it has been handed out. Other
//     connections (TLS, WebSocket, the one-port listener's) wait in a
//     read into a small buffer of their own, and use a pooled one while
//     data keeps coming.
//   - A packet larger than the buffer gets an allocation of its own,
//     sized from its remaining length (which is checked against the
//     limit first), so the buffers never grow and an idle connection
//     never keeps a large one.
//
// The body of a small packet is a view of the buffer, valid until the
// next call; the caller copies what it keeps (a PUBLISH is copied once,
// into the allocation that becomes the message's body).

// readBufSize is the size of the pooled read buffers: many small
// packets per read while data flows.
const readBufSize = 16 << 10

// smallBufSize is the buffer of a connection that cannot wait without
// one (not plain TCP), while it is idle.
const smallBufSize = 512

var readPool = sync.Pool{New: func() any { return new([readBufSize]byte) }}

// errPacketTooLarge: a packet's declared size is over the limit.
var errPacketTooLarge = errors.New("mqtt: packet too large")

// errIdle: every byte read has been handed out and the reader yields
// (packetReader.yield) rather than wait for more.
var errIdle = errors.New("mqtt: no more to read for now")

// errMalformedLength: a remaining length of more than four bytes.
var errMalformedLength = errors.New("mqtt: malformed remaining length")

type packetReader struct {
	nc  net.Conn
	raw syscall.RawConn // nil: not plain TCP, reads block in nc.Read
	// replay is nc when it replays bytes the one port read ahead of its
	// socket (raw's); nil otherwise.
	replay inwait.Replayer
	// rawFill's and tryRaw's callbacks, and what they read.
	rawFn  func(fd uintptr) bool
	tryFn  func(fd uintptr) bool
	wait   inwait.Waiter // waitIdle's
	rawBuf *[readBufSize]byte
	rawN   int
	rawErr error

	pooled *[readBufSize]byte // the pooled buffer while data flows; nil otherwise
	small  []byte             // non-TCP: the buffer an idle read waits in, made on first use
	buf    []byte             // pooled[:] or small, or nil
	r, w   int                // unread bytes are buf[r:w]

	// max is the largest packet accepted: first byte, length and body.
	max int
	// deadline, if set, gives the deadline set before each read that
	// waits for the peer (the CONNECT's, then the keep-alive's).
	deadline deadliner
	// yield makes next return errIdle instead of waiting for more data
	// when every byte read has been handed out and the socket has no
	// more (plain TCP only): the caller waits with waitIdle.
	yield bool
	// answered: the client most likely waits for the answer to what was
	// just read (CONNACK), so the next fill of a yielding reader yields
	// without a read that would find nothing; the wait looks before it
	// sleeps (waitIdle).
	answered bool
	// rule bounds how long a packet may take to arrive once begun; the
	// clock applying it is made when first needed.
	rule    guard.Rule
	clock   *guard.Clock
	inFrame bool

	// Streaming (stream.go): a PUBLISH whose remaining length is above
	// streamAbove (up to maxStream) is returned with its variable header
	// only; left bytes of payload follow, read through payload.
	streamAbove, maxStream int
	v5                     bool // the variable header has properties
	left                   int
	perr                   error // the payload reader's error
}

func newPacketReader(nc net.Conn) *packetReader {
	pr := &packetReader{}
	pr.init(nc)
	return pr
}

// init sets pr up to read nc.
func (pr *packetReader) init(nc net.Conn) {
	pr.nc = nc
	// Only a plain TCP connection, or one that replays bytes the one
	// port read ahead (handed out first, replayFill): another wrapper's
	// SyscallConn would bypass what it holds itself (TLS records).
	socket := nc
	r, replays := nc.(inwait.Replayer)
	if replays {
		socket = r.NetConn()
	}
	if tc, ok := socket.(*net.TCPConn); ok {
		if replays {
			pr.replay = r
		}
		pr.raw, _ = tc.SyscallConn()
		// Made here (in a worker), not in waitIdle's goroutine: making
		// them allocates.
		pr.rawFn, pr.tryFn = pr.readRaw, pr.readNow
		pr.wait.Init(nc)
	}
}

// release gives back the pooled buffer, if it holds one and every byte
// of it has been handed out.
func (pr *packetReader) release() {
	if pr.pooled != nil && pr.r == pr.w {
		readPool.Put(pr.pooled)
		pr.pooled, pr.buf = nil, nil
		pr.r, pr.w = 0, 0
	}
}

// close gives back the pooled buffer whatever it holds.
func (pr *packetReader) close() {
	if pr.pooled != nil {
		readPool.Put(pr.pooled)
		pr.pooled, pr.buf = nil, nil
	}
	pr.r, pr.w = 0, 0
}

// next reads one packet: its first byte and its body. The body is a view
// of the read buffer, valid until the next call, unless owned is set (it
// was read into an allocation of its own, which the caller may keep).
func (pr *packetReader) next() (first byte, body []byte, owned bool, err error) {
	// The fixed header: at most five bytes.
	for {
		if n := pr.w - pr.r; n >= 2 {
			first, length, hlen, ok, err := parseHeader(pr.buf[pr.r:pr.w])
			if err != nil {
				return 0, nil, false, err
			}
			if ok {
				if first>>4 == publishType && pr.streamAbove > 0 && length > pr.streamAbove {
					if hlen+length > pr.maxStream {
						return first, nil, false, errPacketTooLarge
					}
					return pr.publishHead(first, hlen, length)
				}
				if hlen+length > pr.max {
					return first, nil, false, errPacketTooLarge
				}
				first, body, owned, err = pr.body(first, hlen, length)
				if err == nil {
					pr.endFrame()
				}
				return first, body, owned, err
			}
		}
		if err := pr.fill(); err != nil {
			return 0, nil, false, err
		}
	}
}

// parseHeader decodes a fixed header at the start of b: the first byte,
// the remaining length and the header's size; ok is false when b does
// not hold all of it yet.
func parseHeader(b []byte) (first byte, length, hlen int, ok bool, err error) {
	first = b[0]
	mult := 1
	for i := 1; i < len(b); i++ {
		length += int(b[i]&0x7f) * mult
		if b[i]&0x80 == 0 {
			return first, length, i + 1, true, nil
		}
		if i == 4 {
			return first, 0, 0, false, errMalformedLength
		}
		mult *= 128
	}
	return first, 0, 0, false, nil
}

// body returns the body of a packet whose header (hlen bytes) is at
// buf[r:].
func (pr *packetReader) body(first byte, hlen, length int) (byte, []byte, bool, error) {
	total := hlen + length
	if pr.w-pr.r >= total {
		b := pr.buf[pr.r+hlen : pr.r+total : pr.r+total]
		pr.r += total
		return first, b, false, nil
	}
	if total <= readBufSize {
		// It fits a pooled buffer: gather it there.
		if err := pr.ensurePooled(); err != nil {
			return 0, nil, false, err
		}
		for pr.w-pr.r < total {
			if err := pr.readMore(true); err != nil {
				return 0, nil, false, err
			}
		}
		b := pr.buf[pr.r+hlen : pr.r+total : pr.r+total]
		pr.r += total
		return first, b, false, nil
	}
	// A large packet: an allocation of its own, the part already read
	// copied in and the rest read straight into it.
	b := make([]byte, length)
	n := copy(b, pr.buf[pr.r+hlen:pr.w])
	pr.r = pr.w
	pr.release()
	for n < length {
		m, err := pr.readConn(b[n:], true)
		n += m
		if err != nil && n < length {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, nil, false, err
		}
	}
	return first, b, true, nil
}

// ensurePooled moves the unread bytes to the start of a pooled buffer.
func (pr *packetReader) ensurePooled() error {
	if pr.pooled != nil {
		if pr.r > 0 {
			pr.w = copy(pr.buf, pr.buf[pr.r:pr.w])
			pr.r = 0
		}
		return nil
	}
	p := readPool.Get().(*[readBufSize]byte)
	n := copy(p[:], pr.buf[pr.r:pr.w])
	pr.pooled, pr.buf, pr.r, pr.w = p, p[:], 0, n
	return nil
}

// readMore reads into the free end of the buffer; inFrame: part of a
// packet is buffered (its frame clock runs).
func (pr *packetReader) readMore(inFrame bool) error {
	n, err := pr.readConn(pr.buf[pr.w:], inFrame)
	pr.w += n
	if n > 0 {
		return nil
	}
	if err == nil || err == io.EOF {
		if pr.w > pr.r {
			return io.ErrUnexpectedEOF
		}
		return io.EOF
	}
	return err
}

// fill reads more bytes when fewer than a whole fixed header are
// buffered.
func (pr *packetReader) fill() error {
	if pr.r == pr.w {
		pr.release()
		pr.r, pr.w = 0, 0
		if pr.raw != nil {
			if pr.replay != nil && pr.replay.Buffered() > 0 {
				return pr.replayFill()
			}
			if pr.yield && pr.answered {
				pr.answered = false
				if err := pr.setDeadline(); err != nil {
					return err
				}
				return errIdle
			}
			if pr.yield {
				return pr.tryRaw()
			}
			return pr.rawFill()
		}
		if pr.buf == nil {
			if pr.small == nil {
				pr.small = make([]byte, smallBufSize)
			}
			pr.buf = pr.small
		}
		return pr.readMore(false)
	}
	// A partial header: make room after it.
	if len(pr.buf)-pr.r < 5 {
		if err := pr.ensurePooled(); err != nil {
			return err
		}
	}
	return pr.readMore(true)
}

// deadliner says when a read must have returned.
type deadliner interface {
	readDeadline() time.Time
}

func (pr *packetReader) setDeadline() error {
	if pr.deadline == nil {
		return nil
	}
	if pr.clock != nil {
		// The clock owns the connection's deadline once it exists.
		pr.clock.SetReadDeadline(pr.deadline.readDeadline())
		if err := pr.clock.Arm(); err != nil {
			return err
		}
	} else if err := pr.nc.SetReadDeadline(pr.deadline.readDeadline()); err != nil {
		return err
	}
	// A stop that set its deadline while this one was computed must not
	// be overridden: the deadline is read again (it is long past once
	// the connection is being stopped).
	if d := pr.deadline.readDeadline(); d == stopDeadline {
		return pr.nc.SetReadDeadline(d)
	}
	return nil
}

// readConn reads from the connection under the read deadline and, while
// a packet is under way (inFrame), its frame clock (core/guard): a
// packet must arrive within Rule.Timeout plus the time its bytes earn
// at Rule.MinRate, or the read fails with guard.ErrFrameTimeout. The
// clock is made the first time a packet is not read whole at once.
func (pr *packetReader) readConn(p []byte, inFrame bool) (int, error) {
	if !inFrame || pr.rule.Timeout <= 0 {
		if err := pr.setDeadline(); err != nil {
			return 0, err
		}
		return pr.nc.Read(p)
	}
	if pr.clock == nil {
		pr.clock = guard.NewClock(pr.nc, pr.rule)
	}
	if !pr.inFrame {
		pr.clock.Start()
		pr.inFrame = true
	}
	if err := pr.setDeadline(); err != nil {
		return 0, err
	}
	n, err := pr.nc.Read(p)
	return n, pr.clock.Done(n, err)
}

// endFrame tells the frame clock that the packet under way is complete.
func (pr *packetReader) endFrame() {
	if pr.inFrame {
		pr.clock.End()
		pr.inFrame = false
	}
}

// waitIdle waits, holding no buffer and reading nothing, until a plain
// TCP connection has data or its read deadline passes (set by the last
// tryRaw), for a reader that yields. The connection's goroutine waits
// here, so it is kept shallow: everything else happens in the worker
// (conn.serve).
func (pr *packetReader) waitIdle() error {
	return pr.wait.Wait()
}

// tryRaw reads what a plain TCP connection has, without waiting: with
// nothing there, it sets the read deadline for the wait to come and
// returns errIdle.
func (pr *packetReader) tryRaw() error {
	if err := pr.raw.Read(pr.tryFn); err != nil {
		return &net.OpError{Op: "read", Net: "tcp", Source: pr.nc.LocalAddr(), Addr: pr.nc.RemoteAddr(), Err: unwrapOp(err)}
	}
	p, n, err := pr.rawBuf, pr.rawN, pr.rawErr
	pr.rawBuf, pr.rawErr = nil, nil
	switch {
	case err == syscall.EAGAIN:
		if err := pr.setDeadline(); err != nil {
			return err
		}
		return errIdle
	case err != nil:
		return &net.OpError{Op: "read", Net: "tcp", Source: pr.nc.LocalAddr(), Addr: pr.nc.RemoteAddr(), Err: os.NewSyscallError("read", err)}
	case n <= 0:
		readPool.Put(p)
		return io.EOF
	}
	pr.pooled, pr.buf, pr.r, pr.w = p, p[:], 0, n
	return nil
}

// readNow is tryRaw's callback: it reads what the socket has into a
// pooled buffer, or records EAGAIN; it never asks to wait.
func (pr *packetReader) readNow(fd uintptr) bool {
	p := readPool.Get().(*[readBufSize]byte)
	n, err := syscall.Read(int(fd), p[:])
	for err == syscall.EINTR {
		n, err = syscall.Read(int(fd), p[:])
	}
	if err != nil {
		readPool.Put(p)
		p = nil
	}
	pr.rawBuf, pr.rawN, pr.rawErr = p, n, err
	return true
}

// replayFill hands out, in a pooled buffer, the bytes the one port read
// ahead of the socket's (Buffered() > 0: the Read takes only those).
func (pr *packetReader) replayFill() error {
	p := readPool.Get().(*[readBufSize]byte)
	n, err := pr.replay.Read(p[:])
	if err != nil || n <= 0 {
		readPool.Put(p)
		if err == nil {
			err = io.ErrNoProgress
		}
		return err
	}
	pr.pooled, pr.buf, pr.r, pr.w = p, p[:], 0, n
	return nil
}

// rawFill waits until the socket is readable, holding no buffer, then
// reads what is waiting into a pooled one.
func (pr *packetReader) rawFill() error {
	if err := pr.setDeadline(); err != nil {
		return err
	}
	rerr := pr.raw.Read(pr.rawFn)
	p, n, err := pr.rawBuf, pr.rawN, pr.rawErr
	pr.rawBuf, pr.rawErr = nil, nil
	switch {
	case rerr != nil: // closed, or past the read deadline
		if p != nil {
			readPool.Put(p)
		}
		return &net.OpError{Op: "read", Net: "tcp", Source: pr.nc.LocalAddr(), Addr: pr.nc.RemoteAddr(), Err: unwrapOp(rerr)}
	case err != nil:
		readPool.Put(p)
		return &net.OpError{Op: "read", Net: "tcp", Source: pr.nc.LocalAddr(), Addr: pr.nc.RemoteAddr(), Err: os.NewSyscallError("read", err)}
	case n <= 0:
		readPool.Put(p)
		return io.EOF
	}
	pr.pooled, pr.buf, pr.r, pr.w = p, p[:], 0, n
	return nil
}

// readRaw is rawFill's callback: it reads what the socket has into a
// pooled buffer, taken only once there is something to read.
func (pr *packetReader) readRaw(fd uintptr) bool {
	p := readPool.Get().(*[readBufSize]byte)
	n, err := syscall.Read(int(fd), p[:])
	for err == syscall.EINTR {
		n, err = syscall.Read(int(fd), p[:])
	}
	if err == syscall.EAGAIN {
		readPool.Put(p)
		return false // wait for the socket, holding no buffer
	}
	pr.rawBuf, pr.rawN, pr.rawErr = p, n, err
	return true
}

// unwrapOp returns the error inside a *net.OpError (the raw read's).
func unwrapOp(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Err
	}
	return err
}

package guard

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// ErrFrameTimeout is returned by a [Clock]'s reads when a frame has taken
// longer than its [Rule] allows. It is not a deadline error
// (os.ErrDeadlineExceeded): front-ends tell it apart from their own
// heart-beat and idle timeouts, answer with their protocol's error and
// close the connection.
var ErrFrameTimeout = errors.New("guard: frame not received in time")

// Rule is how long one frame may take to arrive.
type Rule struct {
	// Timeout is the time any frame may take once its first byte has
	// arrived; 0 turns the clock off.
	Timeout time.Duration
	// MinRate, in bytes per second, earns a frame more time as its bytes
	// arrive: each byte received adds 1/MinRate seconds. 0 earns none.
	MinRate int64
}

// Conn is the connection a Clock reads from: a net.Conn, or anything
// with its reading half.
type Conn interface {
	Read(p []byte) (int, error)
	SetReadDeadline(t time.Time) error
}

// Clock bounds the time one frame may take (see the package doc). It
// reads from a connection below the front-end's buffered reader, and
// owns that connection's read deadline: the front-end sets its own
// deadline (heart-beats, keep-alive) through [Clock.SetReadDeadline], and
// the Clock sets on the connection whichever comes first, its owner's or
// the frame's. It is used by the connection's reading goroutine only,
// but for Interrupt, which another goroutine calls to wake a read (at
// shutdown): a deadline set on the connection directly could be replaced
// by the Clock's own before the read waits.
type Clock struct {
	conn Conn
	rule Rule

	interrupted atomic.Bool // set by Interrupt: every read fails

	owner   time.Time     // the owner's read deadline; zero: none
	idle    time.Duration // or, when > 0, the owner's idle time after the last byte
	last    time.Time     // when the last bytes arrived (for idle)
	armed   time.Time     // the deadline set on conn
	known   bool          // armed is what conn has
	byFrame bool          // armed is the frame's bound, not the owner's

	inFrame   bool
	got       int64         // bytes of the frame received
	waited    time.Duration // time spent waiting for them
	waitStart time.Time     // the current wait's start; zero when not counted
}

// NewClock returns a clock reading from c under rule.
func NewClock(c Conn, rule Rule) *Clock {
	return &Clock{conn: c, rule: rule}
}

// SetReadDeadline sets the owner's read deadline, which applies from the
// next read on. It never fails: the deadline is set on the connection
// when a read is about to wait.
func (c *Clock) SetReadDeadline(t time.Time) error {
	c.owner, c.idle = t, 0
	return nil
}

// SetIdle makes the owner's deadline d after the last byte received
// (from now, if none has been yet), in place of SetReadDeadline's: a
// peer that must send something every so often (STOMP heart-beats) may
// as well send the bytes of a long frame. 0 leaves no deadline.
func (c *Clock) SetIdle(d time.Duration) {
	c.owner, c.idle, c.last = time.Time{}, d, time.Now()
}

// Interrupt makes the read under way, and every later one, fail with
// os.ErrDeadlineExceeded. It may be called from any goroutine.
func (c *Clock) Interrupt() {
	c.interrupted.Store(true)
	// After the flag: an Arm that sets a deadline after this one sees
	// the flag once it has set its own (see Arm).
	c.conn.SetReadDeadline(time.Now())
}

// Start marks the first byte of a frame as received, if no frame is
// under way: the frame's clock starts.
func (c *Clock) Start() {
	if !c.inFrame {
		c.inFrame, c.got, c.waited = true, 0, 0
	}
}

// End marks the frame under way as complete.
func (c *Clock) End() { c.inFrame = false }

// Next is called between frames by a front-end that reads through
// [Clock.Read]: the frame just read is complete, and when buffered
// bytes of the stream are already read ahead (buffered > 0), the next
// frame has begun. Otherwise the next frame begins with the next byte
// that arrives.
func (c *Clock) Next(buffered int) {
	c.inFrame = false
	if buffered > 0 {
		c.Start()
	}
}

// Read reads from the connection as Arm and Done frame it. Bytes that
// arrive while no frame is under way start one.
func (c *Clock) Read(p []byte) (int, error) {
	if err := c.Arm(); err != nil {
		return 0, err
	}
	n, err := c.conn.Read(p)
	wasIn := c.inFrame
	err = c.Done(n, err)
	if !wasIn && n > 0 {
		c.Start()
		c.got = int64(n)
	}
	return n, err
}

// slackDiv sets how late a frame's or an idle deadline may fire: by at
// most 1/slackDiv of its timeout. The slack lets a deadline set on the
// connection stand for many reads (setting one costs about a
// microsecond) while the deadline it stands for moves on with every
// byte; a deadline never fires early.
const slackDiv = 8

// Arm prepares a read of the connection that may wait: it sets the read
// deadline to the owner's or, during a frame, to the time the frame has
// left if that comes first. It returns ErrFrameTimeout when the frame
// has no time left. A front-end with a read path of its own calls Arm
// before a read that may wait and Done after it.
//
// The deadline set on the connection must lie in [lo, hi]: never before
// what is due (lo), and not much after it (hi, by the slack above; an
// absolute owner's deadline is kept exactly). One already set that lies
// there is kept, so a steady upload sets a new one only every so often.
func (c *Clock) Arm() error {
	var lo, hi time.Time
	byFrame := false
	switch {
	case c.idle > 0:
		lo = c.last.Add(c.idle)
		hi = lo.Add(c.idle / slackDiv)
	case !c.owner.IsZero():
		lo, hi = c.owner, c.owner
	}
	c.waitStart = time.Time{}
	if c.inFrame && c.rule.Timeout > 0 {
		now := time.Now()
		left := c.rule.Timeout + c.earned() - c.waited
		if left <= 0 {
			return ErrFrameTimeout
		}
		if fd := now.Add(left); lo.IsZero() || fd.Before(lo) {
			lo, hi, byFrame = fd, fd.Add(c.rule.Timeout/slackDiv), true
		}
		c.waitStart = now
	}
	c.byFrame = byFrame
	keep := c.known && (lo.IsZero() && c.armed.IsZero() ||
		!lo.IsZero() && !c.armed.IsZero() && !c.armed.Before(lo) && !c.armed.After(hi))
	if !keep {
		if err := c.conn.SetReadDeadline(hi); err != nil {
			if !closed(err) {
				return err
			}
			// A connection that takes no deadline because it is closed
			// does not wait either: its read tells how it ended. net.Pipe
			// refuses deadlines once its peer has closed, and its read
			// then returns io.EOF, which the owner must see as the end
			// of the stream rather than as a failure.
			c.known = false
		} else {
			c.armed, c.known = hi, true
		}
	}
	// Checked after the deadline is set: an Interrupt that set its own
	// before ours is seen here; one that comes later sets its own after.
	if c.interrupted.Load() {
		return os.ErrDeadlineExceeded
	}
	return nil
}

// Done accounts a read prepared by Arm that returned n bytes and err, and
// returns err, or ErrFrameTimeout if the read ran into the frame's
// deadline.
func (c *Clock) Done(n int, err error) error {
	if n > 0 && c.idle > 0 {
		c.last = time.Now()
	}
	if c.inFrame {
		c.got += int64(n)
		if !c.waitStart.IsZero() {
			c.waited += time.Since(c.waitStart)
		}
	}
	if err != nil && c.byFrame && isTimeout(err) && !c.interrupted.Load() {
		return ErrFrameTimeout
	}
	return err
}

// earned is the time the frame's bytes received so far have earned.
func (c *Clock) earned() time.Duration {
	if c.rule.MinRate <= 0 {
		return 0
	}
	return time.Duration(float64(c.got) / float64(c.rule.MinRate) * float64(time.Second))
}

// closed reports whether err is a connection's "closed" error.
func closed(err error) bool {
	return errors.Is(err, io.ErrClosedPipe) || errors.Is(err, net.ErrClosed)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

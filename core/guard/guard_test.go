package guard

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAccountCharges(t *testing.T) {
	b := NewBudget(100)
	a := b.Open(60)
	if err := a.Charge(50); err != nil {
		t.Fatal(err)
	}
	if err := a.Charge(50); err != nil { // only 10 more: the account's limit
		t.Fatal(err)
	}
	if a.Held() != 60 || b.Held() != 60 {
		t.Fatalf("held %d, budget %d; want 60, 60", a.Held(), b.Held())
	}
	c := b.Open(60)
	if err := c.Charge(40); err != nil {
		t.Fatal(err)
	}
	if err := c.Charge(1); !errors.Is(err, ErrBudget) {
		t.Fatalf("charge past the budget: %v", err)
	}
	if c.Held() != 40 || b.Held() != 100 {
		t.Fatalf("a refused charge was kept: account %d, budget %d", c.Held(), b.Held())
	}
	a.Close()
	a.Close()
	if b.Held() != 40 {
		t.Fatalf("after close the budget holds %d, want 40", b.Held())
	}
	if err := a.Charge(10); err != nil || b.Held() != 40 {
		t.Fatalf("a closed account charged: %v, budget %d", err, b.Held())
	}
	if err := c.Charge(1); err != nil {
		t.Fatalf("room was given back, yet: %v", err)
	}
	c.Close()
	if b.Held() != 0 {
		t.Fatalf("budget holds %d after every account closed", b.Held())
	}
}

func TestUnlimitedBudgetCounts(t *testing.T) {
	b := NewBudget(0)
	a := b.Open(0)
	if err := a.Charge(1 << 40); err != nil {
		t.Fatal(err)
	}
	if b.Held() != 1<<40 {
		t.Fatalf("held %d", b.Held())
	}
	a.Close()
	if b.Held() != 0 {
		t.Fatalf("held %d after close", b.Held())
	}
}

// Many accounts charging at once never take the budget past its size.
func TestBudgetConcurrent(t *testing.T) {
	const size = 1000
	b := NewBudget(size)
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := int64(0)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				a := b.Open(100)
				for a.Charge(7) == nil && a.Held() < 100 {
				}
				mu.Lock()
				peak = max(peak, b.Held())
				mu.Unlock()
				a.Close()
			}
		}()
	}
	wg.Wait()
	if peak > size || b.Held() != 0 {
		t.Fatalf("peak %d (budget %d), held at the end %d", peak, size, b.Held())
	}
}

func TestAccountReader(t *testing.T) {
	b := NewBudget(10)
	a := b.Open(0)
	r := a.Reader(strings.NewReader(strings.Repeat("x", 24)))
	buf := make([]byte, 8)
	if n, err := r.Read(buf); n != 8 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	if n, err := r.Read(buf); n != 0 || !errors.Is(err, ErrBudget) {
		t.Fatalf("read past the budget: %d, %v", n, err)
	}
	a.Close()
	if n, err := r.Read(buf); n == 0 || err != nil || b.Held() != 0 {
		t.Fatalf("read after close: %d, %v, budget %d", n, err, b.Held())
	}
}

// pipe returns the two ends of a synchronous in-memory connection.
func pipe(t *testing.T) (server, client net.Conn) {
	server, client = net.Pipe()
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// trickle writes s to c a byte every interval until stop is closed or
// the connection fails.
func trickle(c net.Conn, s string, interval time.Duration, stop <-chan struct{}) {
	for i := 0; i < len(s); i++ {
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
		if _, err := c.Write([]byte{s[i]}); err != nil {
			return
		}
	}
}

// A frame whose bytes trickle in is cut once its time is up.
func TestClockCutsTrickle(t *testing.T) {
	server, client := pipe(t)
	clk := NewClock(server, Rule{Timeout: 300 * time.Millisecond, MinRate: 1 << 20})
	stop := make(chan struct{})
	defer close(stop)
	go trickle(client, strings.Repeat("x", 1000), 20*time.Millisecond, stop)
	start := time.Now()
	buf := make([]byte, 16)
	var err error
	for err == nil {
		_, err = clk.Read(buf)
	}
	d := time.Since(start)
	if !errors.Is(err, ErrFrameTimeout) {
		t.Fatalf("trickled frame ended with %v, want ErrFrameTimeout", err)
	}
	if d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("cut after %v, want about 300ms", d)
	}
}

// A large frame that arrives steadily above MinRate takes far longer
// than Timeout and is not cut.
func TestClockSparesSteadyUpload(t *testing.T) {
	server, client := pipe(t)
	clk := NewClock(server, Rule{Timeout: 300 * time.Millisecond, MinRate: 16 << 10})
	go func() {
		chunk := make([]byte, 4<<10)
		for range 30 { // 120 KiB at 80 KiB/s: about 1.5s; each chunk earns 250ms
			time.Sleep(50 * time.Millisecond)
			if _, err := client.Write(chunk); err != nil {
				return
			}
		}
		client.Close()
	}()
	start := time.Now()
	n, err := io.Copy(io.Discard, clk)
	if err != nil {
		t.Fatalf("steady upload cut after %d bytes, %v: %v", n, time.Since(start), err)
	}
	if n != 120<<10 {
		t.Fatalf("read %d bytes", n)
	}
}

// A peer's close ends the stream with io.EOF even when the read's
// deadline must be set anew, which net.Pipe refuses once its peer has
// closed (seen as "read/write on closed pipe" at the end of the steady
// upload above, when its last read came to move the deadline).
func TestClockPeerCloseIsEOF(t *testing.T) {
	for _, rule := range []Rule{{}, {Timeout: time.Second}, {Timeout: time.Second, MinRate: 1}} {
		server, client := pipe(t)
		clk := NewClock(server, rule)
		clk.SetReadDeadline(time.Now().Add(time.Minute))
		closed := make(chan struct{})
		go func() {
			client.Write([]byte("ab"))
			client.Close()
			close(closed)
		}()
		buf := make([]byte, 2)
		if _, err := io.ReadFull(clk, buf); err != nil || string(buf) != "ab" {
			t.Fatalf("rule %+v: read %q, %v", rule, buf, err)
		}
		<-closed
		// A deadline moved: the next read must set it on the pipe.
		clk.SetReadDeadline(time.Now().Add(2 * time.Minute))
		if n, err := clk.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("rule %+v: read after the peer's close: %d, %v; want io.EOF", rule, n, err)
		}
	}
}

// Between frames only the owner's deadline applies; its expiry is the
// owner's timeout, not a frame timeout.
func TestClockOwnerDeadlineBetweenFrames(t *testing.T) {
	server, client := pipe(t)
	clk := NewClock(server, Rule{Timeout: 50 * time.Millisecond})
	go client.Write([]byte("a"))
	buf := make([]byte, 1)
	if _, err := clk.Read(buf); err != nil {
		t.Fatal(err)
	}
	clk.Next(0) // the one-byte frame is complete
	clk.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	start := time.Now()
	_, err := clk.Read(buf)
	if !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ErrFrameTimeout) {
		t.Fatalf("idle read ended with %v, want the owner's deadline", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("idle read cut after %v, before the owner's deadline", d)
	}
}

// During a frame the owner's deadline still applies when it comes first,
// and is reported as the owner's.
func TestClockOwnerDeadlineFirst(t *testing.T) {
	server, client := pipe(t)
	clk := NewClock(server, Rule{Timeout: time.Minute})
	go client.Write([]byte("a"))
	buf := make([]byte, 1)
	if _, err := clk.Read(buf); err != nil {
		t.Fatal(err)
	}
	clk.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := clk.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read ended with %v, want the owner's deadline", err)
	}
}

// Time the reader spends elsewhere (the front-end busy with the previous
// frame, back-pressure) is not charged to the frame.
func TestClockCountsOnlyWaiting(t *testing.T) {
	server, client := pipe(t)
	clk := NewClock(server, Rule{Timeout: 150 * time.Millisecond})
	go client.Write([]byte("ab"))
	buf := make([]byte, 1)
	if _, err := clk.Read(buf); err != nil { // "a": the frame begins
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // busy, not reading
	if _, err := clk.Read(buf); err != nil {
		t.Fatalf("the frame was charged for time the reader did not wait: %v", err)
	}
	// With nothing more coming, the frame's time now runs out.
	if _, err := clk.Read(buf); !errors.Is(err, ErrFrameTimeout) {
		t.Fatalf("want ErrFrameTimeout, got %v", err)
	}
}

// Next with bytes read ahead starts the next frame's clock at once.
func TestClockNextBuffered(t *testing.T) {
	server, _ := pipe(t)
	clk := NewClock(server, Rule{Timeout: 100 * time.Millisecond})
	clk.Next(3)
	start := time.Now()
	_, err := clk.Read(make([]byte, 1))
	if !errors.Is(err, ErrFrameTimeout) {
		t.Fatalf("want ErrFrameTimeout, got %v", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("cut after %v", d)
	}
	// A clock that is off never cuts.
	off := NewClock(server, Rule{})
	off.Next(3)
	off.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	if _, err := off.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a clock without a timeout: %v", err)
	}
}

// With an idle time, the owner's deadline follows the last byte: bytes
// of a long frame keep the connection alive, silence ends it with the
// owner's deadline error.
func TestClockIdle(t *testing.T) {
	server, client := pipe(t)
	clk := NewClock(server, Rule{})
	clk.SetIdle(400 * time.Millisecond)
	go func() {
		for range 20 { // 1s of bytes every 50ms
			time.Sleep(50 * time.Millisecond)
			if _, err := client.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 1)
	start := time.Now()
	for i := range 20 {
		if _, err := clk.Read(buf); err != nil {
			t.Fatalf("byte %d: %v after %v", i, err, time.Since(start))
		}
	}
	last := time.Now()
	if _, err := clk.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("silence ended with %v, want the idle deadline", err)
	}
	if d := time.Since(last); d < 400*time.Millisecond {
		t.Fatalf("idle deadline after %v", d)
	}
}

// BenchmarkClockRead reads a loopback TCP stream in 16 KiB reads, straight
// from the connection and through a Clock kept inside a frame (its worst
// case: a deadline computed and set before every read).
func BenchmarkClockRead(b *testing.B) {
	for _, name := range []string{"direct", "clock"} {
		b.Run(name, func(b *testing.B) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
			nc, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			var r io.Reader = nc
			if name == "clock" {
				clk := NewClock(nc.(*net.TCPConn), Rule{Timeout: time.Minute, MinRate: 1})
				clk.Start()
				r = clk
			}
			buf := make([]byte, 16<<10)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for range b.N {
				if _, err := io.ReadFull(r, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// countingConn returns bytes at once and counts the deadlines set.
type countingConn struct {
	deadlines int
	last      time.Time
}

func (c *countingConn) Read(p []byte) (int, error) { return len(p), nil }
func (c *countingConn) SetReadDeadline(t time.Time) error {
	c.deadlines++
	c.last = t
	return nil
}

// A deadline set on the connection stands for many reads of a steady
// upload, and is never earlier than what the frame is due.
func TestClockArmsRarely(t *testing.T) {
	conn := &countingConn{}
	clk := NewClock(conn, Rule{Timeout: time.Second, MinRate: 1 << 10})
	clk.SetIdle(10 * time.Second)
	clk.Start()
	buf := make([]byte, 1<<10)
	for i := range 1000 {
		if _, err := clk.Read(buf); err != nil {
			t.Fatal(err)
		}
		// Due when read i was armed: 1s + 1s per KiB received before
		// it (no waiting to speak of), or the idle deadline 10s after the
		// last byte, whichever is first.
		due := time.Now().Add(min(time.Second+time.Duration(i)*time.Second, 10*time.Second))
		if conn.last.Before(due.Add(-50 * time.Millisecond)) {
			t.Fatalf("read %d: deadline %v before what is due %v", i, conn.last, due)
		}
	}
	if conn.deadlines > 20 {
		t.Fatalf("%d deadlines set for 1000 reads", conn.deadlines)
	}
}

// Interrupt wakes a read that waits without a deadline, and fails every
// later read, even one whose Arm would set a deadline of its own.
func TestClockInterrupt(t *testing.T) {
	server, _ := pipe(t)
	clk := NewClock(server, Rule{Timeout: time.Minute})
	clk.Next(1) // a frame under way: Arm sets a deadline a minute away
	done := make(chan error, 1)
	go func() {
		_, err := clk.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the read wait (not asserted)
	clk.Interrupt()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("interrupted read: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Interrupt did not wake the read")
	}
	clk.SetReadDeadline(time.Time{})
	clk.Next(0)
	if _, err := clk.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after Interrupt: %v", err)
	}
}

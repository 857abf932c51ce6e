package outbound

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/testserve"
)

// fakeConn records each Write. While gate is set, a Write waits for it
// to be closed; fail makes writes fail.
type fakeConn struct {
	mu     sync.Mutex
	writes [][]byte
	gate   chan struct{}
	fail   error
	closed bool
	// entered is signalled when a Write starts waiting at the gate.
	entered chan struct{}
}

func (c *fakeConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	gate, fail := c.gate, c.fail
	c.mu.Unlock()
	if gate != nil {
		if c.entered != nil {
			c.entered <- struct{}{}
		}
		<-gate
	}
	if fail != nil {
		return 0, fail
	}
	c.mu.Lock()
	c.writes = append(c.writes, append([]byte(nil), p...))
	c.mu.Unlock()
	return len(p), nil
}

func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }
func (c *fakeConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

func (c *fakeConn) all() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(bytes.Join(c.writes, nil))
}

func (c *fakeConn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.writes)
}

// item is a test frame: its text, and whether it obeys the window.
type item struct {
	s      string
	window bool
}

// enc writes each item's text; items that obey the window are held
// while it is 0 or while earlier ones are held. written counts Written
// calls, before BeforeWrite calls.
type enc struct {
	mu      sync.Mutex
	window  int
	written int
	before  int
}

func (e *enc) BeforeWrite() {
	e.mu.Lock()
	e.before++
	e.mu.Unlock()
}

func (e *enc) Append(buf []byte, it item, held bool) ([]byte, bool) {
	if it.window {
		e.mu.Lock()
		defer e.mu.Unlock()
		if held || e.window == 0 {
			return buf, false
		}
		e.window--
	}
	return append(buf, it.s...), true
}

func (e *enc) Written() {
	e.mu.Lock()
	e.written++
	e.mu.Unlock()
}

func (e *enc) open(n int) {
	e.mu.Lock()
	e.window += n
	e.mu.Unlock()
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (w *Writer[T]) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.running
}

// A burst queued while a write is in progress goes out in one write,
// in order.
func TestBurstIsOneWrite(t *testing.T) {
	c := &fakeConn{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	e := &enc{}
	w := New[item](c, e, Config{})
	w.Push(item{s: "a"})
	<-c.entered // the first write is under way
	for i := range 100 {
		w.Push(item{s: fmt.Sprint(i % 10)})
	}
	c.mu.Lock()
	close(c.gate)
	c.gate = nil
	c.mu.Unlock()
	eventually(t, "the writer to go idle", w.idle)
	if n := c.count(); n != 2 {
		t.Fatalf("%d writes, want 2 (the first item, then the burst)", n)
	}
	want := "a" + strings.Repeat("0123456789", 10)
	if got := c.all(); got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
	if e.written != 2 || e.before != 2 {
		t.Fatalf("BeforeWrite called %d times, Written %d, want once each per write", e.before, e.written)
	}
}

// The goroutine runs only while there is something to write.
func TestNoGoroutineWhileIdle(t *testing.T) {
	base := runtime.NumGoroutine()
	c := &fakeConn{}
	ws := make([]*Writer[item], 100)
	for i := range ws {
		ws[i] = New[item](c, &enc{}, Config{})
	}
	if n := runtime.NumGoroutine(); n > base {
		t.Fatalf("%d goroutines for 100 idle writers", n-base)
	}
	for round := range 3 {
		for _, w := range ws {
			w.Push(item{s: "x"})
		}
		eventually(t, "every writer to go idle", func() bool {
			for _, w := range ws {
				if !w.idle() {
					return false
				}
			}
			return true
		})
		eventually(t, "the goroutines to exit", func() bool { return runtime.NumGoroutine() <= base })
		if got := c.count(); got != 100*(round+1) {
			t.Fatalf("round %d: %d writes", round, got)
		}
	}
}

// FlushSize bounds what one write gathers.
func TestFlushSize(t *testing.T) {
	c := &fakeConn{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	w := New[item](c, &enc{}, Config{FlushSize: 10})
	w.Push(item{s: "start"})
	<-c.entered
	for range 25 {
		w.Push(item{s: "abcd"})
	}
	c.mu.Lock()
	close(c.gate)
	c.gate = nil
	c.mu.Unlock()
	eventually(t, "idle", w.idle)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.writes[1:] {
		if len(p) > 10+4 {
			t.Fatalf("write %d of %d bytes, over FlushSize plus one item", i, len(p))
		}
	}
	if got := string(bytes.Join(c.writes, nil)); got != "start"+strings.Repeat("abcd", 25) {
		t.Fatalf("wrote %q", got)
	}
}

// Held items keep their order; control items pass them; Kick offers
// the head again.
func TestHeldItemsKeepOrder(t *testing.T) {
	c := &fakeConn{}
	e := &enc{window: 2}
	w := New[item](c, e, Config{})
	for i := range 5 {
		w.PushBounded(item{s: fmt.Sprintf("d%d,", i), window: true})
		w.Push(item{s: fmt.Sprintf("c%d,", i)})
	}
	eventually(t, "idle", w.idle)
	if got := c.all(); got != "d0,c0,d1,c1,c2,c3,c4," {
		t.Fatalf("wrote %q", got)
	}
	// The window opens for one: only the head goes, although a push
	// arrives before the kick.
	e.open(1)
	w.Push(item{s: "c5,"})
	w.Kick()
	eventually(t, "d2", func() bool { return strings.Contains(c.all(), "d2,") })
	eventually(t, "idle", w.idle)
	if got := c.all(); strings.Contains(got, "d3,") || !strings.Contains(got, "c5,") {
		t.Fatalf("after a window of one: wrote %q", got)
	}
	e.open(10)
	w.Kick()
	eventually(t, "the rest", func() bool { return strings.HasSuffix(c.all(), "d3,d4,") })
	// A new window item behind none held goes at once.
	w.PushBounded(item{s: "d5,", window: true})
	eventually(t, "d5", func() bool { return strings.HasSuffix(c.all(), "d5,") })
}

// A failed write stops the writer, closes the connection and refuses
// further items.
func TestWriteErrorStops(t *testing.T) {
	boom := errors.New("broken pipe")
	c := &fakeConn{fail: boom}
	w := New[item](c, &enc{}, Config{})
	w.Push(item{s: "x"})
	eventually(t, "the connection to close", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.closed
	})
	eventually(t, "idle", w.idle)
	if !errors.Is(w.Err(), boom) {
		t.Fatalf("Err() = %v", w.Err())
	}
	if w.Push(item{s: "y"}) || w.PushBounded(item{s: "y"}) {
		t.Fatal("a push after the failure was accepted")
	}
	if err := w.Wait(); !errors.Is(err, ErrStopped) {
		t.Fatalf("Wait() = %v", err)
	}
	if err := w.Finish(item{s: "bye"}, time.Second); !errors.Is(err, boom) {
		t.Fatalf("Finish() = %v, want the write's error", err)
	}
}

// Wait blocks while HighWater pushed items are unwritten; bounded items
// do not count.
func TestWaitAtHighWater(t *testing.T) {
	c := &fakeConn{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	w := New[item](c, &enc{}, Config{HighWater: 3})
	for range 10 {
		w.PushBounded(item{s: "d"})
	}
	w.Push(item{s: "a"})
	w.Push(item{s: "b"})
	<-c.entered
	if err := w.Wait(); err != nil { // 2 counted: below the mark
		t.Fatal(err)
	}
	w.Push(item{s: "c"})
	done := make(chan error, 1)
	go func() { done <- w.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("Wait returned (%v) with 3 items unwritten", err)
	case <-time.After(50 * time.Millisecond):
	}
	c.mu.Lock()
	close(c.gate)
	c.gate = nil
	c.mu.Unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait still blocked after the writes")
	}
}

// Finish writes what was queued before its item, then the item, and
// stops; held items are not waited for.
func TestFinish(t *testing.T) {
	c := &fakeConn{}
	e := &enc{}
	w := New[item](c, e, Config{})
	w.PushBounded(item{s: "held,", window: true})
	w.Push(item{s: "a,"})
	w.Push(item{s: "b,"})
	if err := w.Finish(item{s: "bye"}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := c.all(); got != "a,b,bye" {
		t.Fatalf("wrote %q", got)
	}
	if w.Push(item{s: "late"}) {
		t.Fatal("a push after Finish was accepted")
	}
	if !w.idle() {
		t.Fatal("goroutine still running after Finish")
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		t.Fatal("Finish closed the connection")
	}
}

// Finish gives up after its timeout when the peer does not read.
func TestFinishTimeout(t *testing.T) {
	c := &fakeConn{gate: make(chan struct{})}
	defer close(c.gate)
	w := New[item](c, &enc{}, Config{})
	w.Push(item{s: "stuck"})
	start := time.Now()
	if err := finishSoon(w); !errors.Is(err, ErrStopped) {
		t.Fatalf("Finish() = %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("Finish took %v", d)
	}
}

// finishSoon calls Finish in a goroutine: Finish also waits for a write
// in progress, which the test's gate holds until the test ends.
func finishSoon(w *Writer[item]) error {
	done := make(chan error, 1)
	go func() { done <- w.Finish(item{s: "bye"}, 50*time.Millisecond) }()
	w.mu.Lock()
	for !w.stopped {
		w.mu.Unlock()
		time.Sleep(time.Millisecond)
		w.mu.Lock()
	}
	w.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-time.After(100 * time.Millisecond):
		return ErrStopped // still waiting for the gated write, as documented
	}
}

// Close drops what is queued and refuses more; it is idempotent.
func TestClose(t *testing.T) {
	c := &fakeConn{}
	e := &enc{}
	w := New[item](c, e, Config{})
	w.PushBounded(item{s: "held", window: true})
	eventually(t, "idle", w.idle)
	w.Close()
	w.Close()
	e.open(1)
	w.Kick()
	if w.Push(item{s: "x"}) {
		t.Fatal("push after Close accepted")
	}
	time.Sleep(10 * time.Millisecond)
	if got := c.all(); got != "" {
		t.Fatalf("wrote %q after Close", got)
	}
}

// Items from many goroutines arrive whole, each goroutine's in order.
func TestConcurrentPushers(t *testing.T) {
	c := &fakeConn{}
	w := New[item](c, &enc{}, Config{FlushSize: 64})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				w.Push(item{s: fmt.Sprintf("<%d:%d>", g, i)})
				if i%50 == 0 {
					w.Wait()
				}
			}
		}()
	}
	wg.Wait()
	eventually(t, "idle", w.idle)
	got := c.all()
	next := make([]int, 8)
	for _, f := range strings.Split(strings.Trim(got, "<>"), "><") {
		var g, i int
		if _, err := fmt.Sscanf(f, "%d:%d", &g, &i); err != nil {
			t.Fatalf("frame %q: %v", f, err)
		}
		if i != next[g] {
			t.Fatalf("goroutine %d: item %d after %d", g, i, next[g]-1)
		}
		next[g]++
	}
	for g, n := range next {
		if n != 500 {
			t.Fatalf("goroutine %d: %d of 500 items", g, n)
		}
	}
}

// countEnc gathers a run of "+" items into one "<n>" written before the
// next other item, or by Flush before the write.
type countEnc struct {
	enc
	n int
}

func (e *countEnc) Append(buf []byte, it item, held bool) ([]byte, bool) {
	if it.s == "+" {
		e.n++
		return buf, true
	}
	return e.enc.Append(e.Flush(buf), it, held)
}

func (e *countEnc) Flush(buf []byte) []byte {
	if e.n > 0 {
		buf = fmt.Appendf(buf, "<%d>", e.n)
		e.n = 0
	}
	return buf
}

// What a Flusher keeps pending is appended before the burst is written,
// also when the burst is nothing else.
func TestFlusherPendingWrittenWithBurst(t *testing.T) {
	c := &fakeConn{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	e := &countEnc{}
	w := New[item](c, e, Config{})
	w.Push(item{s: "a"})
	<-c.entered // the first write is under way
	for _, s := range []string{"+", "+", "b", "+", "+", "+"} {
		w.Push(item{s: s})
	}
	c.mu.Lock()
	close(c.gate)
	c.gate = nil
	c.mu.Unlock()
	eventually(t, "the burst", func() bool { return c.all() == "a<2>b<3>" })
	eventually(t, "the writer idle", w.idle)
	w.Push(item{s: "+"})
	eventually(t, "a burst of pending only", func() bool { return c.all() == "a<2>b<3><1>" })
	if n := c.count(); n != 3 {
		t.Fatalf("%d writes, want 3", n)
	}
	w.Close()
}

// Finish on an idle writer writes on the caller's goroutine, each write
// bounded by its timeout: over loopback to a peer that does not read,
// it gives up in time with the write's error; to a peer that reads, the
// goodbye arrives whole.
func TestFinishIdleOverLoopback(t *testing.T) {
	// A peer that reads.
	client, server := testserve.Pair(t)
	w := New[item](server, &enc{}, Config{})
	done := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(client)
		done <- b
	}()
	if err := w.Finish(item{s: "bye"}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	server.Close()
	if got := string(<-done); got != "bye" {
		t.Fatalf("the peer read %q", got)
	}

	// A peer that does not read: 4 MiB cannot all be written. The
	// sockets' buffers are made small (a write then blocks after about
	// 64 KiB; with the system's it took 4 MiB here, and may take more
	// elsewhere), so that a few MiB surely block and cost little to
	// build and encode: under the race detector on a loaded machine,
	// building 32 MiB (it was counted in Finish's time) and encoding it
	// took seconds each. The time is Finish's alone.
	client, server = testserve.Pair(t)
	if err := client.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	if err := server.(*net.TCPConn).SetWriteBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	w = New[item](server, &enc{}, Config{WriteTimeout: time.Minute})
	bye := item{s: strings.Repeat("x", 4<<20)}
	start := time.Now()
	err := w.Finish(bye, 300*time.Millisecond)
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Finish() = %v, want the write's deadline error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Finish took %v", d)
	}
	if !w.idle() {
		t.Fatal("writer still running after Finish")
	}
}

// Items queued with PushLater wait for Flush, which writes them in one
// write on the caller's goroutine (nothing runs once it returns); a Push
// meanwhile starts the goroutine, which writes them first, in order.
func TestPushLaterFlush(t *testing.T) {
	c := &fakeConn{}
	w := New[item](c, &enc{}, Config{})
	w.PushLater(item{s: "a,"})
	w.PushLater(item{s: "b,"})
	time.Sleep(10 * time.Millisecond)
	if n := c.count(); n != 0 || !w.idle() {
		t.Fatalf("%d writes, idle %v before Flush", n, w.idle())
	}
	w.Flush()
	if got := c.all(); got != "a,b," || c.count() != 1 || !w.idle() {
		t.Fatalf("after Flush: %q in %d writes, idle %v", got, c.count(), w.idle())
	}
	w.Flush() // nothing queued: nothing written

	w.PushLater(item{s: "c,"})
	w.Push(item{s: "d,"})
	eventually(t, "the pushes written", func() bool { return c.all() == "a,b,c,d," })
	eventually(t, "the writer idle", w.idle)
	if c.count() > 3 {
		t.Fatalf("%d writes", c.count())
	}
}

// What is queued while Flush writes goes on in a goroutine; Wait at the
// high-water mark with items queued by PushLater starts the writer
// rather than wait forever.
func TestFlushHandsOverAndWait(t *testing.T) {
	gate := make(chan struct{})
	c := &fakeConn{gate: gate, entered: make(chan struct{}, 1)}
	w := New[item](c, &enc{}, Config{HighWater: 2})
	w.PushLater(item{s: "a,"})
	flushed := make(chan struct{})
	go func() {
		w.Flush()
		close(flushed)
	}()
	<-c.entered // Flush's write waits at the gate
	w.PushLater(item{s: "b,"})
	w.PushLater(item{s: "c,"})
	c.mu.Lock()
	c.gate = nil // the next writes go through
	c.mu.Unlock()
	close(gate)
	<-flushed
	eventually(t, "the items queued during Flush written", func() bool { return c.all() == "a,b,c," })
	eventually(t, "the writer idle", w.idle)

	w.PushLater(item{s: "d,"})
	w.PushLater(item{s: "e,"})
	done := make(chan error, 1)
	go func() { done <- w.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait blocked on items queued with PushLater")
	}
	eventually(t, "all written", func() bool { return c.all() == "a,b,c,d,e," })
}

// Package outbound writes one connection's outgoing frames: it gathers
// what is queued into one buffer and writes a burst with one syscall, and
// it runs a goroutine only while there is something to write, so an idle
// connection costs no goroutine and no buffer on the write side.
//
// A front-end queues items (frames, or deliveries still to encode) with
// [Writer.Push] from any goroutine, including a core delivery handler
// that holds a queue lock: Push never blocks and never writes. The first
// item queued while the writer is idle starts its goroutine, which takes
// everything queued at once, has the [Encoder] append each item to a
// buffer, writes whenever the buffer reaches Config.FlushSize and once
// more when the queue is empty, then exits. The buffer comes from a pool
// when the goroutine starts and goes back when it exits. A reader that
// answers the frames of a burst queues its answers with [Writer.PushLater]
// and calls [Writer.Flush] at the end of the burst: when no goroutine is
// writing, the reader writes them itself, with no goroutine started.
//
// Flow control: an Encoder may hold an item back (a window is closed,
// such as MQTT's Receive Maximum or an AMQP session window) by returning
// false from Append. Held items keep their order: only the first is
// offered again, on the next [Writer.Kick] (the window reopened) or the
// next Push, and the items behind it wait; later items are offered with
// held set, so that an encoder lets control frames pass and holds the
// items that must stay in order behind the held ones.
//
// An Encoder that gathers several items into one frame (AMQP's run of
// accepted outcomes as one disposition) implements [Flusher]: what it
// keeps pending is appended before the burst is written.
//
// Back-pressure: items queued with Push count toward Config.HighWater
// until written; [Writer.Wait] blocks while that many are queued, so a
// client that sends requests without reading the answers is slowed
// instead of growing the queue. Items whose number is bounded elsewhere
// (deliveries within a consumer's credit) are queued with
// [Writer.PushBounded] and do not count.
//
// Ending: a failed write stops the writer (later pushes are refused),
// records the error and closes the connection, so that its reader ends
// too. [Writer.Finish] queues a last item (a protocol's goodbye), waits
// until it and everything queued before it are written, and stops; when
// no goroutine is writing, Finish writes them itself, so that a goodbye
// costs no goroutine.
// [Writer.Close] stops at once, dropping what is queued.
//
// Lock order: a Writer's lock is taken inside core delivery handlers
// (core's Queue.mu held) and is never held while calling the Encoder,
// the connection or anything else.
package outbound

import (
	"errors"
	"sync"
	"time"
)

// ErrStopped is returned by Wait and Finish once the writer has stopped
// (Close, Finish, or after a failed write, whose error Err returns).
var ErrStopped = errors.New("outbound: writer stopped")

// Conn is the write side of a connection (a net.Conn satisfies it).
type Conn interface {
	Write(p []byte) (int, error)
	SetWriteDeadline(t time.Time) error
	Close() error
}

// Encoder turns items into bytes. Its methods are called only by the
// writer's goroutine, one at a time, and never with the Writer's lock
// held; they may call Push, PushBounded and Kick.
type Encoder[T any] interface {
	// Append encodes item at the end of buf and returns the longer
	// buffer and true, or returns false (buf unchanged) to hold the item
	// back. held reports that items before this one are being held, so
	// an encoder that keeps some items in order holds them too.
	Append(buf []byte, item T, held bool) ([]byte, bool)
	// BeforeWrite is called before each write of what was appended since
	// the previous write; it may block until those bytes may leave (MQTT
	// waits there for the journal to hold the packet ids it assigned).
	BeforeWrite()
	// Written is called after what was appended since the previous call
	// has been written, so that the encoder can settle it (acknowledge
	// deliveries that need no answer, return credit).
	Written()
}

// A Flusher is an Encoder that keeps encoding pending from one item to
// the next (a run of acknowledgements gathered into one frame): Flush
// appends what is pending, and is called once the items taken at once
// are encoded, before their last write.
type Flusher interface {
	Flush(buf []byte) []byte
}

// Config tunes a Writer. Zero fields take the defaults given.
type Config struct {
	// FlushSize is how many bytes are gathered before a write although
	// more is queued. Default 64 KiB.
	FlushSize int
	// HighWater is how many items queued with Push make Wait block.
	// Default 1024.
	HighWater int
	// WriteTimeout bounds each write; a peer that does not read for that
	// long fails the write and ends the connection. Default 30s.
	WriteTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.FlushSize <= 0 {
		c.FlushSize = 64 << 10
	}
	if c.HighWater <= 0 {
		c.HighWater = 1024
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	return c
}

// Writer writes the items queued for one connection; see the package
// doc.
type Writer[T any] struct {
	conn Conn
	enc  Encoder[T]
	cfg  Config

	mu       sync.Mutex
	cond     *sync.Cond // on mu: counted items written, writer idle or stopped; nil until Wait or Finish needs it
	queue    []entry[T] // guarded by mu
	counted  int        // guarded by mu: items of queue pushed with Push, not yet written
	running  bool       // guarded by mu: a goroutine is writing
	kicked   bool       // guarded by mu: offer the held items again
	stopped  bool       // guarded by mu
	final    bool       // guarded by mu: the last item (Finish) is queued
	finished bool       // guarded by mu: the last item was written
	err      error      // guarded by mu: the failed write's
	wg       sync.WaitGroup

	// Owned by the running goroutine (only one runs at a time; running
	// hands them from one to the next under mu):
	held     []entry[T] // items the encoder held, in order
	spare    []entry[T] // the previous batch's slice, reused
	finishBy time.Time  // Finish's deadline, which bounds the writes too; zero before
}

type entry[T any] struct {
	item    T
	counted bool
	last    bool // Finish's: stop once it is written
}

// New returns a Writer for conn; nothing runs until the first item.
func New[T any](conn Conn, enc Encoder[T], cfg Config) *Writer[T] {
	return &Writer[T]{conn: conn, enc: enc, cfg: cfg.withDefaults()}
}

// Push queues item; it counts toward the high-water mark until written.
// It never blocks. It reports false, dropping item, once the writer has
// stopped or Finish has queued its last item.
func (w *Writer[T]) Push(item T) bool { return w.push(entry[T]{item: item, counted: true}) }

// PushBounded queues an item whose number is bounded elsewhere (a
// delivery within a consumer's credit): it does not count toward the
// high-water mark. Otherwise as Push.
func (w *Writer[T]) PushBounded(item T) bool { return w.push(entry[T]{item: item}) }

func (w *Writer[T]) push(e entry[T]) bool {
	w.mu.Lock()
	if w.stopped || w.final {
		w.mu.Unlock()
		return false
	}
	w.queue = append(w.queue, e)
	if e.counted {
		w.counted++
	}
	w.startLocked()
	w.mu.Unlock()
	return true
}

// startLocked starts the goroutine unless it runs. mu is held.
func (w *Writer[T]) startLocked() {
	if !w.running {
		w.running = true
		w.wg.Add(1)
		go w.run()
	}
}

// PushLater queues item as Push does, but does not start the writer's
// goroutine: the caller, a connection's reader answering the frames of
// a burst, calls Flush once the burst is handled (before it waits for
// more data or may block), so that the answers leave together, written
// by the caller itself when no goroutine is writing. A Push, PushBounded
// or Kick meanwhile starts the goroutine, which takes these items too,
// in order; so does Wait at the high-water mark.
func (w *Writer[T]) PushLater(item T) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.final {
		return false
	}
	w.queue = append(w.queue, entry[T]{item: item, counted: true})
	w.counted++
	return true
}

// Flush writes what is queued when no goroutine is writing, on the
// caller's goroutine: the items queued now, then, should more have come
// meanwhile, a goroutine writes those. With a goroutine writing, or
// nothing queued, it does nothing. A write blocks the caller, bounded by
// WriteTimeout.
func (w *Writer[T]) Flush() {
	w.mu.Lock()
	if w.running || w.stopped || len(w.queue) == 0 {
		w.mu.Unlock()
		return
	}
	w.running = true
	w.wg.Add(1)
	w.mu.Unlock()
	w.loop(true)
}

// Kick offers the held items again (a window the encoder waits on has
// opened). It never blocks.
func (w *Writer[T]) Kick() {
	w.mu.Lock()
	if !w.stopped {
		w.kicked = true
		w.startLocked()
	}
	w.mu.Unlock()
}

// Wait blocks while HighWater items queued with Push are not yet
// written. It returns ErrStopped once the writer has stopped.
func (w *Writer[T]) Wait() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.counted >= w.cfg.HighWater && !w.stopped {
		w.startLocked() // the items may have been queued with PushLater
		w.condLocked().Wait()
	}
	if w.stopped {
		return ErrStopped
	}
	return nil
}

func (w *Writer[T]) condLocked() *sync.Cond {
	if w.cond == nil {
		w.cond = sync.NewCond(&w.mu)
	}
	return w.cond
}

// Finish queues item as the last one, waits until it and everything
// queued before it (held items excepted) are written, or until timeout,
// and stops the writer; it does not close the connection. When no
// goroutine is writing, Finish writes on the caller's goroutine, each
// write bounded by the timeout too. It returns the write's error,
// ErrStopped if the writer had stopped already, or ErrStopped after the
// timeout (the items not written are dropped).
func (w *Writer[T]) Finish(item T, timeout time.Duration) error {
	w.mu.Lock()
	if w.stopped || w.final {
		err := w.errLocked()
		w.mu.Unlock()
		return err
	}
	w.final = true
	w.queue = append(w.queue, entry[T]{item: item, last: true})
	deadline := time.Now().Add(timeout)
	if !w.running {
		// Nothing is being written: write here, the writes bounded by
		// the deadline, rather than start a goroutine and a timer to
		// wait for it (a connection's goodbye, many at once when
		// clients leave together).
		w.running = true
		w.wg.Add(1)
		w.finishBy = deadline
		w.mu.Unlock()
		w.loop(false)
		w.mu.Lock()
	}
	if !w.finished && !w.stopped {
		// A goroutine is writing, or the encoder holds items back.
		w.startLocked()
		t := time.AfterFunc(time.Until(deadline), func() {
			w.mu.Lock()
			w.stopLocked(nil)
			w.mu.Unlock()
		})
		for !w.finished && !w.stopped {
			w.condLocked().Wait()
		}
		t.Stop()
	}
	var err error
	if !w.finished {
		err = w.errLocked()
	}
	w.stopLocked(nil)
	w.mu.Unlock()
	w.wg.Wait()
	return err
}

func (w *Writer[T]) errLocked() error {
	if w.err != nil {
		return w.err
	}
	return ErrStopped
}

// Close stops the writer: what is queued or held is dropped, later
// pushes are refused. It waits for a write in progress (bounded by
// WriteTimeout) and does not close the connection. Idempotent.
func (w *Writer[T]) Close() {
	w.mu.Lock()
	w.stopLocked(nil)
	w.mu.Unlock()
	w.wg.Wait()
}

// Err returns the error of the write that failed, or nil.
func (w *Writer[T]) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *Writer[T]) stopLocked(err error) {
	if w.stopped {
		return
	}
	w.stopped = true
	w.err = err
	clear(w.queue)
	w.queue = nil
	w.counted = 0
	if w.cond != nil {
		w.cond.Broadcast()
	}
}

// bufPool holds write buffers between bursts, so that an idle connection
// holds none.
var bufPool sync.Pool // of *[]byte

func (w *Writer[T]) getBuf() *[]byte {
	if b, ok := bufPool.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, w.cfg.FlushSize)
	return &b
}

func (w *Writer[T]) putBuf(b *[]byte) {
	if cap(*b) > 2*w.cfg.FlushSize {
		return // grown for one large item: let it go
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

// run is the writer's goroutine: it writes until nothing is left to
// offer, then exits.
func (w *Writer[T]) run() { w.loop(false) }

// loop is the write loop of run and, with once, of Flush (and of Finish
// when no goroutine runs): once writes what is queued when it starts and
// hands what comes meanwhile to a goroutine.
func (w *Writer[T]) loop(once bool) {
	defer w.wg.Done()
	bp := w.getBuf()
	defer func() { w.putBuf(bp) }()
	buf := *bp
	for first := true; ; first = false {
		w.mu.Lock()
		if w.stopped {
			w.dropLocked()
			w.mu.Unlock()
			*bp = buf
			return
		}
		if once && !first && (len(w.queue) > 0 || w.kicked) {
			// More came while the caller wrote: a goroutine goes on.
			w.wg.Add(1)
			go w.run()
			w.mu.Unlock()
			*bp = buf
			return
		}
		batch := w.queue
		w.queue = w.spare[:0]
		kicked := w.kicked
		w.kicked = false
		if len(batch) == 0 && !kicked {
			// Nothing new: done until the next push. The queue's
			// slices go too, so that an idle connection holds none.
			w.queue, w.spare = nil, nil
			w.running = false
			if w.cond != nil {
				w.cond.Broadcast()
			}
			w.mu.Unlock()
			*bp = buf
			return
		}
		w.mu.Unlock()

		counted, last := 0, false
		var ok bool
		// Held items first, while the head goes.
		n := 0
		for n < len(w.held) {
			if buf, ok = w.enc.Append(buf, w.held[n].item, false); !ok {
				break
			}
			counted += btoi(w.held[n].counted)
			n++
			if len(buf) >= w.cfg.FlushSize && !w.write(&buf, &counted) {
				*bp = buf
				return
			}
		}
		if n > 0 {
			k := copy(w.held, w.held[n:])
			clear(w.held[k:])
			w.held = w.held[:k]
		}
		for i := range batch {
			e := batch[i]
			if buf, ok = w.enc.Append(buf, e.item, len(w.held) > 0); !ok {
				w.held = append(w.held, e)
				continue
			}
			counted += btoi(e.counted)
			if e.last {
				last = true
				break
			}
			if len(buf) >= w.cfg.FlushSize && !w.write(&buf, &counted) {
				*bp = buf
				return
			}
		}
		clear(batch)
		w.spare = batch[:0]
		if f, ok := w.enc.(Flusher); ok {
			buf = f.Flush(buf)
		}
		if len(buf) > 0 && !w.write(&buf, &counted) {
			*bp = buf
			return
		}
		if counted > 0 {
			w.mu.Lock()
			w.counted -= counted
			if w.cond != nil {
				w.cond.Broadcast()
			}
			w.mu.Unlock()
		}
		if last {
			w.mu.Lock()
			w.finished = true
			w.stopLocked(nil)
			w.dropLocked()
			w.mu.Unlock()
			*bp = buf
			return
		}
	}
}

// dropLocked forgets the held items as the goroutine ends after a stop,
// and marks it not running.
func (w *Writer[T]) dropLocked() {
	clear(w.held)
	w.held = nil
	w.spare = nil
	w.running = false
	if w.cond != nil {
		w.cond.Broadcast()
	}
}

// write writes buf and empties it; on failure it stops the writer,
// closes the connection and reports false. counted items just written
// are released from the high-water count.
func (w *Writer[T]) write(buf *[]byte, counted *int) bool {
	w.enc.BeforeWrite()
	d := time.Now().Add(w.cfg.WriteTimeout)
	if !w.finishBy.IsZero() && w.finishBy.Before(d) {
		d = w.finishBy
	}
	w.conn.SetWriteDeadline(d)
	_, err := w.conn.Write(*buf)
	*buf = (*buf)[:0]
	if err != nil {
		w.mu.Lock()
		w.stopLocked(err)
		w.dropLocked()
		w.mu.Unlock()
		w.conn.Close()
		return false
	}
	w.enc.Written()
	if *counted > 0 {
		w.mu.Lock()
		w.counted -= *counted
		if w.cond != nil {
			w.cond.Broadcast()
		}
		w.mu.Unlock()
		*counted = 0
	}
	return true
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

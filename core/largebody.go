package core

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
)

// Large messages. A front-end that reads a body longer than
// Session.StreamThreshold hands it to Session.ReceiveBody as a stream,
// which copies it to the large-message store as it arrives, through a
// buffer of StreamBuffer bytes; the message then holds its body by
// reference (Message.Streamed), and each consumer's front-end reads it
// back with Message.OpenBody, again through a bounded buffer. A large
// body is never whole in memory, on the way in or out, however many
// queues hold it.
//
// Who removes the file:
//   - a body nothing has persisted yet (a non-durable message, one that
//     reached no durable queue, one refused) is removed once no message
//     references it (a cleanup attached to its largeBody);
//   - once the journal has a record naming it, the journal's side owns
//     it: persistSettled (or a transaction's commit) removes it after
//     the record's delete is on disk, and recovery removes the files no
//     live record names (a crash between the file and its record);
//   - a body written in part (a sender cut off, a disk error) never gets
//     its final name: the store removes it at once, or at the next open
//     after a crash.
//
// A streamed message costs its metadata against the memory budget, not
// its body. A queue that pages pages it by reference (pageRecord): the
// page record holds no body, and owns a link to the file under the
// record's own id, which becomes the message's id when it is read back
// (and the journal record's, which then owns the file); recovery keeps
// the files the page records past their cursors name.

// StreamBuffer is the buffer a front-end copies a large body through,
// in and out: the memory one transfer costs.
const StreamBuffer = 1 << 20

var streamBufs = sync.Pool{New: func() any { b := make([]byte, StreamBuffer); return &b }}

// GetStreamBuffer returns a buffer of StreamBuffer bytes from a pool,
// for copying a large body; PutStreamBuffer gives it back.
func GetStreamBuffer() *[]byte { return streamBufs.Get().(*[]byte) }

// PutStreamBuffer returns a buffer GetStreamBuffer gave.
func PutStreamBuffer(b *[]byte) { streamBufs.Put(b) }

// ErrTooLarge refuses a body longer than a front-end's maximum message
// size; the front-end wraps it with its limit.
var ErrTooLarge = errors.New("core: message too large")

// largeBody is a body kept in the large-message store under id.
type largeBody struct {
	id    uint64
	size  int64
	store LargeStore
	// cleanup removes the file once nothing references the body, until
	// kept says the journal (or its recovery) owns the file.
	cleanup runtime.Cleanup
	kept    atomic.Bool
}

type largeFile struct {
	store LargeStore
	id    uint64
}

// newLargeBody references a body just written under id; the file is
// removed when the body is no longer referenced, unless kept first.
func newLargeBody(store LargeStore, id uint64, size int64) *largeBody {
	lb := &largeBody{id: id, size: size, store: store}
	lb.cleanup = runtime.AddCleanup(lb, func(f largeFile) { f.store.Remove(f.id) }, largeFile{store, id})
	return lb
}

// keptBody references a body the journal owns (a recovered message's).
func keptBody(store LargeStore, id uint64, size int64) *largeBody {
	lb := &largeBody{id: id, size: size, store: store}
	lb.kept.Store(true)
	return lb
}

// keep hands the file to the journal: from now on it goes with the
// record that names it.
func (lb *largeBody) keep() {
	if lb.kept.CompareAndSwap(false, true) {
		lb.cleanup.Stop()
	}
}

// Streamed reports whether m's body is in the large-message store rather
// than in Body: a front-end reads it with OpenBody (Body is nil).
func (m *Message) Streamed() bool { return m.lb != nil && m.Body == nil }

// Size returns the length of m's body, wherever it is.
func (m *Message) Size() int64 {
	if m.Streamed() {
		return m.lb.size
	}
	return int64(len(m.Body))
}

// OpenBody returns a reader of m's body, from the large-message store
// for a streamed body (read as it goes); the caller closes it.
func (m *Message) OpenBody() (io.ReadCloser, error) {
	if !m.Streamed() {
		return io.NopCloser(bytes.NewReader(m.Body)), nil
	}
	r, err := m.lb.store.Open(m.lb.id)
	if err != nil {
		return nil, fmt.Errorf("core: body of large message %d: %w", m.lb.id, err)
	}
	return r, nil
}

// WriteBody writes head (a front-end's frame up to the body, and what
// came before it) and then m's body, read from its file for a streamed
// body through a buffer of StreamBuffer bytes, each piece with one call
// of write (which a front-end bounds by its write timeout). It keeps
// back a small last piece of the body (at most 4 KiB), which it returns
// in head's buffer for the front-end's next write, so that what the
// front-end does once a write is out follows the whole body. An error
// leaves the frame cut off where it failed: the front-end closes the
// connection.
func (m *Message) WriteBody(head []byte, write func([]byte) error) ([]byte, error) {
	if err := write(head); err != nil {
		return head[:0], err
	}
	tail := head[:0]
	r, err := m.OpenBody()
	if err != nil {
		return tail, err
	}
	defer r.Close()
	bp := GetStreamBuffer()
	defer PutStreamBuffer(bp)
	left := m.Size()
	for left > 0 {
		n, err := io.ReadFull(r, (*bp)[:min(int64(len(*bp)), left)])
		left -= int64(n)
		if err != nil {
			return tail, fmt.Errorf("core: large message %d: body ends %d bytes short: %w", m.ID, left, err)
		}
		k := n
		if left == 0 {
			k = n - min(n, 4<<10) // a small last piece stays for the writer
		}
		if err := write((*bp)[:k]); err != nil {
			return tail, err
		}
		if left == 0 {
			tail = append(tail, (*bp)[k:n]...)
		}
	}
	return tail, nil
}

// ReadBody returns m's body in memory: Body, or a streamed body read
// whole. For front-ends and tools that cannot stream; it costs the body's
// size.
func (m *Message) ReadBody() ([]byte, error) {
	if !m.Streamed() {
		return m.Body, nil
	}
	r, err := m.OpenBody()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b := make([]byte, m.lb.size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("core: body of large message %d: %w", m.lb.id, err)
	}
	return b, nil
}

// BodyHead returns at most n bytes from the start of m's body, reading
// only those from a streamed body.
func (m *Message) BodyHead(n int) ([]byte, error) {
	if !m.Streamed() {
		return m.Body[:min(n, len(m.Body))], nil
	}
	r, err := m.OpenBody()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b := make([]byte, min(int64(n), m.lb.size))
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("core: body of large message %d: %w", m.lb.id, err)
	}
	return b, nil
}

// StreamThreshold returns the body length above which a front-end hands
// a body to ReceiveBody as a stream instead of reading it: the broker's
// large-message threshold, or 0 when the broker cannot stream (it has no
// large-message store, or is an access broker of a cluster), and bodies
// are read whole.
func (s *Session) StreamThreshold() int {
	if s.b.large == nil || s.remote != nil {
		return 0
	}
	return s.b.largeThreshold
}

// ReceiveBody reads m's body from r until io.EOF into the large-message
// store, through a buffer of StreamBuffer bytes, and makes m reference
// it (Message.Streamed), ready for Send, SendAsync or Tx.Send. size is
// the length the sender announced, or -1 when unknown; it is checked
// against the free disk space first, and a body that outgrows the space
// there was is refused with ErrDiskFull. An error from r (a sender cut
// off mid-body, a limit the front-end's reader enforces) is returned
// as it is and leaves nothing behind. On a broker that cannot stream
// (StreamThreshold is 0) the body is read into m.Body.
func (s *Session) ReceiveBody(m *Message, r io.Reader, size int64) error {
	if err := s.check(); err != nil {
		return err
	}
	b := s.b
	if s.StreamThreshold() == 0 {
		body, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		m.Body = body
		return nil
	}
	if why := b.diskFull.Load(); why != nil {
		return fmt.Errorf("%w (%s)", ErrDiskFull, *why)
	}
	lr := &diskBoundReader{r: r}
	if b.disk.Free != nil {
		free, err := b.disk.Free()
		if err == nil {
			room := free - b.disk.MinFree - b.largeInFlight.Load()
			if size > room {
				return fmt.Errorf("%w (a body of %d bytes; %d bytes free, %d to keep)", ErrDiskFull, size, free, b.disk.MinFree)
			}
			lr.room = room
		}
	}
	reserve := max(size, 0)
	b.largeInFlight.Add(reserve)
	defer b.largeInFlight.Add(-reserve)
	id := b.msgID.Add(1)
	n, err := b.large.Write(id, lr)
	if err != nil {
		if lr.err != nil {
			return lr.err
		}
		return fmt.Errorf("%w: large message body: %w", ErrPersistence, err)
	}
	m.ID = id
	m.Body = nil
	m.lb = newLargeBody(b.large, id, n)
	return nil
}

// diskBoundReader passes r through, failing with ErrDiskFull past room
// bytes (when room > 0), and remembers r's own error.
type diskBoundReader struct {
	r    io.Reader
	room int64
	n    int64
	err  error
}

func (d *diskBoundReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	d.n += int64(n)
	if d.room > 0 && d.n > d.room {
		err = fmt.Errorf("%w (the body outgrew the %d bytes free when it began)", ErrDiskFull, d.room)
	}
	if err != nil && err != io.EOF {
		d.err = err
	}
	return n, err
}

// ownBody gives m, a copy of a message whose body is streamed (moved to
// a dead-letter or expiry address, diverted, a composite destination's
// part), a file of its own under its new id, a link to the original's:
// the original's goes with the original.
func (b *Broker) ownBody(m *Message) error {
	lb := m.lb
	if lb == nil || lb.id == m.ID || m.Body != nil {
		return nil
	}
	if err := lb.store.Link(lb.id, m.ID); err != nil {
		return fmt.Errorf("%w: large message body: %w", ErrPersistence, err)
	}
	m.lb = newLargeBody(lb.store, m.ID, lb.size)
	return nil
}

package transport

import (
	"encoding/binary"
	"net"
	"sync"
	"time"
)

// chunkSize is the unit of a link's queue. Frames are encoded into
// chunks from a shared pool, back to back (a frame may span chunks), so a
// queue grows and shrinks without reallocating or copying what it holds,
// and the writer hands all its chunks to one vectored write.
const chunkSize = 64 << 10

var chunks = sync.Pool{New: func() any { return new([chunkSize]byte) }}

// queue holds encoded frames waiting for a link's writer. It is not safe
// for concurrent use: the link's mutex guards it.
type queue struct {
	bufs   [][]byte           // filled parts of the chunks, in order
	arrays []*[chunkSize]byte // the chunks, to return to the pool
	bytes  int
	frames int
}

// push encodes frame at the end.
func (q *queue) push(frame []byte) {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(frame)))
	q.write(hdr[:])
	q.write(frame)
	q.frames++
}

func (q *queue) write(p []byte) {
	q.bytes += len(p)
	for len(p) > 0 {
		last := len(q.bufs) - 1
		if last < 0 || len(q.bufs[last]) == chunkSize {
			a := chunks.Get().(*[chunkSize]byte)
			q.arrays = append(q.arrays, a)
			q.bufs = append(q.bufs, a[:0])
			last++
		}
		b := q.bufs[last]
		n := copy(b[len(b):chunkSize], p)
		q.bufs[last] = b[:len(b)+n]
		p = p[n:]
	}
}

// writeGroup is how many chunks go to one vectored write: a deadline is
// set before each, so a write fails only when a group makes no progress
// for the whole timeout, however long the queue.
const writeGroup = 16

// writeTo writes everything in q to c, a megabyte per vectored write
// where c supports it (TCP; a TLS conn writes chunk by chunk), each
// within timeout, then empties q.
func (q *queue) writeTo(c net.Conn, timeout time.Duration) error {
	defer q.reset()
	for i := 0; i < len(q.bufs); i += writeGroup {
		bufs := net.Buffers(q.bufs[i:min(i+writeGroup, len(q.bufs))])
		_ = c.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := bufs.WriteTo(c); err != nil {
			return err
		}
	}
	return nil
}

// reset empties q, returning its chunks to the pool.
func (q *queue) reset() {
	for i, a := range q.arrays {
		chunks.Put(a)
		q.arrays[i] = nil
		q.bufs[i] = nil
	}
	q.arrays, q.bufs = q.arrays[:0], q.bufs[:0]
	q.bytes, q.frames = 0, 0
}

package amqp

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
)

// Large messages. A client's message whose body is one data section
// above the broker's large-message threshold is not reassembled: once
// its first frames hold every section before the body, the message is
// mapped to core and its data bytes go, frame by frame, through a pipe
// to core.Session.ReceiveBody, which writes them to the body's file on
// a goroutine of its own; the read loop waits for each frame to be taken
// (one frame in memory at a time). After the last frame the message is
// routed and settled as any other. An aborted delivery, a link or
// connection closed mid-message, or a disk that runs out leave no file,
// and the message is never confirmed.
//
// A streamed body goes out to a client receiver from its file: the
// sections before the body, the data section's header, the body read
// through a buffer of core.StreamBuffer bytes, the footer, cut into
// transfer frames as usual (sendStreamed).

// maxStreamTail bounds what may follow a streamed data section (a
// footer).
const maxStreamTail = 64 << 10

var (
	errLinkClosed    = errors.New("amqp: link closed during a large message")
	errAbortedStream = errors.New("amqp: large message aborted by its sender")
)

// maxMessageSize is the largest message a client sender may send: the
// max-message-size of its links.
func (c *conn) maxMessageSize() int {
	if c.core.StreamThreshold() > 0 {
		return max(c.s.cfg.MaxLargeMessageSize, c.s.cfg.MaxMessageSize)
	}
	return c.s.cfg.MaxMessageSize
}

// inStream is an incoming large body on its way to its file.
type inStream struct {
	m         *core.Message
	refusal   frames.DeliveryState // the message's mapping failed: refused at the end
	pw        *io.PipeWriter
	done      chan error // ReceiveBody's result
	remaining int64      // data bytes still to come
	werr      error      // the pipe refused a write: ReceiveBody gave up
	tail      []byte     // sections after the data (a footer)
}

// abort ends the body with err (its file is removed) and waits for
// ReceiveBody to return.
func (st *inStream) abort(err error) {
	if st.pw == nil {
		return
	}
	st.pw.CloseWithError(err)
	<-st.done
	st.pw = nil
}

// startStream looks at the start of a delivery being reassembled: once
// the sections before its body are there and the body is one large data
// section, the rest is streamed; otherwise the delivery is reassembled
// as usual.
func (l *link) startStream(p *incoming) error {
	c := l.sess.c
	state, head, start, n := frames.LocateData(p.buf)
	switch state {
	case frames.DataNeedMore:
		return nil
	case frames.DataNotStreamable:
		p.noStream = true
		return nil
	}
	if int64(n) > int64(c.s.cfg.MaxLargeMessageSize) {
		l.partial = nil
		l.settleIn(p, nil, false)
		l.detachWith(&frames.Error{Condition: frames.ErrCondMessageSizeExceeded,
			Description: "message exceeds the broker's max-message-size"})
		return nil
	}
	pm, err := frames.ParseMessage(p.buf[:head])
	if err != nil {
		return connErr(frames.ErrCondDecodeError, "message: %v", err)
	}
	st := &inStream{remaining: int64(n)}
	st.m, st.refusal = l.toMessage(pm)
	p.stream = st
	data := p.buf[start:]
	p.buf = nil
	if st.refusal == nil {
		pr, pw := io.Pipe()
		st.pw, st.done = pw, make(chan error, 1)
		m := st.m
		go func() {
			err := c.core.ReceiveBody(m, pr, int64(n))
			pr.CloseWithError(cmpOr(err, io.ErrClosedPipe))
			st.done <- err
		}()
	}
	return st.take(data)
}

func cmpOr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// take passes a frame's bytes on: the data's to the file, what follows
// it kept as the tail.
func (st *inStream) take(b []byte) error {
	if st.remaining > 0 {
		k := int(min(int64(len(b)), st.remaining))
		if st.pw != nil && st.werr == nil {
			if _, err := st.pw.Write(b[:k]); err != nil {
				st.werr = err
			}
		}
		st.remaining -= int64(k)
		b = b[k:]
		if st.remaining == 0 && st.pw != nil {
			st.pw.Close()
		}
	}
	if len(b) > 0 {
		if len(st.tail)+len(b) > maxStreamTail {
			return connErr(frames.ErrCondDecodeError, "message: more than %d bytes after a large data section", maxStreamTail)
		}
		st.tail = append(st.tail, b...)
	}
	return nil
}

// streamTransfer takes a frame of a delivery being streamed.
func (l *link) streamTransfer(p *incoming, t *frames.Transfer, payload []byte) error {
	st := p.stream
	if t.Aborted {
		st.abort(errAbortedStream)
		l.partial = nil
		l.settleIn(p, nil, false)
		return nil
	}
	if err := st.take(payload); err != nil {
		st.abort(err)
		l.partial = nil
		return err
	}
	if t.More {
		return nil
	}
	l.partial = nil
	if st.remaining > 0 {
		st.abort(io.ErrUnexpectedEOF)
		return connErr(frames.ErrCondDecodeError, "message: its data section is longer than the delivery")
	}
	var err error
	if st.pw != nil {
		err = <-st.done
		st.pw = nil
	}
	switch {
	case st.refusal != nil:
		l.settleIn(p, st.refusal, true)
		return nil
	case err != nil:
		l.settleIn(p, rejectedBy(err), true)
		return nil
	}
	m := st.m
	if len(st.tail) > 0 {
		pm, err := frames.ParseMessage(st.tail)
		if err != nil || pm.BodyKind != frames.BodyNone || pm.Header != nil || pm.Properties != nil ||
			pm.ApplicationProperties != nil || pm.MessageAnnotations != nil || pm.DeliveryAnnotations != nil {
			// Its file goes with m.
			l.settleIn(p, rejected(frames.ErrCondNotImplemented, "a large message's body must be one data section, followed by nothing but a footer"), true)
			return nil
		}
		if m.Properties == nil {
			m.Properties = make(map[string]any, 1)
		}
		m.Properties[propFooter] = append([]byte(nil), pm.RawFooter...)
	}
	l.route(p, m)
	return nil
}

// outStream is a streamed body on its way to a client: the encoded
// sections before it and its data section's header, the body from its
// file, the footer.
type outStream struct {
	head   []byte
	r      io.ReadCloser
	left   int64 // body bytes still to read
	footer []byte
}

// fill fills p from what remains and returns how much it filled.
func (s *outStream) fill(p []byte) (int, error) {
	n := copy(p, s.head)
	s.head = s.head[n:]
	for n < len(p) && s.left > 0 {
		k, err := s.r.Read(p[n:min(int64(len(p)), int64(n)+s.left)])
		n += k
		s.left -= int64(k)
		if err == io.EOF && s.left > 0 {
			err = io.ErrUnexpectedEOF
		}
		if err != nil && err != io.EOF {
			return n, err
		}
	}
	if n < len(p) && s.left == 0 {
		k := copy(p[n:], s.footer)
		s.footer = s.footer[k:]
		n += k
	}
	return n, nil
}

func (s *outStream) done() bool { return len(s.head) == 0 && s.left == 0 && len(s.footer) == 0 }

func (s *outStream) close() {
	if s.r != nil {
		s.r.Close()
		s.r = nil
	}
}

// streamFlush is how much of a streamed delivery's frames the writer
// gathers before writing them itself (the outbound writer's flush size).
const streamFlush = 64 << 10

// sendStreamed is send for a delivery whose body is streamed: the body
// comes from its file as the frames are written, and the buffer (with
// whatever came before the delivery) is written to the connection here,
// within the write timeout, whenever it holds streamFlush, so a delivery
// of any size costs a frame's worth of memory. The last frame stays in
// the buffer for the outbound writer's next write, so that Written (the
// acknowledgement of a pre-settled delivery) follows it. The
// connection's lock is not held while writing. A failure closes the
// connection (the delivery is cut off; the writer's next write fails and
// stops it) and drops what is left.
func (w *writer) sendStreamed(it *outItem) bool {
	c := w.c
	l := it.link
	s := l.sess
	m := it.d.Message
	fail := func(err error) bool {
		if it.stream != nil {
			it.stream.close()
			it.stream = nil
		}
		c.debug().Err(err).Uint64("message", m.ID).Msg("amqp: streaming a large message failed")
		w.closed = true
		w.buf = w.buf[:0]
		c.nc.Close()
		return true
	}
	if it.stream == nil {
		if m.Size() > math.MaxUint32 {
			return fail(fmt.Errorf("amqp: large message %d of %d bytes: more than a data section holds", m.ID, m.Size()))
		}
		r, err := m.OpenBody()
		if err != nil {
			return fail(err)
		}
		head := frames.AppendDataHeader(appendDelivery(nil, it.d), uint32(m.Size()))
		footer, _ := m.Properties[propFooter].([]byte)
		it.stream = &outStream{head: head, r: r, left: m.Size(), footer: footer}
	}
	st := it.stream
	chunk := min(int(c.peerMaxFrame)-frames.HeaderSize-transferOverhead, core.StreamBuffer)
	bp := core.GetStreamBuffer()
	defer core.PutStreamBuffer(bp)
	data := (*bp)[:chunk]
	t := &w.transfer
	for {
		c.mu.Lock()
		if s.ended || l.detached {
			c.mu.Unlock()
			st.close()
			it.stream = nil
			return true
		}
		if s.remoteIncomingWindow == 0 {
			s.waiting = true // the flow that reopens it kicks
			c.mu.Unlock()
			return false // parked; it.stream goes on from here
		}
		*t = frames.Transfer{Handle: l.handle}
		if !it.started {
			it.started = true
			it.deliveryID = s.nextDeliveryID
			s.nextDeliveryID++
			if !l.settled {
				s.unsettled[it.deliveryID] = outDelivery{link: l, id: it.d.ID}
			}
			t.DeliveryID = &it.deliveryID
			t.DeliveryTag = deliveryTag(w.tag[:0], it.d.ID)
			t.MessageFormat = &zero32
			t.Settled = &l.settled
		}
		s.remoteIncomingWindow--
		s.nextOutgoingID++
		c.mu.Unlock()
		n, err := st.fill(data)
		if err != nil {
			return fail(err)
		}
		t.More = !st.done()
		w.buf = frames.Append(w.buf, frames.TypeAMQP, s.ch, t, data[:n])
		if !t.More {
			break
		}
		if len(w.buf) >= streamFlush {
			if err := w.writeBuf(); err != nil {
				return fail(err)
			}
		}
	}
	st.close()
	it.stream = nil
	if l.settled {
		w.noteAuto(l.cons, it.d.ID)
	}
	return true
}

// writeBuf writes the buffer to the connection within the write timeout
// and empties it (sendStreamed's writes, outside the outbound writer's).
func (w *writer) writeBuf() error {
	c := w.c
	c.BeforeWrite()
	c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	_, err := c.nc.Write(w.buf)
	w.buf = w.buf[:0]
	return err
}

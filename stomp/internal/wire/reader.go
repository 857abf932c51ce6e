package wire

import (
	"bufio"
	"bytes"
	"io"
	"math"
	"strconv"
	"sync"

	"github.com/go-stomp/stomp/v3/frame"
)

// Default limits, used for the zero fields of [Limits].
const (
	// DefaultMaxFrameSize is the default Limits.MaxFrameSize: 10 MiB.
	DefaultMaxFrameSize = 10 << 20
	// DefaultMaxHeaders is the default Limits.MaxHeaders (as ActiveMQ).
	DefaultMaxHeaders = 1000
	// DefaultMaxHeaderLength is the default Limits.MaxHeaderLength: 8 KiB.
	// It is also the size of the Reader's buffer, so it costs that much
	// memory per connection. Raise it for clients that put large tokens
	// (JWTs, say) in a passcode header.
	DefaultMaxHeaderLength = 8 << 10
)

// Limits bounds what a peer can make a [Reader] read and allocate. A zero
// or negative field means its default.
type Limits struct {
	// MaxFrameSize bounds a whole frame: command line, header lines and
	// blank line with their EOLs, plus the body; the NUL and heart-beats
	// are not counted. Default DefaultMaxFrameSize.
	MaxFrameSize int
	// MaxHeaders bounds the number of header lines in a frame, repeated
	// names included. Default DefaultMaxHeaders.
	MaxHeaders int
	// MaxHeaderLength bounds one command or header line, EOL included, in
	// bytes as received (before unescaping). Default
	// DefaultMaxHeaderLength. The Reader's buffer has this size, but at
	// least 16 bytes.
	MaxHeaderLength int
}

func (l Limits) withDefaults() Limits {
	if l.MaxFrameSize <= 0 {
		l.MaxFrameSize = DefaultMaxFrameSize
	}
	if l.MaxHeaders <= 0 {
		l.MaxHeaders = DefaultMaxHeaders
	}
	if l.MaxHeaderLength <= 0 {
		l.MaxHeaderLength = DefaultMaxHeaderLength
	}
	return l
}

const (
	// eagerBody is the largest content-length body allocated in full
	// before its bytes arrive; larger bodies grow as they arrive.
	eagerBody = 64 << 10
	// maxScratch bounds the decoded-header scratch kept between frames.
	maxScratch = 64 << 10
)

// A Reader reads STOMP frames from a byte stream, within [Limits]. It is
// not safe for concurrent use: one goroutine calls Read and SetVersion.
type Reader struct {
	br      *bufio.Reader // nil while released (NewPooledReader)
	src     io.Reader     // what a pooled br reads
	pool    *sync.Pool    // of *bufio.Reader; nil: br is the Reader's own
	lim     Limits        // defaults applied
	version Version       // escaping rules for frames other than CONNECT/CONNECTED
	err     error         // sticky: the first error Read returned

	// Streaming (SetStreaming): a SEND whose content-length is above
	// streamAbove, up to maxStream, is returned without its body, which
	// is read through Body: pending bytes of it, then its NUL.
	streamAbove, maxStream int
	pending                int
	nulDue                 bool

	// Scratch for the frame being read, reused between frames.
	block []byte   // decoded names and values, back to back
	spans []span   // where each header's name and value are in block
	strs  []string // name, value, name, value... for frame.NewHeader
}

// span locates one decoded header in Reader.block: the name is
// block[ns:vs] and the value block[vs:ve].
type span struct {
	name       string // the interned name, or "" if it is not a common one
	ns, vs, ve int
}

// NewReader returns a Reader that reads frames from r within lim, applying
// STOMP 1.2 escaping rules until SetVersion is called. Its buffer holds
// MaxHeaderLength bytes, so it may read that far ahead of the frame it
// returns. Like bufio.NewReaderSize, it uses r itself if r is a
// *bufio.Reader with at least that buffer.
func NewReader(r io.Reader, lim Limits) *Reader {
	lim = lim.withDefaults()
	return &Reader{
		br:      bufio.NewReaderSize(r, max(lim.MaxHeaderLength, 16)),
		lim:     lim,
		version: V12,
	}
}

// NewPooledReader is NewReader with a buffer taken from a pool when a
// Read needs one, and given back by Release: a connection that waits for
// its next frame holds no buffer.
func NewPooledReader(r io.Reader, lim Limits) *Reader {
	lim = lim.withDefaults()
	return &Reader{src: r, pool: bufPool(max(lim.MaxHeaderLength, 16)), lim: lim, version: V12}
}

var (
	poolsMu sync.Mutex
	pools   = map[int]*sync.Pool{} // by buffer size
)

func bufPool(size int) *sync.Pool {
	poolsMu.Lock()
	defer poolsMu.Unlock()
	p := pools[size]
	if p == nil {
		p = &sync.Pool{New: func() any { return bufio.NewReaderSize(nil, size) }}
		pools[size] = p
	}
	return p
}

// Release gives the buffer of a pooled Reader back, with the scratch of
// the last frame, when nothing is read ahead (Buffered is 0) and no
// streamed body is left to read through Body (its bytes and NUL come
// through the buffer); the next Read takes one again. Call it between
// Reads.
func (r *Reader) Release() {
	if r.pool == nil || r.br == nil || r.br.Buffered() > 0 || r.pending > 0 || r.nulDue {
		return
	}
	r.br.Reset(nil)
	r.pool.Put(r.br)
	r.br = nil
	r.block, r.spans, r.strs = nil, nil, nil
}

// Close ends r for good: a pooled Reader's buffer goes back to the pool
// whatever it holds (what was read ahead is dropped), and every later
// Read fails with ErrReaderClosed unless it had failed already. A
// connection that stops reading calls it first, so that the work of its
// end (answers, the session's close) holds no read buffer. Idempotent.
func (r *Reader) Close() {
	if r.err == nil {
		r.err = ErrReaderClosed
	}
	r.pending, r.nulDue = 0, false
	if r.pool != nil && r.br != nil {
		r.br.Reset(nil)
		r.pool.Put(r.br)
		r.br = nil
	}
	r.block, r.spans, r.strs = nil, nil, nil
}

// SetMaxFrameSize changes Limits.MaxFrameSize for the frames read from
// now on (a zero or negative n means the default): a server reads with a
// small limit until the client has logged in. Call it between Reads.
func (r *Reader) SetMaxFrameSize(n int) {
	if n <= 0 {
		n = DefaultMaxFrameSize
	}
	r.lim.MaxFrameSize = n
}

// SetStreaming makes Read return a SEND frame whose content-length is
// above above (and at most max, the whole frame counted; larger ones
// are refused with ErrFrameTooLarge) without its body: Streaming then
// reports the body's length and Body reads it, bytes as they arrive, so
// it is never whole in memory. above <= 0 turns streaming off. Call it
// between Reads.
func (r *Reader) SetStreaming(above, max int) {
	r.streamAbove, r.maxStream = above, max
}

// Streaming returns the length of the body of the frame Read returned
// last when that body is to be read through Body, or 0.
func (r *Reader) Streaming() int {
	if r.pending > 0 || r.nulDue {
		return r.pending
	}
	return 0
}

// Body returns a reader of the body of the frame Read returned last
// without one (Streaming > 0): exactly that many bytes, then io.EOF once
// the NUL that ends the frame has been read too. A stream that ends
// early gives io.ErrUnexpectedEOF. The body must be read to its end
// before the next Read, or that Read fails.
func (r *Reader) Body() io.Reader { return (*bodyReader)(r) }

type bodyReader Reader

func (b *bodyReader) Read(p []byte) (int, error) {
	r := (*Reader)(b)
	if r.err != nil {
		return 0, r.err
	}
	if r.pending == 0 {
		if !r.nulDue {
			return 0, io.EOF
		}
		c, err := r.br.ReadByte()
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err == nil && c != 0 {
			err = syntaxError(ErrMissingNul, "", "(streamed body)")
		}
		if err != nil {
			r.err = err
			return 0, err
		}
		r.nulDue = false
		return 0, io.EOF
	}
	if len(p) > r.pending {
		p = p[:r.pending]
	}
	n, err := r.br.Read(p)
	r.pending -= n
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		r.err = err
	}
	return n, err
}

// Buffered returns the number of bytes read ahead of the frames returned
// so far: the start of the next frame, or heart-beats.
func (r *Reader) Buffered() int {
	if r.br == nil {
		return 0
	}
	return r.br.Buffered()
}

// SetVersion sets the escaping rules for the frames read from now on, once
// CONNECT has been answered. CONNECT and CONNECTED headers are never
// unescaped, whatever the version. Call it between Reads.
func (r *Reader) SetVersion(v Version) { r.version = v }

// Read reads the next frame. The frame is new and owned by the caller (see
// the package doc); an empty body is nil.
//
// On a heart-beat, a bare EOL ("\n" or "\r\n") where a command is expected,
// Read consumes that one EOL and returns (nil, nil).
//
// Read returns io.EOF only when the stream ends between frames, and
// io.ErrUnexpectedEOF when it ends inside one. A malformed or oversized
// frame gives a [*FrameError] wrapping one of the Err* sentinels; errors
// from the underlying reader are returned as they are. Every error is
// final: the Reader is left mid-frame, so later calls return the same
// error.
func (r *Reader) Read() (*frame.Frame, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.pending > 0 || r.nulDue {
		r.err = errBodyNotRead
		return nil, r.err
	}
	if r.br == nil {
		r.br = r.pool.Get().(*bufio.Reader)
		r.br.Reset(r.src)
	}
	f, err := r.readFrame()
	if err != nil {
		r.err = err
		r.block, r.spans, r.strs = nil, nil, nil
	}
	return f, err
}

// readLine reads one line and returns it without its EOL, and its length
// on the wire. atStart says whether the line would be a frame's first, where
// a clean end of the stream is io.EOF and not io.ErrUnexpectedEOF.
func (r *Reader) readLine(atStart bool) (line []byte, n int, err error) {
	// Bounded: ReadSlice never reads past the buffer (STYLE.md §4.13).
	line, err = r.br.ReadSlice('\n')
	n = len(line)
	switch err {
	case nil:
	case bufio.ErrBufferFull:
		return nil, n, limitError(ErrHeaderTooLong, r.lim.MaxHeaderLength, "")
	case io.EOF:
		if atStart && n == 0 {
			return nil, 0, io.EOF
		}
		return nil, n, io.ErrUnexpectedEOF
	default:
		return nil, n, err
	}
	if n > r.lim.MaxHeaderLength {
		// Only when the buffer is bigger than the limit: the limit is
		// under 16 bytes, or r was a larger *bufio.Reader already.
		return nil, n, limitError(ErrHeaderTooLong, r.lim.MaxHeaderLength, "")
	}
	// STOMP 1.2 "Augmented BNF": EOL = [CR] LF.
	line = line[:n-1]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, n, nil
}

func (r *Reader) readFrame() (*frame.Frame, error) {
	line, used, err := r.readLine(true)
	if err != nil {
		return nil, err
	}
	if len(line) == 0 {
		return nil, nil // STOMP 1.2 "Heart-beating": an EOL between frames.
	}
	cmd := command(line)
	if cmd == "" {
		return nil, syntaxError(ErrInvalidCommand, "", quote(line))
	}
	if used > r.lim.MaxFrameSize {
		return nil, limitError(ErrFrameTooLarge, r.lim.MaxFrameSize, "")
	}
	v := escapeVersion(cmd, r.version)

	block, spans := r.block[:0], r.spans[:0]
	contentLength := -1 // index in spans of the first content-length
	for {
		line, n, err := r.readLine(false)
		if err != nil {
			return nil, err
		}
		used += n
		if used > r.lim.MaxFrameSize {
			return nil, limitError(ErrFrameTooLarge, r.lim.MaxFrameSize, "")
		}
		if len(line) == 0 {
			break // the blank line that ends the headers
		}
		if len(spans) == r.lim.MaxHeaders {
			return nil, limitError(ErrTooManyHeaders, r.lim.MaxHeaders, "")
		}
		// STOMP 1.2 "Augmented BNF": header = header-name ":" header-value,
		// header-name = 1*<any OCTET except CR or LF or ":">. An escaped
		// colon is \c, so the first raw colon ends the name.
		i := bytes.IndexByte(line, ':')
		if i < 0 {
			return nil, syntaxError(ErrInvalidHeader, "", quote(line)+" (no colon)")
		}
		if i == 0 {
			return nil, syntaxError(ErrInvalidHeader, "", quote(line)+" (empty name)")
		}
		// STOMP 1.2 "Value Encoding" applies to names and values alike.
		ns := len(block)
		var bad string
		if block, bad = appendUnescaped(block, line[:i], v); bad != "" {
			name := string(line[:i])
			return nil, syntaxError(ErrInvalidEscape, name, quote(bad)+" in header "+quote(name))
		}
		vs := len(block)
		if block, bad = appendUnescaped(block, line[i+1:], v); bad != "" {
			name := string(block[ns:vs])
			return nil, syntaxError(ErrInvalidEscape, name, quote(bad)+" in header "+quote(name))
		}
		name := internName(block[ns:vs])
		if contentLength < 0 && name == frame.ContentLength {
			// STOMP 1.2 "Repeated Header Entries": the first one wins.
			contentLength = len(spans)
		}
		spans = append(spans, span{name: name, ns: ns, vs: vs, ve: len(block)})
	}
	r.block, r.spans = block, spans // keep the grown scratch

	var body []byte
	budget := r.lim.MaxFrameSize - used
	if contentLength >= 0 {
		sp := spans[contentLength]
		n, ok := parseContentLength(block[sp.vs:sp.ve])
		if !ok {
			return nil, syntaxError(ErrInvalidContentLength, frame.ContentLength, quote(block[sp.vs:sp.ve]))
		}
		if r.streamAbove > 0 && n > r.streamAbove && cmd == frame.SEND {
			if n > r.maxStream-used {
				e := limitError(ErrFrameTooLarge, r.maxStream, "content-length "+string(block[sp.vs:sp.ve]))
				e.Header = frame.ContentLength
				return nil, e
			}
			r.pending, r.nulDue = n, true
			return r.newFrame(cmd, nil), nil
		}
		if n > budget {
			// Checked before allocating anything for the body.
			e := limitError(ErrFrameTooLarge, r.lim.MaxFrameSize, "content-length "+string(block[sp.vs:sp.ve]))
			e.Header = frame.ContentLength
			return nil, e
		}
		if body, err = r.readCounted(n); err != nil {
			return nil, err
		}
	} else if body, err = r.readUntilNul(budget); err != nil {
		return nil, err
	}

	f := r.newFrame(cmd, body)
	if cap(r.block) > maxScratch {
		r.block = nil
	}
	if cap(r.spans) > maxScratch/32 {
		r.spans, r.strs = nil, nil
	}
	return f, nil
}

// frameAlloc puts a frame and its header in one allocation.
type frameAlloc struct {
	f frame.Frame
	h frame.Header
}

// newFrame builds the frame from the decoded headers in r's scratch: one
// allocation for all the names and values, one for the header's slice,
// one for the frame.
func (r *Reader) newFrame(cmd string, body []byte) *frame.Frame {
	var s string
	if len(r.block) > 0 {
		s = string(r.block)
	}
	strs := r.strs[:0]
	for _, sp := range r.spans {
		name := sp.name
		if name == "" {
			name = s[sp.ns:sp.vs]
		}
		strs = append(strs, name, s[sp.vs:sp.ve])
	}
	a := &frameAlloc{}
	a.h = *frame.NewHeader(strs...) // copies strs into a slice of its own
	a.f = frame.Frame{Command: cmd, Header: &a.h, Body: body}
	clear(strs) // do not keep this frame's strings alive
	r.strs = strs[:0]
	return &a.f
}

// parseContentLength parses a non-negative decimal number, saturating at
// math.MaxInt (which no limit allows) instead of overflowing. Leading
// zeros are allowed; signs and spaces are not.
func parseContentLength(b []byte) (n int, ok bool) {
	if len(b) == 0 {
		return 0, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (math.MaxInt-9)/10 {
			n = math.MaxInt
		} else {
			n = n*10 + int(c-'0')
		}
	}
	return n, true
}

// readCounted reads an n-byte body and the NUL after it (STOMP 1.2 "Header
// content-length"). n has been checked against the frame budget.
func (r *Reader) readCounted(n int) ([]byte, error) {
	var body []byte
	if n > 0 {
		// Grow as the bytes arrive: the body holds at most twice what the
		// peer has sent, or eagerBody, so a peer that announces 10 MiB
		// and stops sending costs 64 KiB.
		body = make([]byte, min(n, eagerBody))
		got := 0
		for {
			m, err := io.ReadFull(r.br, body[got:])
			got += m
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return nil, err
			}
			if got == n {
				break
			}
			grown := make([]byte, min(2*len(body), n))
			copy(grown, body)
			body = grown
		}
	}
	c, err := r.br.ReadByte()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if c != 0 {
		return nil, syntaxError(ErrMissingNul, "", "(content-length "+strconv.Itoa(n)+")")
	}
	return body, nil
}

// readUntilNul reads a body terminated by the first NUL, of at most budget
// bytes, in chunks of at most the buffer's size.
func (r *Reader) readUntilNul(budget int) ([]byte, error) {
	var body []byte
	for {
		chunk, err := r.br.ReadSlice(0)
		switch err {
		case nil:
			chunk = chunk[:len(chunk)-1]
			if len(body)+len(chunk) > budget {
				return nil, limitError(ErrFrameTooLarge, r.lim.MaxFrameSize, "")
			}
			if body == nil {
				// The whole body was in the buffer: one exact copy.
				if len(chunk) == 0 {
					return nil, nil
				}
				return clone(chunk, nil), nil
			}
			// Copy once more rather than append, so the body's capacity
			// is its length: the body outlives the frame, in queues.
			return clone(body, chunk), nil
		case bufio.ErrBufferFull:
			if len(body)+len(chunk) > budget {
				return nil, limitError(ErrFrameTooLarge, r.lim.MaxFrameSize, "")
			}
			body = append(body, chunk...)
		case io.EOF:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// clone returns a new slice holding a then b, with no spare capacity.
func clone(a, b []byte) []byte {
	c := make([]byte, len(a)+len(b))
	copy(c[copy(c, a):], b)
	return c
}

// command returns the STOMP command line names, as a constant (so it does
// not allocate), or "" if it is not a command (STOMP 1.2 "Client Frames",
// "Server Frames").
func command(line []byte) string {
	switch string(line) {
	case frame.SEND:
		return frame.SEND
	case frame.ACK:
		return frame.ACK
	case frame.NACK:
		return frame.NACK
	case frame.SUBSCRIBE:
		return frame.SUBSCRIBE
	case frame.UNSUBSCRIBE:
		return frame.UNSUBSCRIBE
	case frame.BEGIN:
		return frame.BEGIN
	case frame.COMMIT:
		return frame.COMMIT
	case frame.ABORT:
		return frame.ABORT
	case frame.CONNECT:
		return frame.CONNECT
	case frame.STOMP:
		return frame.STOMP
	case frame.DISCONNECT:
		return frame.DISCONNECT
	case frame.CONNECTED:
		return frame.CONNECTED
	case frame.MESSAGE:
		return frame.MESSAGE
	case frame.RECEIPT:
		return frame.RECEIPT
	case frame.ERROR:
		return frame.ERROR
	}
	return ""
}

// internName returns common header names as constants, and "" for others.
// The switch on string(b) does not allocate.
func internName(b []byte) string {
	switch string(b) {
	case frame.Destination:
		return frame.Destination
	case frame.ContentLength:
		return frame.ContentLength
	case frame.ContentType:
		return frame.ContentType
	case frame.Receipt:
		return frame.Receipt
	case frame.Id:
		return frame.Id
	case frame.Ack:
		return frame.Ack
	case frame.Transaction:
		return frame.Transaction
	case frame.Subscription:
		return frame.Subscription
	case frame.MessageId:
		return frame.MessageId
	case frame.ReceiptId:
		return frame.ReceiptId
	case frame.AcceptVersion:
		return frame.AcceptVersion
	case frame.Host:
		return frame.Host
	case frame.Login:
		return frame.Login
	case frame.Passcode:
		return frame.Passcode
	case frame.HeartBeat:
		return frame.HeartBeat
	case frame.Version:
		return frame.Version
	case frame.Session:
		return frame.Session
	case frame.Server:
		return frame.Server
	case frame.Message:
		return frame.Message
	case "persistent":
		return "persistent"
	case "priority":
		return "priority"
	case "expires":
		return "expires"
	case "reply-to":
		return "reply-to"
	case "correlation-id":
		return "correlation-id"
	}
	return ""
}

package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

const (
	// readBufSize is the acceptor's read buffer: frames that fit are
	// handed out of it without a copy.
	readBufSize = 64 << 10
	// retainBuf bounds the buffer a reader keeps between frames: a
	// larger one, needed for one big frame, is dropped after use.
	retainBuf = 1 << 20
)

// ErrFrameTooLarge: a frame's length is above its lane's MaxFrame.
var ErrFrameTooLarge = errors.New("transport: frame too large")

// frameReader reads frames from an authenticated connection.
type frameReader struct {
	r   *bufio.Reader
	max int
	buf []byte // frames larger than r's buffer
}

func newFrameReader(r io.Reader, max int) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, readBufSize), max: max}
}

// next returns the next frame, valid until the next call, or reports a
// keepalive (which the caller counts as life, not as a frame).
func (fr *frameReader) next() (frame []byte, keepalive bool, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		return nil, false, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == keepaliveLen {
		return nil, true, nil
	}
	if uint64(n) > uint64(fr.max) {
		return nil, false, fmt.Errorf("%w: %d bytes, the lane's limit is %d", ErrFrameTooLarge, n, fr.max)
	}
	if int(n) <= fr.r.Size() {
		// Peek then Discard: the frame stays in the read buffer.
		p, err := fr.r.Peek(int(n))
		if err != nil {
			return nil, false, unexpectedEOF(err)
		}
		_, _ = fr.r.Discard(int(n))
		return p, false, nil
	}
	if cap(fr.buf) > retainBuf {
		fr.buf = nil // the previous big frame's buffer
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	b := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		return nil, false, unexpectedEOF(err)
	}
	return b, false, nil
}

// unexpectedEOF turns a clean EOF inside a frame into ErrUnexpectedEOF.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

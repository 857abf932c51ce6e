package frames

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/junctionmq/junction/amqp/internal/encoding"
)

// Frame types, and sizes of the frame layer.
const (
	TypeAMQP uint8 = 0x00
	TypeSASL uint8 = 0x01

	HeaderSize      = 8   // bytes in a frame header without extension
	MinMaxFrameSize = 512 // the smallest max-frame-size a peer may set
)

// Protocol headers that open a connection.
var (
	ProtoAMQP = [8]byte{'A', 'M', 'Q', 'P', 0, 1, 0, 0}
	ProtoTLS  = [8]byte{'A', 'M', 'Q', 'P', 2, 1, 0, 0}
	ProtoSASL = [8]byte{'A', 'M', 'Q', 'P', 3, 1, 0, 0}
)

// Header is a frame header.
type Header struct {
	Size       uint32 // the whole frame, header included
	DataOffset uint8  // where the body starts, in 4-byte words
	Type       uint8  // TypeAMQP or TypeSASL
	Channel    uint16 // the channel (type-specific field; 0 for SASL)
}

// ParseHeader parses the first 8 bytes of b as a frame header and checks
// that Size >= 8, DataOffset >= 2 and that the body offset lies within the
// frame. The frame body is b[DataOffset*4:Size] of the whole frame.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes, need %d", ErrInvalidHeader, len(b), HeaderSize)
	}
	h := Header{
		Size:       binary.BigEndian.Uint32(b),
		DataOffset: b[4],
		Type:       b[5],
		Channel:    binary.BigEndian.Uint16(b[6:]),
	}
	switch {
	case h.Size < HeaderSize:
		return h, fmt.Errorf("%w: size %d", ErrInvalidHeader, h.Size)
	case h.DataOffset < 2:
		return h, fmt.Errorf("%w: data offset %d", ErrInvalidHeader, h.DataOffset)
	case uint32(h.DataOffset)*4 > h.Size:
		return h, fmt.Errorf("%w: data offset %d beyond size %d", ErrInvalidHeader, h.DataOffset, h.Size)
	}
	return h, nil
}

// Body is a frame body: one of *Open, *Begin, *Attach, *Flow, *Transfer,
// *Disposition, *Detach, *End and *Close (AMQP frames), and
// *SASLMechanisms, *SASLInit, *SASLChallenge, *SASLResponse and
// *SASLOutcome (SASL frames).
type Body interface {
	frameBody()
}

func (*Open) frameBody()           {}
func (*Begin) frameBody()          {}
func (*Attach) frameBody()         {}
func (*Flow) frameBody()           {}
func (*Transfer) frameBody()       {}
func (*Disposition) frameBody()    {}
func (*Detach) frameBody()         {}
func (*End) frameBody()            {}
func (*Close) frameBody()          {}
func (*SASLMechanisms) frameBody() {}
func (*SASLInit) frameBody()       {}
func (*SASLChallenge) frameBody()  {}
func (*SASLResponse) frameBody()   {}
func (*SASLOutcome) frameBody()    {}

// Decode decodes a frame body: the bytes after the (extended) header. An
// empty body is a heartbeat, for which Decode returns nil, nil, nil.
// For a *Transfer, payload is the rest of the body after the performative
// (the message fragment), a sub-slice of body; other performatives must not
// be followed by anything. SASL frames accept only SASL bodies, AMQP frames
// only AMQP performatives.
//
// Decoded []byte fields and payload alias body (with their capacity capped,
// so appending to them never overwrites body).
func Decode(frameType uint8, body []byte) (b Body, payload []byte, err error) {
	if len(body) == 0 {
		return nil, nil, nil
	}
	var r encoding.Reader
	r.Reset(body)
	code, err := readDescriptor(&r)
	if err != nil {
		return nil, nil, fmt.Errorf("frame body: %w", err)
	}
	switch frameType {
	case TypeAMQP:
		if code < codeOpen || code > codeClose {
			return nil, nil, fmt.Errorf("%w: descriptor %#x in an AMQP frame", ErrUnexpectedBody, code)
		}
	case TypeSASL:
		if code < codeSASLMechanisms || code > codeSASLOutcome {
			return nil, nil, fmt.Errorf("%w: descriptor %#x in a SASL frame", ErrUnexpectedBody, code)
		}
	default:
		return nil, nil, fmt.Errorf("%w: frame type %#x", ErrUnexpectedBody, frameType)
	}
	switch code {
	case codeOpen:
		b, err = decodeOpen(&r)
	case codeBegin:
		b, err = decodeBegin(&r)
	case codeAttach:
		b, err = decodeAttach(&r)
	case codeFlow:
		b, err = decodeFlow(&r)
	case codeTransfer:
		b, err = decodeTransfer(&r)
		if err != nil {
			return nil, nil, err
		}
		p := r.Bytes()
		return b, p[:len(p):len(p)], nil
	case codeDisposition:
		b, err = decodeDisposition(&r)
	case codeDetach:
		b, err = decodeDetach(&r)
	case codeEnd:
		b, err = decodeEnd(&r)
	case codeClose:
		b, err = decodeClose(&r)
	case codeSASLMechanisms:
		b, err = decodeSASLMechanisms(&r)
	case codeSASLInit:
		b, err = decodeSASLInit(&r)
	case codeSASLChallenge:
		b, err = decodeSASLChallenge(&r)
	case codeSASLResponse:
		b, err = decodeSASLResponse(&r)
	default:
		b, err = decodeSASLOutcome(&r)
	}
	if err != nil {
		return nil, nil, err
	}
	if r.Len() != 0 {
		return nil, nil, fmt.Errorf("%w: %d bytes after a %T", ErrUnexpectedBody, r.Len(), b)
	}
	return b, nil, nil
}

// Append appends a whole frame to dst: a header with DataOffset 2, the
// encoded performative b, then payload. A nil b makes an empty frame
// (with payload, if any). Fields of b that cannot be encoded (values of
// unsupported Go types inside maps) are written as null.
func Append(dst []byte, frameType uint8, channel uint16, b Body, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 2, frameType, byte(channel>>8), byte(channel))
	w := encoding.Writer{B: dst}
	appendBody(&w, b)
	dst = append(w.B, payload...)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start))
	return dst
}

// AppendEmpty appends an empty AMQP frame on channel 0: a heartbeat.
func AppendEmpty(dst []byte) []byte {
	return append(dst, 0, 0, 0, HeaderSize, 2, TypeAMQP, 0, 0)
}

// PerformativeSize returns the size of the encoded performative b, without
// frame header or payload: a transfer frame with payload p takes
// HeaderSize + PerformativeSize(t) + len(p) bytes.
func PerformativeSize(b Body) int {
	buf := sizeBuffers.Get().(*[]byte)
	w := encoding.Writer{B: (*buf)[:0]}
	appendBody(&w, b)
	n := len(w.B)
	if cap(w.B) <= 64<<10 {
		*buf = w.B
		sizeBuffers.Put(buf)
	}
	return n
}

// sizeBuffers hold scratch space for PerformativeSize.
var sizeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// appendBody encodes a performative. It switches on the concrete types so
// that the Writer does not escape.
func appendBody(w *encoding.Writer, b Body) {
	switch b := b.(type) {
	case *Open:
		b.encode(w)
	case *Begin:
		b.encode(w)
	case *Attach:
		b.encode(w)
	case *Flow:
		b.encode(w)
	case *Transfer:
		b.encode(w)
	case *Disposition:
		b.encode(w)
	case *Detach:
		b.encode(w)
	case *End:
		b.encode(w)
	case *Close:
		b.encode(w)
	case *SASLMechanisms:
		b.encode(w)
	case *SASLInit:
		b.encode(w)
	case *SASLChallenge:
		b.encode(w)
	case *SASLResponse:
		b.encode(w)
	case *SASLOutcome:
		b.encode(w)
	}
}

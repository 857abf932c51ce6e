package frames

import (
	"fmt"
	"time"

	"github.com/junctionmq/junction/amqp/internal/encoding"
)

// MessageHeader is the header section of a message (0x70).
type MessageHeader struct {
	Durable       bool
	Priority      uint8   // decoded as 4 when null
	TTL           *uint32 // milliseconds
	FirstAcquirer bool
	DeliveryCount uint32
}

// MessageProperties is the properties section of a message (0x73).
type MessageProperties struct {
	MessageID          any // nil, uint64, encoding.UUID, []byte or string
	UserID             []byte
	To                 *string
	Subject            *string
	ReplyTo            *string
	CorrelationID      any // like MessageID
	ContentType        encoding.Symbol
	ContentEncoding    encoding.Symbol
	AbsoluteExpiryTime time.Time // zero when null
	CreationTime       time.Time // zero when null
	GroupID            *string
	GroupSequence      *uint32
	ReplyToGroupID     *string
}

// BodyKind tells which kind of body a message has.
type BodyKind uint8

// Body kinds.
const (
	BodyNone     BodyKind = iota // no body section
	BodyData                     // one or more data sections
	BodySequence                 // one or more amqp-sequence sections
	BodyValue                    // one amqp-value section
)

// Message is a decoded message (Part 3 §3.2).
type Message struct {
	Header                *MessageHeader
	DeliveryAnnotations   encoding.Map // decoded, for lookups
	MessageAnnotations    encoding.Map // decoded; keys Symbol or uint64
	Properties            *MessageProperties
	ApplicationProperties encoding.Map // keys string

	BodyKind BodyKind
	Data     [][]byte // BodyData: one entry per data section, aliasing the input
	Value    any      // BodyValue: the amqp-value; BodySequence: the elements of all sequences

	// RawMessageAnnotations is the message-annotations section exactly as
	// received (descriptor included), nil if absent.
	RawMessageAnnotations []byte
	// RawApplicationProperties is the application-properties section
	// exactly as received (descriptor included), nil if absent.
	RawApplicationProperties []byte
	// RawBody is every body section exactly as received, concatenated.
	RawBody []byte
	// RawFooter is the footer section exactly as received, nil if absent.
	RawFooter []byte
}

// messageAlloc holds a Message and everything it usually points at, so that
// decoding a typical message takes one allocation for the structure.
type messageAlloc struct {
	m       Message
	header  MessageHeader
	props   MessageProperties
	ttl     uint32
	to      string
	subject string
	replyTo string
	groupID string
	groupSq uint32
	rtGroup string
	data    [1][]byte
}

func isBodySection(code uint64) bool {
	return code == codeData || code == codeAMQPSequence || code == codeAMQPValue
}

// ParseMessage decodes a complete (reassembled) message. Sections must
// appear in the specification's order, each at most once, except that a
// body is one or more data sections, one or more amqp-sequence sections, or
// one amqp-value section. Unknown sections are an error.
//
// The Raw fields and the Data sections alias b, and so do binary values
// anywhere in the message. Strings in the properties section share one copy
// of that section.
func ParseMessage(b []byte) (*Message, error) {
	a := new(messageAlloc)
	m := &a.m
	var r encoding.Reader
	r.Reset(b)
	var last uint64 // code of the previous section
	bodyStart, bodyEnd := -1, -1
	for r.Len() > 0 {
		start := len(b) - r.Len()
		code, err := readDescriptor(&r)
		if err != nil {
			return nil, fmt.Errorf("message section at %d: %w", start, err)
		}
		if code < codeHeader || code > codeFooter {
			return nil, fmt.Errorf("%w: section descriptor %#x", ErrInvalidMessage, code)
		}
		repeatable := code == codeData || code == codeAMQPSequence
		if code < last || code == last && !repeatable ||
			isBodySection(code) && isBodySection(last) && code != last {
			return nil, fmt.Errorf("%w: section %#x after section %#x", ErrInvalidMessage, code, last)
		}
		last = code
		switch code {
		case codeHeader:
			m.Header, err = readHeader(&r, a)
		case codeDeliveryAnnotations:
			m.DeliveryAnnotations, err = r.ReadMap()
		case codeMessageAnnotations:
			m.MessageAnnotations, err = r.ReadMap()
			m.RawMessageAnnotations = b[start : len(b)-r.Len() : len(b)-r.Len()]
		case codeProperties:
			m.Properties, err = readProperties(&r, a)
		case codeApplicationProperties:
			m.ApplicationProperties, err = r.ReadMap()
			m.RawApplicationProperties = b[start : len(b)-r.Len() : len(b)-r.Len()]
		case codeData:
			var d []byte
			if r.PeekNull() {
				err = fmt.Errorf("%w: null data section", ErrInvalidMessage)
			} else {
				d, err = r.ReadBinary()
			}
			if m.Data == nil {
				m.Data = a.data[:0:1]
			}
			m.Data = append(m.Data, d)
			m.BodyKind = BodyData
		case codeAMQPSequence:
			var v any
			v, err = r.ReadValue()
			l, ok := v.([]any)
			if err == nil && !ok {
				err = fmt.Errorf("%w: amqp-sequence holds a %T, not a list", ErrInvalidMessage, v)
			}
			if m.Value == nil {
				m.Value = l
			} else {
				m.Value = append(m.Value.([]any), l...)
			}
			m.BodyKind = BodySequence
		case codeAMQPValue:
			m.Value, err = r.ReadValue()
			m.BodyKind = BodyValue
		case codeFooter:
			_, err = r.ReadMap()
			m.RawFooter = b[start : len(b)-r.Len() : len(b)-r.Len()]
		}
		if err != nil {
			return nil, fmt.Errorf("message section %#x: %w", code, err)
		}
		if isBodySection(code) {
			if bodyStart < 0 {
				bodyStart = start
			}
			bodyEnd = len(b) - r.Len()
		}
	}
	if bodyStart >= 0 {
		m.RawBody = b[bodyStart:bodyEnd:bodyEnd]
	}
	return m, nil
}

func readHeader(r *encoding.Reader, a *messageAlloc) (*MessageHeader, error) {
	f, err := readFields(r, "header")
	if err != nil {
		return nil, err
	}
	h := &a.header
	h.Priority = 4
	f.bool(&h.Durable)
	f.ubyte(&h.Priority)
	f.uintp(&h.TTL, &a.ttl)
	f.bool(&h.FirstAcquirer)
	f.uint(&h.DeliveryCount)
	return h, f.err
}

func (h *MessageHeader) encode(w *encoding.Writer) {
	f := beginComposite(w, codeHeader)
	f.bool(h.Durable)
	f.ubyte(h.Priority, 4)
	f.uintp(h.TTL)
	f.bool(h.FirstAcquirer)
	f.uint(h.DeliveryCount, 0)
	f.end()
}

func readProperties(r *encoding.Reader, a *messageAlloc) (*MessageProperties, error) {
	f, err := readFields(r, "properties")
	if err != nil {
		return nil, err
	}
	f.pool()
	p := &a.props
	f.value(&p.MessageID)
	f.bin(&p.UserID)
	f.strp(&p.To, &a.to)
	f.strp(&p.Subject, &a.subject)
	f.strp(&p.ReplyTo, &a.replyTo)
	f.value(&p.CorrelationID)
	f.sym(&p.ContentType)
	f.sym(&p.ContentEncoding)
	f.timestamp(&p.AbsoluteExpiryTime)
	f.timestamp(&p.CreationTime)
	f.strp(&p.GroupID, &a.groupID)
	f.uintp(&p.GroupSequence, &a.groupSq)
	f.strp(&p.ReplyToGroupID, &a.rtGroup)
	return p, f.err
}

func (p *MessageProperties) encode(w *encoding.Writer) {
	f := beginComposite(w, codeProperties)
	f.value(p.MessageID)
	f.bin(p.UserID)
	f.strp(p.To)
	f.strp(p.Subject)
	f.strp(p.ReplyTo)
	f.value(p.CorrelationID)
	f.sym(p.ContentType)
	f.sym(p.ContentEncoding)
	f.timestamp(p.AbsoluteExpiryTime)
	f.timestamp(p.CreationTime)
	f.strp(p.GroupID)
	f.uintp(p.GroupSequence)
	f.strp(p.ReplyToGroupID)
	f.end()
}

// AppendMessage encodes m and appends it to dst: header,
// delivery-annotations, message-annotations (RawMessageAnnotations if set,
// else MessageAnnotations), properties, application-properties
// (RawApplicationProperties if set, else ApplicationProperties), then the
// body (RawBody if set, else from BodyKind with Data or Value), then
// RawFooter. Empty maps are left out. Values that cannot be encoded are
// written as null; use AppendMessageChecked to have them reported.
func AppendMessage(dst []byte, m *Message) []byte {
	dst, _ = AppendMessageChecked(dst, m)
	return dst
}

// AppendMessageChecked is AppendMessage, but reports the first value that
// could not be encoded (and was written as null) with an error wrapping
// encoding.ErrUnsupported, ErrNotHomogeneous or ErrTooDeep.
func AppendMessageChecked(dst []byte, m *Message) ([]byte, error) {
	w := encoding.Writer{B: dst}
	var firstErr error
	check := func(err error) {
		if firstErr == nil && err != nil {
			firstErr = err
		}
	}
	if m.Header != nil {
		m.Header.encode(&w)
	}
	if len(m.DeliveryAnnotations) > 0 {
		w.Descriptor(codeDeliveryAnnotations)
		check(w.Map(m.DeliveryAnnotations))
	}
	if m.RawMessageAnnotations != nil {
		w.B = append(w.B, m.RawMessageAnnotations...)
	} else if len(m.MessageAnnotations) > 0 {
		w.Descriptor(codeMessageAnnotations)
		check(w.Map(m.MessageAnnotations))
	}
	if m.Properties != nil {
		p := m.Properties
		for _, id := range [...]any{p.MessageID, p.CorrelationID} {
			if !validID(id) {
				check(fmt.Errorf("%w: message id of type %T", encoding.ErrUnsupported, id))
			}
		}
		p.encode(&w)
	}
	if m.RawApplicationProperties != nil {
		w.B = append(w.B, m.RawApplicationProperties...)
	} else if len(m.ApplicationProperties) > 0 {
		w.Descriptor(codeApplicationProperties)
		check(w.Map(m.ApplicationProperties))
	}
	switch {
	case m.RawBody != nil:
		w.B = append(w.B, m.RawBody...)
	case m.BodyKind == BodyData:
		for _, d := range m.Data {
			w.Descriptor(codeData)
			w.Binary(d)
		}
	case m.BodyKind == BodySequence:
		w.Descriptor(codeAMQPSequence)
		switch v := m.Value.(type) {
		case nil:
			w.EndList(w.BeginList(), 0)
		case []any:
			check(w.Value(v))
		default:
			w.EndList(w.BeginList(), 0)
			check(fmt.Errorf("%w: amqp-sequence body of type %T", encoding.ErrUnsupported, v))
		}
	case m.BodyKind == BodyValue:
		w.Descriptor(codeAMQPValue)
		check(w.Value(m.Value))
	}
	w.B = append(w.B, m.RawFooter...)
	return w.B, firstErr
}

// validID reports whether v is a valid message-id or correlation-id.
func validID(v any) bool {
	switch v.(type) {
	case nil, uint64, encoding.UUID, []byte, string:
		return true
	}
	return false
}

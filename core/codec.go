package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// errCorruptRecord is returned when a journal record does not decode.
var errCorruptRecord = errors.New("core: corrupt journal record")

// Record layout of a durable message (user type recMessage), version 1,
// all integers little-endian or unsigned varints (uv), strings and byte
// strings as uv length + bytes:
//
//	u8  version (1)
//	uv  message id
//	str address
//	u8  routing type
//	u8  flags: bit0 durable, bit1 large (body in the large-message
//	    store, not here)
//	u8  priority
//	i64 timestamp, expiration, delivery time (unix nanos; 0 = none)
//	str content type, correlation id, reply-to, group id, user id
//	uv  property count, then per property: str name, u8 kind, value
//	    (kind 0 nil, 1 string, 2 int64, 3 float64 bits, 4 bool, 5 bytes)
//	bytes body
//	uv  queue count, then uv queue ids
const codecVersion = 1

const (
	propNil byte = iota
	propString
	propInt
	propFloat
	propBool
	propBytes
)

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte {
	var n int64
	if !t.IsZero() {
		n = t.UnixNano()
	}
	return binary.LittleEndian.AppendUint64(b, uint64(n))
}

// encodeMessage encodes m and the ids of the durable queues it is on.
func encodeMessage(m *Message, queues []uint64) []byte {
	b := make([]byte, 0, 96+len(m.Body)+len(m.Address))
	b = append(b, codecVersion)
	b = appendUvarint(b, m.ID)
	b = appendStr(b, m.Address)
	b = append(b, byte(m.RoutingType))
	var flags byte
	if m.Durable {
		flags |= 1
	}
	if m.lb != nil {
		flags |= 2
	}
	b = append(b, flags, m.Priority)
	b = appendTime(b, m.Timestamp)
	b = appendTime(b, m.Expiration)
	b = appendTime(b, m.DeliveryTime)
	for _, s := range []string{m.ContentType, m.CorrelationID, m.ReplyTo, m.GroupID, m.UserID} {
		b = appendStr(b, s)
	}
	b = appendUvarint(b, uint64(len(m.Properties)))
	for k, v := range m.Properties {
		b = appendStr(b, k)
		switch x := v.(type) {
		case string:
			b = append(b, propString)
			b = appendStr(b, x)
		case int64:
			b = append(b, propInt)
			b = binary.LittleEndian.AppendUint64(b, uint64(x))
		case float64:
			b = append(b, propFloat)
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		case bool:
			b = append(b, propBool)
			if x {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		case []byte:
			b = append(b, propBytes)
			b = appendStr(b, string(x))
		default:
			b = append(b, propNil)
		}
	}
	if m.lb != nil {
		b = appendStr(b, "")
	} else {
		b = appendStr(b, string(m.Body))
	}
	b = appendUvarint(b, uint64(len(queues)))
	for _, q := range queues {
		b = appendUvarint(b, q)
	}
	return b
}

// decoder reads the fields of a record; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errCorruptRecord
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u64() uint64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// bytes returns a copy: the journal owns the record only during replay.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := append([]byte(nil), d.b[:n]...)
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	v := string(d.b[:n])
	d.b = d.b[n:]
	return v
}

func (d *decoder) time() time.Time {
	n := int64(d.u64())
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// decodeMessage decodes a record written by encodeMessage. The result
// owns its memory.
func decodeMessage(p []byte) (*Message, []uint64, error) {
	d := &decoder{b: p}
	if v := d.byte(); v != codecVersion {
		return nil, nil, fmt.Errorf("%w: message record version %d", errCorruptRecord, v)
	}
	m := &Message{}
	m.ID = d.uvarint()
	m.Address = d.str()
	m.RoutingType = RoutingType(d.byte())
	flags := d.byte()
	m.Durable = flags&1 != 0
	if flags&2 != 0 {
		// Its store and size are the caller's to fill in (recovery).
		m.lb = &largeBody{}
	}
	m.Priority = d.byte()
	m.Timestamp = d.time()
	m.Expiration = d.time()
	m.DeliveryTime = d.time()
	m.ContentType = d.str()
	m.CorrelationID = d.str()
	m.ReplyTo = d.str()
	m.GroupID = d.str()
	m.UserID = d.str()
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
	}
	if n > 0 && d.err == nil {
		m.Properties = make(map[string]any, n)
		for i := uint64(0); i < n && d.err == nil; i++ {
			k := d.str()
			switch d.byte() {
			case propNil:
				m.Properties[k] = nil
			case propString:
				m.Properties[k] = d.str()
			case propInt:
				m.Properties[k] = int64(d.u64())
			case propFloat:
				m.Properties[k] = math.Float64frombits(d.u64())
			case propBool:
				m.Properties[k] = d.byte() != 0
			case propBytes:
				m.Properties[k] = d.bytes()
			default:
				d.fail()
			}
		}
	}
	m.Body = d.bytes()
	if len(m.Body) == 0 {
		m.Body = nil
	}
	nq := d.uvarint()
	if nq > uint64(len(d.b)) {
		d.fail()
	}
	var qs []uint64
	for i := uint64(0); i < nq && d.err == nil; i++ {
		qs = append(qs, d.uvarint())
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil || m.Priority > MaxPriority || m.RoutingType > QueueElseTopic {
		return nil, nil, fmt.Errorf("%w: message record", errCorruptRecord)
	}
	return m, qs, nil
}

// Record layout of a queue binding (bindings journal, user type
// recQueue): u8 version, u8 routing type, u8 flags (bit0 durable
// subscription, bit1 has a selector, bit2 has a subscriber), str name,
// str address, str client id, then, with bit1, str selector, then, with
// bit2, str user and str protocol of the session that created the
// subscription ("" for a front-end's internal session): the identity a
// subscription bound to a wildcard pattern reads with (readauthz.go).
// Records written before selectors or subscribers were recorded have
// those bits clear and end earlier; they decode as before (a
// subscription without a subscriber reads for the first session that
// attaches to it).
func encodeQueue(q *Queue) []byte {
	b := []byte{codecVersion, byte(q.routing), 0}
	if q.clientID != "" {
		b[2] |= 1
	}
	if q.filter != nil {
		b[2] |= 2
	}
	if q.subKnown {
		b[2] |= 4
	}
	b = appendStr(b, q.name)
	b = appendStr(b, q.address)
	b = appendStr(b, q.clientID)
	if q.filter != nil {
		b = appendStr(b, q.filter.String())
	}
	if q.subKnown {
		b = appendStr(b, q.subscriber.user)
		b = appendStr(b, q.subscriber.proto)
	}
	return b
}

// Record layout of a divert made through the API (bindings journal,
// user type recDivert): u8 version, u8 flags (bit0 exclusive), str name,
// str address, str forwarding address, str filter, str routing type.
func encodeDivert(d *Divert) []byte {
	b := []byte{codecVersion, 0}
	if d.Exclusive {
		b[1] |= 1
	}
	b = appendStr(b, d.Name)
	b = appendStr(b, d.Address)
	b = appendStr(b, d.ForwardingAddress)
	b = appendStr(b, d.Filter)
	return appendStr(b, d.RoutingType)
}

func decodeDivert(p []byte) (Divert, error) {
	dec := &decoder{b: p}
	var d Divert
	if dec.byte() != codecVersion {
		return d, fmt.Errorf("%w: divert record version", errCorruptRecord)
	}
	flags := dec.byte()
	d.Exclusive = flags&1 != 0
	d.Name = dec.str()
	d.Address = dec.str()
	d.ForwardingAddress = dec.str()
	d.Filter = dec.str()
	d.RoutingType = dec.str()
	if dec.err != nil || len(dec.b) != 0 || flags&^1 != 0 {
		return d, fmt.Errorf("%w: divert record", errCorruptRecord)
	}
	if err := d.Validate(); err != nil {
		return d, fmt.Errorf("%w: divert record: %w", errCorruptRecord, err)
	}
	return d, nil
}

type queueRecord struct {
	routing    RoutingType
	name       string
	address    string
	clientID   string
	selector   string
	subscriber subscriber
	subKnown   bool
}

func decodeQueue(p []byte) (queueRecord, error) {
	d := &decoder{b: p}
	var r queueRecord
	if d.byte() != codecVersion {
		return r, fmt.Errorf("%w: queue record version", errCorruptRecord)
	}
	r.routing = RoutingType(d.byte())
	flags := d.byte()
	r.name = d.str()
	r.address = d.str()
	r.clientID = d.str()
	if flags&2 != 0 {
		r.selector = d.str()
	}
	if flags&4 != 0 {
		r.subscriber.user = d.str()
		r.subscriber.proto = d.str()
		r.subKnown = true
	}
	if d.err != nil || len(d.b) != 0 || (r.routing != Anycast && r.routing != Multicast) || r.name == "" {
		return r, fmt.Errorf("%w: queue record", errCorruptRecord)
	}
	return r, nil
}

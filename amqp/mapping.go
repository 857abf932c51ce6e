package amqp

import (
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/junctionmq/junction/amqp/internal/encoding"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
)

// Core properties that carry what core.Message has no field for, so that
// an AMQP consumer gets back what an AMQP producer sent. Other protocols
// do not see them (they start with the internal prefix).
const (
	internalPrefix      = core.InternalPropertyPrefix + "AMQP_"
	propMessageID       = core.PropAMQPMessageID
	propSubject         = internalPrefix + "SUBJECT"
	propContentEncoding = internalPrefix + "CONTENT_ENCODING"
	propGroupSequence   = internalPrefix + "GROUP_SEQUENCE"
	propReplyToGroupID  = internalPrefix + "REPLY_TO_GROUP_ID"
	propAnnotations     = internalPrefix + "MESSAGE_ANNOTATIONS"
	propAppProperties   = internalPrefix + "APPLICATION_PROPERTIES"
	propFooter          = internalPrefix + "FOOTER"
	propBody            = internalPrefix + "BODY"
)

// Values of propBody: how the AMQP body was carried in core.Message.Body.
const (
	bodyString   = "string"    // amqp-value string, as its UTF-8 bytes
	bodyStringCT = "string+ct" // the same, with a content type the broker added
	bodyBinary   = "binary"    // amqp-value binary, as its bytes
	bodyRaw      = "raw"       // the body sections as encoded (other values, sequences, several data sections)
)

// textPlain is the content type given to an amqp-value string body that
// has none, for the other protocols' consumers.
const textPlain = "text/plain; charset=utf-8"

// Message annotations the broker reads (Artemis's scheduled delivery and
// the JMS mapping's destination type).
const (
	annDeliveryTime  = encoding.Symbol("x-opt-delivery-time")
	annDeliveryDelay = encoding.Symbol("x-opt-delivery-delay")
	annJMSDest       = encoding.Symbol("x-opt-jms-dest")
)

// toCore maps a parsed AMQP message onto a core message for addr. Every
// slice is copied: pm aliases the read buffer.
func toCore(pm *frames.Message, addr string, rt core.RoutingType, now time.Time) (*core.Message, error) {
	m := &core.Message{Address: addr, RoutingType: rt, Priority: core.DefaultPriority}
	var props map[string]any
	set := func(k string, v any) {
		if props == nil {
			props = make(map[string]any)
		}
		props[k] = v
	}
	if h := pm.Header; h != nil {
		m.Durable = h.Durable
		m.Priority = min(h.Priority, core.MaxPriority)
		if h.TTL != nil && *h.TTL > 0 {
			m.Expiration = now.Add(time.Duration(*h.TTL) * time.Millisecond)
		}
	}
	if p := pm.Properties; p != nil {
		if p.MessageID != nil {
			set(propMessageID, idText(p.MessageID))
		}
		if p.Subject != nil {
			set(propSubject, *p.Subject)
		}
		m.ReplyTo = derefString(p.ReplyTo)
		if p.CorrelationID != nil {
			m.CorrelationID = idText(p.CorrelationID)
		}
		m.ContentType = string(p.ContentType)
		if p.ContentEncoding != "" {
			set(propContentEncoding, string(p.ContentEncoding))
		}
		if !p.AbsoluteExpiryTime.IsZero() && (m.Expiration.IsZero() || p.AbsoluteExpiryTime.Before(m.Expiration)) {
			m.Expiration = p.AbsoluteExpiryTime
		}
		if !p.CreationTime.IsZero() {
			m.Timestamp = p.CreationTime
		}
		m.GroupID = derefString(p.GroupID)
		if p.GroupSequence != nil {
			set(propGroupSequence, int64(*p.GroupSequence))
		}
		if p.ReplyToGroupID != nil {
			set(propReplyToGroupID, *p.ReplyToGroupID)
		}
	}
	// Application properties become core properties of core's types,
	// for selectors and the other protocols; when core's types would
	// not give an AMQP consumer back what was sent (an int, a symbol, a
	// list...), the section is kept as received too (see appProperties).
	typed := false
	for _, e := range pm.ApplicationProperties {
		k, ok := e.Key.(string)
		if !ok {
			return nil, fmt.Errorf("%w: application-properties key %v is not a string", core.ErrInvalidMessage, e.Key)
		}
		if core.IsInternalProperty(k) {
			continue // a front-end's own, never a client's
		}
		if !coreNative(e.Value) {
			typed = true
		}
		if v, ok := coreValue(e.Value); ok {
			set(k, v)
		}
	}
	if typed {
		set(propAppProperties, append([]byte(nil), pm.RawApplicationProperties...))
	}
	// The footer (hashes, signatures of the bare message) goes on as
	// received. Delivery annotations do not: they are for the next hop
	// only (Part 3 §3.2.2), the broker.
	if pm.RawFooter != nil {
		set(propFooter, append([]byte(nil), pm.RawFooter...))
	}
	if pm.RawMessageAnnotations != nil {
		set(propAnnotations, append([]byte(nil), pm.RawMessageAnnotations...))
		for _, e := range pm.MessageAnnotations {
			switch e.Key {
			case annDeliveryTime:
				if t, ok := e.Value.(time.Time); ok {
					m.DeliveryTime = t
				} else if ms, ok := asInt(e.Value); ok {
					m.DeliveryTime = time.UnixMilli(ms)
				}
			case annDeliveryDelay:
				if ms, ok := asInt(e.Value); ok && ms > 0 {
					m.DeliveryTime = now.Add(time.Duration(ms) * time.Millisecond)
				}
			}
		}
	}
	switch {
	case pm.BodyKind == frames.BodyData && len(pm.Data) == 1:
		m.Body = append([]byte(nil), pm.Data[0]...)
	case pm.BodyKind == frames.BodyNone:
	case pm.BodyKind == frames.BodyValue:
		switch v := pm.Value.(type) {
		case string:
			m.Body = []byte(v)
			if m.ContentType == "" {
				m.ContentType = textPlain
				set(propBody, bodyStringCT)
			} else {
				set(propBody, bodyString)
			}
		case []byte:
			m.Body = append([]byte(nil), v...)
			set(propBody, bodyBinary)
		default:
			m.Body = append([]byte(nil), pm.RawBody...)
			set(propBody, bodyRaw)
		}
	default:
		m.Body = append([]byte(nil), pm.RawBody...)
		set(propBody, bodyRaw)
	}
	m.Properties = props
	return m, nil
}

// coreValue converts an AMQP value to a core property value. Integers
// become int64 (an unsigned long above MaxInt64 its decimal text), floats
// float64, symbols, chars and UUIDs strings, timestamps milliseconds
// since the epoch. Decimals, lists, maps, arrays and described values
// have no core counterpart: ok is false, and only AMQP consumers get
// them (from the section kept as received).
func coreValue(v any) (any, bool) {
	switch x := v.(type) {
	case nil, string, bool, int64, float64:
		return x, true
	case []byte:
		return append([]byte(nil), x...), true
	case encoding.Symbol:
		return string(x), true
	case int8, int16, int32, uint8, uint16, uint32:
		n, _ := asInt(x)
		return n, true
	case uint64:
		if x > math.MaxInt64 {
			return strconv.FormatUint(x, 10), true
		}
		return int64(x), true
	case float32:
		return float64(x), true
	case encoding.Char:
		return string(rune(x)), true
	case time.Time:
		return x.UnixMilli(), true
	case encoding.UUID:
		return uuidText(x), true
	}
	return nil, false
}

// coreNative reports whether an AMQP value decodes to a core type that
// encodes back to the same AMQP type (string, long, double, boolean,
// binary, null), so that the core property alone gives an AMQP consumer
// what was sent.
func coreNative(v any) bool {
	switch v.(type) {
	case nil, string, bool, int64, float64, []byte:
		return true
	}
	return false
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), true
		}
	}
	return 0, false
}

// Message and correlation ids other than strings are kept as text with
// a type prefix, as Artemis and Qpid JMS do, so that they convert back.
const (
	idULong  = "AMQP_ULONG:"
	idUUID   = "AMQP_UUID:"
	idBinary = "AMQP_BINARY:"
	idString = "AMQP_STRING:" // a string that itself starts with "AMQP_"
)

func idText(v any) string {
	switch x := v.(type) {
	case string:
		if strings.HasPrefix(x, "AMQP_") {
			return idString + x
		}
		return x
	case uint64:
		return idULong + strconv.FormatUint(x, 10)
	case encoding.UUID:
		return idUUID + uuidText(x)
	case []byte:
		return idBinary + hex.EncodeToString(x)
	}
	return fmt.Sprint(v)
}

func idValue(s string) any {
	if !strings.HasPrefix(s, "AMQP_") {
		return s
	}
	switch {
	case strings.HasPrefix(s, idULong):
		if n, err := strconv.ParseUint(s[len(idULong):], 10, 64); err == nil {
			return n
		}
	case strings.HasPrefix(s, idUUID):
		if u, ok := parseUUID(s[len(idUUID):]); ok {
			return u
		}
	case strings.HasPrefix(s, idBinary):
		if b, err := hex.DecodeString(s[len(idBinary):]); err == nil {
			return b
		}
	case strings.HasPrefix(s, idString):
		return s[len(idString):]
	}
	return s
}

func uuidText(u encoding.UUID) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func parseUUID(s string) (encoding.UUID, bool) {
	var u encoding.UUID
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != 16 {
		return u, false
	}
	copy(u[:], b)
	return u, true
}

// appendDelivery encodes the AMQP message for a delivery: the message's
// fields, its AMQP-only properties restored, and the delivery's count.
func appendDelivery(dst []byte, d core.Delivery) []byte {
	m := d.Message
	// Qpid JMS (JMSRedelivered) and others read a possible redelivery
	// from delivery-count alone, not from first-acquirer: a message that
	// may have been delivered before core counted an attempt (recovered
	// after a restart, or handed over by a failover) goes out with a
	// count of at least 1, as RabbitMQ does.
	dc := d.DeliveryCount
	if dc == 0 && d.Redelivered() {
		dc = 1
	}
	hdr := frames.MessageHeader{Durable: m.Durable, Priority: m.Priority, DeliveryCount: dc, FirstAcquirer: !d.Redelivered()}
	if !m.Expiration.IsZero() {
		ms := time.Until(m.Expiration).Milliseconds()
		ttl := uint32(min(max(ms, 1), math.MaxUint32))
		hdr.TTL = &ttl
	}
	props := frames.MessageProperties{
		MessageID:          uint64(m.ID),
		To:                 &m.Address,
		ContentType:        encoding.Symbol(m.ContentType),
		AbsoluteExpiryTime: m.Expiration,
		CreationTime:       m.Timestamp,
	}
	if m.UserID != "" {
		props.UserID = []byte(m.UserID)
	}
	if m.ReplyTo != "" {
		props.ReplyTo = &m.ReplyTo
	}
	if m.CorrelationID != "" {
		props.CorrelationID = idValue(m.CorrelationID)
	}
	if m.GroupID != "" {
		props.GroupID = &m.GroupID
	}
	fm := frames.Message{Header: &hdr, Properties: &props}
	var bodyKind string
	var app encoding.Map
	var emitted map[string]bool
	if raw, ok := m.Properties[propAppProperties].([]byte); ok {
		app, emitted = appProperties(raw, m.Properties)
	}
	for k, v := range m.Properties {
		switch k {
		case propMessageID:
			if s, ok := v.(string); ok {
				props.MessageID = idValue(s)
			}
			continue
		case propSubject:
			if s, ok := v.(string); ok {
				props.Subject = &s
			}
			continue
		case propContentEncoding:
			if s, ok := v.(string); ok {
				props.ContentEncoding = encoding.Symbol(s)
			}
			continue
		case propGroupSequence:
			if n, ok := v.(int64); ok {
				seq := uint32(n)
				props.GroupSequence = &seq
			}
			continue
		case propReplyToGroupID:
			if s, ok := v.(string); ok {
				props.ReplyToGroupID = &s
			}
			continue
		case propAnnotations:
			if b, ok := v.([]byte); ok {
				fm.RawMessageAnnotations = b
			}
			continue
		case propFooter:
			if b, ok := v.([]byte); ok {
				fm.RawFooter = b
			}
			continue
		case propBody:
			bodyKind, _ = v.(string)
			continue
		}
		if hidden(k) || emitted[k] {
			continue
		}
		app = append(app, encoding.MapEntry{Key: k, Value: v})
	}
	fm.ApplicationProperties = app
	switch bodyKind {
	case bodyString, bodyStringCT:
		fm.BodyKind, fm.Value = frames.BodyValue, string(m.Body)
		if bodyKind == bodyStringCT && m.ContentType == textPlain {
			props.ContentType = ""
		}
	case bodyBinary:
		fm.BodyKind, fm.Value = frames.BodyValue, m.Body
	case bodyRaw:
		fm.RawBody = m.Body
	default:
		fm.BodyKind, fm.Data = frames.BodyData, [][]byte{m.Body}
	}
	if m.Streamed() {
		// The body (one data section) and the footer follow from the
		// body's file (sendStreamed).
		fm.BodyKind, fm.Data, fm.Value, fm.RawBody, fm.RawFooter = frames.BodyNone, nil, nil, nil, nil
	}
	return frames.AppendMessage(dst, &fm)
}

// appProperties returns the application properties of the section an
// AMQP producer sent (raw, as received), each value exactly as encoded,
// and the names it covers. A value counts only while the message still
// has the core property it was mapped to, with that value: a property
// changed since (a dead-letter's _AMQ_ORIG_*, say) is core's, written by
// the caller with core's type. A value with no core counterpart (a
// list, a decimal...) goes on unless core has a property of that name.
func appProperties(raw []byte, props map[string]any) (encoding.Map, map[string]bool) {
	var r encoding.Reader
	r.Reset(raw)
	if _, err := r.ReadDescriptor(); err != nil {
		return nil, nil
	}
	entries, err := r.ReadMapRaw()
	if err != nil {
		return nil, nil // not written by toCore; core's properties stand
	}
	var vr encoding.Reader
	out := make(encoding.Map, 0, len(entries))
	emitted := make(map[string]bool, len(entries))
	for _, e := range entries {
		k, ok := e.Key.(string)
		if !ok || hidden(k) || emitted[k] {
			continue
		}
		enc := e.Value.(encoding.Raw)
		vr.Reset(enc)
		v, err := vr.ReadValue()
		if err != nil {
			continue
		}
		cur, has := props[k]
		if cv, mapped := coreValue(v); mapped {
			if !has || !sameValue(cur, cv) {
				continue
			}
		} else if has {
			continue
		}
		out = append(out, encoding.MapEntry{Key: k, Value: enc})
		emitted[k] = true
	}
	return out, emitted
}

// sameValue compares two core property values; floats by their bits.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case []byte:
		y, ok := b.([]byte)
		return ok && string(x) == string(y)
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	}
	return a == b
}

// hidden reports whether a core property is a front-end's bookkeeping
// rather than an application property.
func hidden(k string) bool { return core.IsInternalProperty(k) }

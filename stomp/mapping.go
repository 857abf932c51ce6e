package stomp

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/go-stomp/stomp/v3/frame"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/stomp/internal/wire"
)

// Destination prefixes.
const (
	queuePrefix = "/queue/"
	topicPrefix = "/topic/"
)

// Header names Junction maps onto core.Message fields.
const (
	hdrPersistent     = "persistent"
	hdrPriority       = "priority"
	hdrExpires        = "expires"
	hdrCorrelationID  = "correlation-id"
	hdrReplyTo        = "reply-to"
	hdrGroupID        = "JMSXGroupID"
	hdrScheduledDelay = "AMQ_SCHEDULED_DELAY"
	hdrTimestamp      = "timestamp"
	hdrSelector       = "selector" // on SUBSCRIBE
)

// parseDestination maps a STOMP destination to an address and routing
// type: /queue/X is anycast X, /topic/X multicast X, anything else the
// address itself with the default routing type. A comma-separated list
// beginning /queue/ or /topic/ is an ActiveMQ composite destination
// ("/queue/a,/topic/b", "/queue/a,b": a part without a prefix takes the
// one before it's), core's composite address "queue://a,topic://b".
func parseDestination(dest string) (string, core.RoutingType) {
	if strings.Contains(dest, ",") && (strings.HasPrefix(dest, queuePrefix) || strings.HasPrefix(dest, topicPrefix)) {
		if addr, rt, ok := compositeDestination(dest); ok {
			return addr, rt
		}
	}
	if a, ok := strings.CutPrefix(dest, queuePrefix); ok {
		return a, core.Anycast
	}
	if a, ok := strings.CutPrefix(dest, topicPrefix); ok {
		return a, core.Multicast
	}
	return dest, core.RoutingDefault
}

// compositeDestination writes a STOMP composite destination as core's
// composite address; false when a part names no address.
func compositeDestination(dest string) (string, core.RoutingType, bool) {
	parts := strings.Split(dest, ",")
	first := core.RoutingDefault
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if a, ok := strings.CutPrefix(p, queuePrefix); ok {
			p = core.FormatDestination(a, core.Anycast)
		} else if a, ok := strings.CutPrefix(p, topicPrefix); ok {
			p = core.FormatDestination(a, core.Multicast)
		}
		a, rt := core.ParseDestination(p)
		if a == "" {
			return "", 0, false
		}
		if i == 0 {
			first = rt
		}
		parts[i] = p
	}
	return core.CompositeAddress(strings.Join(parts, ","), first), first, true
}

// destinationOf is the destination header of a MESSAGE: where the
// message was sent, with the prefix of its routing type.
func destinationOf(m *core.Message) string {
	if m.RoutingType == core.Multicast {
		return topicPrefix + m.Address
	}
	return queuePrefix + m.Address
}

// replyDestination writes a core reply-to as a STOMP destination.
func replyDestination(replyTo string) string {
	switch addr, rt := core.ParseDestination(replyTo); rt {
	case core.Anycast:
		return queuePrefix + addr
	case core.Multicast:
		return topicPrefix + addr
	default:
		return addr
	}
}

// reserved headers are STOMP's own or mapped to fields; they never become
// properties, and properties by these names are not written back.
var reserved = map[string]bool{
	frame.Destination: true, frame.Receipt: true, frame.Transaction: true,
	frame.ContentLength: true, frame.ContentType: true, frame.MessageId: true,
	frame.Subscription: true, frame.Ack: true, "redelivered": true,
	hdrPersistent: true, hdrPriority: true, hdrExpires: true,
	hdrCorrelationID: true, hdrReplyTo: true, hdrGroupID: true,
	hdrScheduledDelay: true, hdrTimestamp: true,
}

// messageFromFrame maps a SEND frame to a message (see the package doc
// for the table). The frame's body becomes the message's body.
func messageFromFrame(f *frame.Frame, now time.Time) (*core.Message, error) {
	dest, ok := f.Header.Contains(frame.Destination)
	if !ok || dest == "" {
		return nil, protoErr("missing destination", "SEND needs a destination header.")
	}
	addr, rt := parseDestination(dest)
	if addr == "" {
		return nil, protoErr("invalid destination", "Destination %q names no address.", dest)
	}
	m := &core.Message{Address: addr, RoutingType: rt, Priority: core.DefaultPriority, Body: f.Body}
	h := f.Header
	for i := 0; i < h.Len(); i++ {
		k, v := h.GetAt(i)
		if h.Get(k) != v {
			continue // a repeated header: the first one counts (STOMP 1.2)
		}
		switch k {
		case hdrPersistent:
			m.Durable = v == "true"
		case hdrPriority:
			p, err := strconv.ParseUint(v, 10, 8)
			if err != nil || p > core.MaxPriority {
				return nil, protoErr("invalid priority", "priority must be 0 to 9, got %q.", v)
			}
			m.Priority = uint8(p)
		case hdrExpires:
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms < 0 {
				return nil, protoErr("invalid expires", "expires must be milliseconds since the epoch (0 = never), got %q.", v)
			}
			if ms > 0 {
				m.Expiration = time.UnixMilli(ms)
			}
		case hdrScheduledDelay:
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms < 0 {
				return nil, protoErr("invalid "+hdrScheduledDelay, "%s must be a non-negative number of milliseconds, got %q.", hdrScheduledDelay, v)
			}
			if ms > 0 {
				m.DeliveryTime = now.Add(time.Duration(ms) * time.Millisecond)
			}
		case frame.ContentType:
			m.ContentType = v
		case hdrCorrelationID:
			m.CorrelationID = v
		case hdrReplyTo:
			m.ReplyTo = core.FormatDestination(parseDestination(v))
		case hdrGroupID:
			m.GroupID = v
		default:
			// Internal names are the front-ends' own bookkeeping: a
			// client's header of such a name could otherwise tell the
			// AMQP front-end how to encode the body (and so forge an
			// AMQP consumer's view of the message).
			if reserved[k] || core.IsInternalProperty(k) {
				continue
			}
			if m.Properties == nil {
				m.Properties = make(map[string]any)
			}
			m.Properties[k] = v
		}
	}
	return m, nil
}

// appendMessageHeaders writes the mapped fields and properties of m.
func appendMessageHeaders(buf []byte, m *core.Message, v wire.Version) []byte {
	if m.ContentType != "" {
		buf = wire.AppendHeader(buf, frame.ContentType, m.ContentType, v)
	}
	if m.Durable {
		buf = append(buf, "persistent:true\n"...)
	}
	buf = append(buf, "priority:"...)
	buf = strconv.AppendUint(buf, uint64(m.Priority), 10)
	buf = append(buf, '\n')
	buf = append(buf, "timestamp:"...)
	buf = strconv.AppendInt(buf, m.Timestamp.UnixMilli(), 10)
	buf = append(buf, '\n')
	if !m.Expiration.IsZero() {
		buf = append(buf, "expires:"...)
		buf = strconv.AppendInt(buf, m.Expiration.UnixMilli(), 10)
		buf = append(buf, '\n')
	}
	if m.CorrelationID != "" {
		buf = wire.AppendHeader(buf, hdrCorrelationID, m.CorrelationID, v)
	}
	if m.ReplyTo != "" {
		buf = wire.AppendHeader(buf, hdrReplyTo, replyDestination(m.ReplyTo), v)
	}
	if m.GroupID != "" {
		buf = wire.AppendHeader(buf, hdrGroupID, m.GroupID, v)
	}
	for k, val := range m.Properties {
		if reserved[k] || k == "" || core.IsInternalProperty(k) {
			continue
		}
		buf = wire.AppendHeader(buf, k, propertyText(val), v)
	}
	return buf
}

// propertyText renders a property value as a header value.
func propertyText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	}
	return ""
}

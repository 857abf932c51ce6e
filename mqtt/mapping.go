package mqtt

import (
	"encoding/binary"
	"sort"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/junctionmq/junction/core"
)

// Property names the front-end adds to core messages.
const (
	// PropRetain records an MQTT publish's retain flag.
	PropRetain = "mqtt.retain"
	// PropQoS records the QoS of the publish a message came from, under
	// the name ActiveMQ gives it, so that a STOMP or AMQP consumer can
	// tell QoS 1 from QoS 2, and an MQTT subscriber gets it at most at
	// that QoS.
	PropQoS = "ActiveMQ.MQTT.QoS"
	// propUser keeps an MQTT 5 publish's user properties as sent, in
	// order and with repeats (MQTT-3.3.2-18), for MQTT subscribers; the
	// other protocols see them as properties (the first of a name wins).
	propUser = core.InternalPropertyPrefix + "MQTT_USER"
	// propFormat records a payload format indicator of 1 (UTF-8), which
	// MQTT subscribers must receive unaltered (MQTT-3.3.2-4).
	propFormat = core.InternalPropertyPrefix + "MQTT_FORMAT"
)

// baseProperties are the properties of most MQTT messages, one map per
// QoS shared by them: core never changes a message's properties (a copy
// for a dead-letter address gets a map of its own).
var baseProperties = [3]map[string]any{
	{PropQoS: int64(0)},
	{PropQoS: int64(1)},
	{PropQoS: int64(2)},
}

// pubFields are the fields of a PUBLISH (or a will) that a message is
// made of.
type pubFields struct {
	topic         string
	payload       []byte
	qos           byte
	retain        bool
	format        bool
	expiry        uint32
	contentType   string
	responseTopic string
	correlation   []byte
	user          []packets.UserProperty
}

func fieldsOf(pk *packets.Packet, topic string) pubFields {
	return pubFields{
		topic: topic, payload: pk.Payload, qos: pk.FixedHeader.Qos, retain: pk.FixedHeader.Retain,
		format:        pk.Properties.PayloadFormatFlag && pk.Properties.PayloadFormat == 1,
		expiry:        pk.Properties.MessageExpiryInterval,
		contentType:   pk.Properties.ContentType,
		responseTopic: pk.Properties.ResponseTopic,
		correlation:   pk.Properties.CorrelationData,
		user:          pk.Properties.User,
	}
}

// message maps f to a core message (see the package doc for the
// table). Its strings and slices must be owned by the caller and not
// change afterwards: the message keeps them.
func (f *pubFields) message(now time.Time) *core.Message {
	m := &core.Message{
		Address:       TopicToAddress(f.topic),
		RoutingType:   core.QueueElseTopic, // a device may feed a work queue
		Durable:       f.qos > 0,
		Priority:      core.DefaultPriority,
		Body:          f.payload,
		ContentType:   f.contentType,
		CorrelationID: string(f.correlation),
		Properties:    baseProperties[min(f.qos, 2)],
	}
	if f.retain || f.format || len(f.user) > 0 {
		m.Properties = map[string]any{PropQoS: int64(f.qos)}
		if f.retain {
			m.Properties[PropRetain] = true
		}
		if f.format {
			m.Properties[propFormat] = true
		}
		if len(f.user) > 0 {
			m.Properties[propUser] = encodeUserProps(f.user)
			for _, u := range f.user {
				// A client's own internal or reserved names are kept
				// only in the MQTT copy above: they would otherwise
				// tell another front-end how to read the message.
				if core.IsInternalProperty(u.Key) || u.Key == PropRetain {
					continue
				}
				if _, taken := m.Properties[u.Key]; !taken {
					m.Properties[u.Key] = u.Val // the first wins, as in STOMP
				}
			}
		}
	}
	if f.responseTopic != "" {
		m.ReplyTo = core.FormatDestination(TopicToAddress(f.responseTopic), core.Multicast)
	}
	if f.expiry > 0 {
		m.Expiration = now.Add(time.Duration(f.expiry) * time.Second)
	}
	return m
}

func encodeUserProps(us []packets.UserProperty) []byte {
	n := 0
	for _, u := range us {
		n += 4 + len(u.Key) + len(u.Val)
	}
	b := make([]byte, 0, n)
	for _, u := range us {
		b = binary.AppendUvarint(b, uint64(len(u.Key)))
		b = append(b, u.Key...)
		b = binary.AppendUvarint(b, uint64(len(u.Val)))
		b = append(b, u.Val...)
	}
	return b
}

func decodeUserProps(b []byte) []packets.UserProperty {
	var out []packets.UserProperty
	next := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	for len(b) > 0 {
		key, ok := next()
		if !ok {
			return out
		}
		val, ok := next()
		if !ok {
			return out
		}
		out = append(out, packets.UserProperty{Key: key, Val: val})
	}
	return out
}

// messageQoS is the QoS a message can be delivered at: its publish's
// (PropQoS) when it came from MQTT, else 1 for a durable message and 0
// for another.
func messageQoS(m *core.Message) byte {
	if q, ok := m.Properties[PropQoS].(int64); ok && q >= 0 && q <= 2 {
		return byte(q)
	}
	if m.Durable {
		return 1
	}
	return 0
}

// userProps returns the user properties an MQTT 5 subscriber gets for
// m: an MQTT publisher's as sent, else the message's string properties
// sorted by name (internal ones and PropRetain left out).
func userProps(m *core.Message) []packets.UserProperty {
	if b, ok := m.Properties[propUser].([]byte); ok {
		return decodeUserProps(b)
	}
	var out []packets.UserProperty
	for k, v := range m.Properties {
		if s, ok := v.(string); ok && !core.IsInternalProperty(k) {
			out = append(out, packets.UserProperty{Key: k, Val: s})
		}
	}
	if len(out) > 1 {
		sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	}
	return out
}

// fillPublish sets p's MQTT 5 fields from m, for delivery at now.
func fillPublish(p *publish, m *core.Message, now time.Time) {
	p.contentType = m.ContentType
	p.correlation = nil
	if m.CorrelationID != "" {
		p.correlation = []byte(m.CorrelationID)
	}
	p.responseTopic = ""
	if m.ReplyTo != "" {
		// A queue has no MQTT name but its topic, whose publishes feed
		// the queue while it exists.
		addr, _ := core.ParseDestination(m.ReplyTo)
		p.responseTopic = AddressToTopic(addr)
	}
	p.expiry = 0
	if !m.Expiration.IsZero() {
		// The time left, rounded up: never 0, which would mean none.
		left := m.Expiration.Sub(now)
		p.expiry = uint32(max(1, (left+time.Second-1)/time.Second))
	}
	p.format = m.Properties[propFormat] == true
	p.user = nil
	if len(m.Properties) > 1 || len(m.Properties) == 1 && m.Properties[PropQoS] == nil {
		p.user = userProps(m)
	}
}

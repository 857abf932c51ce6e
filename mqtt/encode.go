package mqtt

import (
	"bytes"
	"encoding/binary"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Encoding. The packets a connection sends all the time (PUBLISH and the
// acknowledgements) are appended straight to the writer's buffer by the
// functions here; the rare ones (CONNACK, SUBACK, UNSUBACK, DISCONNECT)
// are encoded by mochi's packets package. The tests decode what these
// functions write with mochi's decoders.

// appendVarint appends an MQTT Variable Byte Integer.
func appendVarint(b []byte, n int) []byte {
	for {
		c := byte(n % 128)
		n /= 128
		if n > 0 {
			c |= 0x80
		}
		b = append(b, c)
		if n == 0 {
			return b
		}
	}
}

func varintLen(n int) int {
	switch {
	case n < 128:
		return 1
	case n < 16384:
		return 2
	case n < 2097152:
		return 3
	}
	return 4
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendBinary(b []byte, p []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
	return append(b, p...)
}

// publish is what appendPublish writes: a PUBLISH to a client.
type publish struct {
	topic   string
	payload []byte
	// streamed is the length of a payload written from its file after
	// the packet's head (stream.go), instead of payload.
	streamed int64
	qos      byte
	retain   bool
	dup      bool
	id       uint16
	// MQTT 5 properties (ignored for 3.1.1).
	format        bool // payload format indicator: UTF-8
	expiry        uint32
	contentType   string
	responseTopic string
	correlation   []byte
	user          []packets.UserProperty
	subIDs        []int
}

// propsLen returns the length of p's MQTT 5 properties.
func (p *publish) propsLen() int {
	n := 0
	if p.format {
		n += 2
	}
	if p.expiry > 0 {
		n += 5
	}
	if p.contentType != "" {
		n += 3 + len(p.contentType)
	}
	if p.responseTopic != "" {
		n += 3 + len(p.responseTopic)
	}
	if len(p.correlation) > 0 {
		n += 3 + len(p.correlation)
	}
	for _, u := range p.user {
		n += 5 + len(u.Key) + len(u.Val)
	}
	for _, id := range p.subIDs {
		n += 1 + varintLen(id)
	}
	return n
}

// publishSize returns the encoded size of p for a client of version v.
func (p *publish) size(v byte) int {
	rem := p.remaining(v)
	return 1 + varintLen(rem) + rem
}

func (p *publish) remaining(v byte) int {
	rem := 2 + len(p.topic) + len(p.payload) + int(p.streamed)
	if p.qos > 0 {
		rem += 2
	}
	if v == 5 {
		pl := p.propsLen()
		rem += varintLen(pl) + pl
	}
	return rem
}

// appendPublish appends p as a PUBLISH packet for a client of version v.
func appendPublish(b []byte, p *publish, v byte) []byte {
	h := byte(packets.Publish<<4) | p.qos<<1
	if p.dup {
		h |= 0x08
	}
	if p.retain {
		h |= 0x01
	}
	b = append(b, h)
	b = appendVarint(b, p.remaining(v))
	b = appendString(b, p.topic)
	if p.qos > 0 {
		b = binary.BigEndian.AppendUint16(b, p.id)
	}
	if v == 5 {
		b = appendVarint(b, p.propsLen())
		if p.format {
			b = append(b, packets.PropPayloadFormat, 1)
		}
		if p.expiry > 0 {
			b = append(b, packets.PropMessageExpiryInterval)
			b = binary.BigEndian.AppendUint32(b, p.expiry)
		}
		if p.contentType != "" {
			b = append(b, packets.PropContentType)
			b = appendString(b, p.contentType)
		}
		if p.responseTopic != "" {
			b = append(b, packets.PropResponseTopic)
			b = appendString(b, p.responseTopic)
		}
		if len(p.correlation) > 0 {
			b = append(b, packets.PropCorrelationData)
			b = appendBinary(b, p.correlation)
		}
		for _, u := range p.user {
			b = append(b, packets.PropUser)
			b = appendString(b, u.Key)
			b = appendString(b, u.Val)
		}
		for _, id := range p.subIDs {
			b = append(b, packets.PropSubscriptionIdentifier)
			b = appendVarint(b, id)
		}
	}
	return append(b, p.payload...)
}

// appendAck appends a PUBACK, PUBREC, PUBREL or PUBCOMP for packet id
// with reason code (MQTT 5; left out when 0, as the spec allows).
func appendAck(b []byte, typ byte, id uint16, code byte, v byte) []byte {
	h := typ << 4
	if typ == packets.Pubrel {
		h |= 0x02 // [MQTT-3.6.1-1]
	}
	if v == 5 && code != 0 {
		b = append(b, h, 3)
		b = binary.BigEndian.AppendUint16(b, id)
		return append(b, code)
	}
	b = append(b, h, 2)
	return binary.BigEndian.AppendUint16(b, id)
}

// encodePacket encodes a rare packet with mochi's encoders.
func encodePacket(pk *packets.Packet) []byte {
	var buf bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connack:
		err = pk.ConnackEncode(&buf)
	case packets.Suback:
		err = pk.SubackEncode(&buf)
	case packets.Unsuback:
		err = pk.UnsubackEncode(&buf)
	case packets.Disconnect:
		err = pk.DisconnectEncode(&buf)
	case packets.Pingresp:
		err = pk.PingrespEncode(&buf)
	}
	if err != nil {
		return nil
	}
	return buf.Bytes()
}

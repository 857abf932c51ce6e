package mqtt

import (
	"errors"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/junctionmq/junction/core"
)

// refusedFull reports whether core refused a publish for want of room:
// the address is full with address-full-policy FAIL, or the store is
// over its disk limit. Core counts and logs these refusals (at most once
// a minute per queue), so the bridge does not log each one. An MQTT 5
// publisher gets reason 0x97 (quota exceeded) in its PUBACK or PUBREC; an
// MQTT 3.1.1 publisher of QoS 1 or 2 is disconnected, as the protocol has
// no negative acknowledgement [MQTT-4.8.0-1]; a QoS 0 publish is dropped
// (counted as refused), like any QoS 0 message the broker cannot take.
func refusedFull(err error) bool {
	return errors.Is(err, core.ErrAddressFull) || errors.Is(err, core.ErrDiskFull)
}

// nack answers an MQTT 5 client's QoS 1 or 2 publish with a failure
// reason, in a PUBACK or a PUBREC as its QoS needs (mochi answers a hook's
// error with a PUBACK whatever the QoS), and tells mochi to do nothing
// more with it.
func nack(cl *mochi.Client, pk packets.Packet, reason packets.Code) (packets.Packet, error) {
	typ := byte(packets.Puback)
	if pk.FixedHeader.Qos == 2 {
		typ = packets.Pubrec
	}
	cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: typ}, PacketID: pk.PacketID, ReasonCode: reason.Code})
	return pk, packets.ErrRejectPacket
}

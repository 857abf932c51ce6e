package mqtt

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/junctionmq/junction/core"
)

// Large messages. A PUBLISH whose remaining length is above the broker's
// large-message threshold is not read whole: packetReader.next returns
// its variable header (topic, packet id, properties), which decodes as a
// PUBLISH with no payload, and onPublish hands the payload, read from the
// socket as it arrives, to core.Session.ReceiveBody, which writes it to
// the body's file. A client cut off mid-payload ends the connection and
// its message is never taken or acknowledged; one refused (the disk) is
// answered once the rest of its payload has been read past.
//
// A streamed body goes out the same way: the PUBLISH's head is encoded
// with the payload's length, then the payload is written from its file
// through a buffer of core.StreamBuffer bytes (streamPayload).

// publishType is the PUBLISH packet type, the first byte's high nibble.
const publishType = packets.Publish

// maxPacket is MQTT's largest packet: a remaining length of 268435455
// after a fixed header of at most five bytes.
const maxPacket = 5 + 268435455

// maxAdvertisedPacket is the largest Maximum Packet Size a CONNACK
// states: clients check the property against the largest remaining
// length (paho for Python refuses the CONNACK otherwise), so a broker
// that takes packets of maxPacket bytes says a few bytes less.
const maxAdvertisedPacket = 268435455

// publishHead reads the variable header of a PUBLISH whose fixed header
// (hlen bytes, remaining length length) is buffered, and leaves its
// payload to be read through payload.
func (pr *packetReader) publishHead(first byte, hlen, length int) (byte, []byte, bool, error) {
	pr.r += hlen
	hdr := make([]byte, 0, 64)
	var err error
	take := func(n int) {
		if err == nil && len(hdr)+n > length {
			err = fmt.Errorf("%w: PUBLISH header longer than the packet", packets.ErrMalformedPacket)
		}
		if err != nil {
			return
		}
		at := len(hdr)
		hdr = append(hdr, make([]byte, n)...)
		err = pr.readFull(hdr[at:])
	}
	take(2)
	if err == nil {
		take(int(binary.BigEndian.Uint16(hdr)))
	}
	if (first>>1)&3 > 0 {
		take(2) // packet id
	}
	if pr.v5 {
		// The properties' length, a variable byte integer, then them.
		n, mult := 0, 1
		for i := 0; i < 4 && err == nil; i++ {
			take(1)
			if err != nil {
				break
			}
			b := hdr[len(hdr)-1]
			n += int(b&0x7f) * mult
			mult *= 128
			if b&0x80 == 0 {
				break
			}
		}
		take(n)
	}
	if err != nil {
		return 0, nil, false, err
	}
	pr.left = length - len(hdr)
	pr.perr = nil
	return first, hdr, true, nil
}

// readFull fills p from the buffer, then the connection.
func (pr *packetReader) readFull(p []byte) error {
	for len(p) > 0 {
		if pr.r < pr.w {
			n := copy(p, pr.buf[pr.r:pr.w])
			pr.r += n
			p = p[n:]
			continue
		}
		pr.release()
		n, err := pr.readConn(p, true)
		p = p[n:]
		if err != nil && len(p) > 0 {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// payload returns a reader of the streamed payload of the PUBLISH
// publishHead returned: io.EOF after its last byte, the connection's
// error (io.ErrUnexpectedEOF for an end) if it stops before.
func (pr *packetReader) payload() io.Reader { return (*payloadReader)(pr) }

type payloadReader packetReader

func (p *payloadReader) Read(b []byte) (int, error) {
	pr := (*packetReader)(p)
	if pr.perr != nil {
		return 0, pr.perr
	}
	if pr.left == 0 {
		pr.endFrame()
		return 0, io.EOF
	}
	b = b[:min(len(b), pr.left)]
	var n int
	var err error
	if pr.r < pr.w {
		n = copy(b, pr.buf[pr.r:pr.w])
		pr.r += n
	} else {
		pr.release()
		n, err = pr.readConn(b, true)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	}
	pr.left -= n
	if err != nil {
		pr.perr = err
	}
	return n, err
}

// streamPayload writes buf (a PUBLISH's head, and what came before it)
// and then the payload of m from its file (core.Message.WriteBody), all
// but its last chunk, which is left in the returned buffer for the
// writer's next write (so that Written follows it). A failure closes the
// connection: the writer's next write fails and stops it.
func (c *conn) streamPayload(buf []byte, m *core.Message) []byte {
	c.BeforeWrite()
	buf, err := m.WriteBody(buf, c.writeAll)
	if err != nil {
		c.s.log.Debug().Err(err).Str("client", c.clientID).Uint64("message", m.ID).Msg("mqtt: streaming a large payload failed")
		c.nc.Close()
		return buf[:0]
	}
	return buf
}

// writeAll writes b to the connection within the write timeout.
func (c *conn) writeAll(b []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	_, err := c.nc.Write(b)
	return err
}

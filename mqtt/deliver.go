package mqtt

import (
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/junctionmq/junction/core"
)

// Deliveries. A delivery from core reaches the connection in its
// subscription's handler, which only queues it for the writer; the
// writer's goroutine encodes it (this file: conn implements
// outbound.Encoder). A QoS 1 or 2 delivery takes a packet id and a place
// in the window of the client's Receive Maximum [MQTT-3.3.4-7]; while the
// window is full it is held, with every delivery behind it, in order,
// and the read loop kicks the writer as answers free places. On a
// durable subscription the packet id is marked in core (journaled with
// the message) before the PUBLISH leaves, so that after a reconnect or a
// restart the message goes out again under the same id [MQTT-4.4.0-1].
// A QoS 0 delivery is acknowledged in core once written.

// encoderState is the writer's own state.
type encoderState struct {
	lastAddr  string // the last address converted, and its topic
	lastTopic string
	// marks counts the marks not yet on disk; the write waits for them.
	marks    sync.WaitGroup
	markDone func(error) // made on first use
	// qos0 are the QoS 0 deliveries appended since the last write: acked
	// once written.
	qos0 []qos0Ack
}

type qos0Ack struct {
	cons *core.Consumer
	id   uint64
	upTo bool // every delivery of this consumer is QoS 0: acked cumulatively
}

// Append encodes one item (outbound.Encoder).
func (c *conn) Append(buf []byte, it outItem, held bool) ([]byte, bool) {
	if c.wclosed {
		return buf, true
	}
	switch it.kind {
	case itemRaw:
		return append(buf, it.b...), true
	case itemAck:
		return appendAck(buf, it.typ, it.id, it.code, c.version), true
	case itemClose:
		c.wclosed = true
		if len(buf) == 0 {
			c.nc.Close() // what came before is written already
		}
		return buf, true
	}
	return c.appendDelivery(buf, it, held)
}

// BeforeWrite waits for the marks of the packet ids about to leave
// (outbound.Encoder).
func (c *conn) BeforeWrite() {
	if c.enc != nil {
		c.enc.marks.Wait()
	}
}

// Written acknowledges the QoS 0 deliveries just written and returns
// their credit (outbound.Encoder).
func (c *conn) Written() {
	if c.wclosed {
		c.nc.Close()
	}
	e := c.enc
	if e == nil {
		return
	}
	for i := 0; i < len(e.qos0); {
		a := e.qos0[i]
		if !a.upTo {
			a.cons.Ack(a.id)
			a.cons.Flow(1)
			i++
			continue
		}
		// A run of one consumer's: one cumulative ack.
		j := i + 1
		for j < len(e.qos0) && e.qos0[j].cons == a.cons {
			j++
		}
		if n, err := a.cons.AckUpTo(e.qos0[j-1].id); err == nil {
			a.cons.Flow(n)
		}
		i = j
	}
	clear(e.qos0)
	e.qos0 = e.qos0[:0]
}

// settle acknowledges a delivery that is not sent (expired, or too large
// for the client) as if it had been [MQTT-3.1.2-25].
func settle(d core.Delivery) {
	d.Consumer.Ack(d.ID)
	d.Consumer.Flow(1)
}

// topicFor converts an address to a topic, remembering the last one: a
// connection's deliveries often come from one address.
func (c *conn) topicFor(addr string) string {
	e := c.enc
	if addr != e.lastAddr {
		e.lastAddr, e.lastTopic = addr, AddressToTopic(addr)
	}
	return e.lastTopic
}

// appendDelivery encodes a delivery from core or a retained message.
func (c *conn) appendDelivery(buf []byte, it outItem, held bool) ([]byte, bool) {
	if c.enc == nil {
		c.enc = &encoderState{}
	}
	var d core.Delivery
	m := it.m
	if it.kind == itemDelivery {
		d = it.d
		m = d.Message
	}
	now := time.Now()
	if m.Expired(now) {
		if it.kind == itemDelivery {
			settle(d)
		}
		return buf, true
	}
	opts := it.sub.options()
	qos := min(opts.qos(), messageQoS(m))
	var pub publish
	var subIDs [1]int
	p := &pub
	p.topic = c.topicFor(m.Address)
	p.payload = m.Body
	if m.Streamed() {
		p.streamed = m.Size() // written from its file after the head
	}
	p.qos = qos
	// A retained message sent for a new subscription has its flag set;
	// a live one has it only with retain-as-published [MQTT-3.3.1-12].
	p.retain = it.kind == itemRetained || opts.retainAsPublished() && m.Properties[PropRetain] == true
	if c.version == 5 {
		fillPublish(p, m, now)
		if id := opts.id(); id > 0 {
			subIDs[0] = id
			p.subIDs = subIDs[:]
		}
	}
	if c.maxOut > 0 && p.size(c.version) > c.maxOut {
		if it.kind == itemDelivery {
			settle(d)
		}
		return buf, true
	}
	if qos > 0 {
		c.outMu.Lock()
		if held || len(c.inflight) >= c.window {
			c.outMu.Unlock()
			return buf, false
		}
		var id uint16
		rel, marked := false, false
		if it.kind == itemDelivery && d.Mark != 0 {
			// Sent before (a reconnect, a restart): the same packet id
			// [MQTT-4.4.0-1], and DUP; PUBREL if the client had it.
			id, rel, marked = uint16(d.Mark), d.Mark&markRel != 0, true
			delete(c.reserved, id)
			p.dup = true
		} else if id = c.allocIDLocked(); id == 0 {
			c.outMu.Unlock()
			return buf, false // every id in use: wait for answers
		} else if it.kind == itemDelivery && d.Redelivered() {
			// Maybe delivered before, under an id no longer known (a
			// mark lost with a cluster's failover, another session of a
			// shared subscription): DUP tells the client it may be a
			// duplicate, which is what the flag is for.
			p.dup = true
		}
		e := &inflight{qos: qos, rel: rel}
		if it.kind == itemDelivery {
			e.cons, e.id, e.mark = d.Consumer, d.ID, it.sub.durable
		}
		if c.inflight == nil {
			c.inflight = make(map[uint16]*inflight)
		}
		c.inflight[id] = e
		c.outMu.Unlock()
		p.id = id
		if e.mark && !marked {
			c.enc.marks.Add(1)
			if err := d.Consumer.Mark(d.ID, uint32(id), c.markDone()); err != nil {
				c.enc.marks.Done()
			}
		}
		if rel {
			return appendAck(buf, packets.Pubrel, id, 0, c.version), true
		}
	}
	buf = appendPublish(buf, p, c.version)
	if p.streamed > 0 {
		buf = c.streamPayload(buf, m)
	}
	if qos == 0 && it.kind == itemDelivery {
		c.enc.qos0 = append(c.enc.qos0, qos0Ack{cons: d.Consumer, id: d.ID, upTo: !it.sub.qos1.Load()})
	}
	return buf, true
}

// markDone returns the completion of the writer's marks.
func (c *conn) markDone() func(error) {
	if c.enc.markDone == nil {
		c.enc.markDone = func(err error) {
			if err != nil {
				c.s.log.Warn().Err(err).Str("client", c.clientID).Msg("mqtt: packet id not journaled")
			}
			c.enc.marks.Done()
		}
	}
	return c.enc.markDone
}

// allocIDLocked returns a packet id in use by no delivery in flight and
// not reserved, or 0 if there is none. outMu is held.
func (c *conn) allocIDLocked() uint16 {
	for range 65535 {
		c.nextID++
		if c.nextID == 0 {
			c.nextID = 1
		}
		if _, used := c.inflight[c.nextID]; used || c.reserved[c.nextID] {
			continue
		}
		return c.nextID
	}
	return 0
}

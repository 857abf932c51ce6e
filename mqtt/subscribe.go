package mqtt

import (
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/junctionmq/junction/core"
)

// subOptions packs a subscription's options: QoS (bits 0-1), no-local
// (2), retain-as-published (3), retain handling (4-5), subscription
// identifier (8 and up). It is the value of its "f/<filter>" record.
type subOptions uint64

func makeOptions(s packets.Subscription, qos byte) subOptions {
	o := subOptions(qos) | subOptions(s.RetainHandling&3)<<4
	if s.NoLocal {
		o |= 1 << 2
	}
	if s.RetainAsPublished {
		o |= 1 << 3
	}
	return o | subOptions(s.Identifier)<<8
}

func (o subOptions) qos() byte               { return byte(o & 3) }
func (o subOptions) noLocal() bool           { return o&(1<<2) != 0 }
func (o subOptions) retainAsPublished() bool { return o&(1<<3) != 0 }
func (o subOptions) retainHandling() byte    { return byte(o>>4) & 3 }
func (o subOptions) id() int                 { return int(o >> 8) }

// subscription is one topic filter of a connection, served by a core
// consumer.
type subscription struct {
	filter  string // as the client gave it, $share/GROUP/ included
	pattern string // the core address or pattern
	shared  bool
	durable bool
	opts    atomic.Uint64 // subOptions; the writer reads them as it encodes
	// qos1 is set once the subscription has had a QoS above 0: until
	// then every delivery is QoS 0, acked cumulatively once written.
	qos1 atomic.Bool
	cons *core.Consumer
}

func (s *subscription) options() subOptions { return subOptions(s.opts.Load()) }

// onSubscribe handles SUBSCRIBE: each filter becomes (or updates) a core
// consumer; then SUBACK, then the retained messages the new
// subscriptions receive.
func (c *conn) onSubscribe(pk *packets.Packet) error {
	if code := pk.SubscribeValidate(); code != packets.CodeSuccess {
		return &protoErr{code: code, what: "SUBSCRIBE"}
	}
	codes := make([]byte, len(pk.Filters))
	var retained []outItem
	for i, f := range pk.Filters {
		code, sub, isNew, err := c.subscribe(f)
		if err != nil {
			return err
		}
		codes[i] = code
		if sub == nil || sub.shared {
			continue // retained messages are not sent to a shared subscription [MQTT-4.8.2-6]
		}
		switch rh := sub.options().retainHandling(); {
		case rh == 2, rh == 1 && !isNew:
			continue
		}
		for _, m := range c.sess.RetainedFor(sub.pattern) {
			retained = append(retained, outItem{kind: itemRetained, m: m, sub: sub})
		}
	}
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, ProtocolVersion: c.version,
		PacketID: pk.PacketID, ReasonCodes: codes}
	c.out.Push(outItem{kind: itemRaw, b: encodePacket(&ack)})
	for _, it := range retained {
		c.out.PushBounded(it)
	}
	return nil
}

// failure returns the SUBACK failure code for an MQTT 5 reason, or 0x80
// (the only one 3.1.1 has).
func (c *conn) failure(code packets.Code) byte {
	if c.version == 5 {
		return code.Code
	}
	return packets.ErrUnspecifiedError.Code
}

// subscribe handles one filter of a SUBSCRIBE. It returns the SUBACK
// code, the subscription (nil when refused) and whether it is new; an
// error is a protocol error ending the connection.
func (c *conn) subscribe(f packets.Subscription) (byte, *subscription, bool, error) {
	filter := strings.Clone(f.Filter)
	_, inner, shared := splitShared(filter)
	if c.version < 5 {
		// $share is MQTT 5's: to a 3.1.1 client it is a filter like any
		// other (one no message matches: the $ rule).
		shared = false
	}
	switch {
	case shared && !validFilter(inner),
		!shared && c.version == 5 && strings.HasPrefix(filter, "$share/"),
		!shared && !validFilter(filter):
		return c.failure(packets.ErrTopicFilterInvalid), nil, false, nil
	case shared && f.NoLocal:
		return 0, nil, false, protocolError(packets.ErrProtocolViolationInvalidSharedNoLocal, "SUBSCRIBE %q", filter) // [MQTT-3.8.3-4]
	}
	qos := min(f.Qos, byte(c.s.cfg.MaxQoS))
	opts := makeOptions(f, qos)
	if old := c.subs[filter]; old != nil {
		if old.options().noLocal() == opts.noLocal() {
			// Replaced in place: the flow of messages goes on
			// [MQTT-3.8.4-3].
			old.opts.Store(uint64(opts))
			if qos > 0 {
				old.qos1.Store(true)
			}
			if old.durable {
				c.storeOptions(filter, opts)
			}
			return qos, old, false, nil
		}
		c.unsubscribe(filter, false)
	} else if max := c.s.cfg.MaxSubscriptions; max > 0 && len(c.subs) >= max {
		return c.failure(packets.ErrQuotaExceeded), nil, false, nil
	}
	sub, err := c.subscribeCore(filter, opts)
	if err != nil {
		if errors.Is(err, core.ErrUnauthorized) {
			return c.failure(packets.ErrNotAuthorized), nil, false, nil // core has logged it
		}
		c.s.log.Warn().Err(err).Str("client", c.clientID).Str("filter", filter).Msg("mqtt: subscription refused")
		return c.failure(packets.ErrUnspecifiedError), nil, false, nil
	}
	if sub.durable {
		if err := c.storeOptions(filter, opts); err != nil {
			c.unsubscribe(filter, true)
			return c.failure(packets.ErrUnspecifiedError), nil, false, nil
		}
	}
	return qos, sub, true, nil
}

// storeOptions records a durable subscription's options (before SUBACK,
// so that a restart knows them).
func (c *conn) storeOptions(filter string, opts subOptions) error {
	ch := make(chan error, 1)
	if err := c.sess.SetClientRecord(recFilter+filter, binary.AppendUvarint(nil, uint64(opts)), func(err error) { ch <- err }); err != nil {
		return err
	}
	return <-ch
}

// subscribeCore attaches the core consumer of filter: a shared
// subscription for $share/GROUP/filter (MQTT 5), the session's durable
// subscription in a persistent session, a non-durable one otherwise.
func (c *conn) subscribeCore(filter string, opts subOptions) (*subscription, error) {
	sub := &subscription{filter: filter}
	sub.opts.Store(uint64(opts))
	sub.qos1.Store(opts.qos() > 0)
	co := core.ConsumerOptions{
		RoutingType: core.Multicast,
		Credit:      c.window,
		MaxBytes:    c.s.cfg.MaxSessionBytes,
		Handler: func(d core.Delivery) {
			c.out.PushBounded(outItem{kind: itemDelivery, d: d, sub: sub})
		},
	}
	if group, f, ok := splitShared(filter); ok && c.version == 5 {
		sub.shared = true
		sub.pattern = FilterToPattern(f)
		co.SharedSubscriptionName = group
	} else {
		sub.pattern = FilterToPattern(filter)
		co.NoLocal = opts.noLocal()
		if c.persistent {
			sub.durable = true
			co.SubscriptionName = filter
		}
	}
	co.Address = sub.pattern
	cons, err := c.sess.Subscribe(co)
	if err != nil {
		return nil, err
	}
	sub.cons = cons
	if c.subs == nil {
		c.subs = make(map[string]*subscription)
	}
	c.subs[filter] = sub
	return sub, nil
}

// onUnsubscribe handles UNSUBSCRIBE.
func (c *conn) onUnsubscribe(pk *packets.Packet) error {
	if code := pk.UnsubscribeValidate(); code != packets.CodeSuccess {
		return &protoErr{code: code, what: "UNSUBSCRIBE"}
	}
	codes := make([]byte, len(pk.Filters))
	for i, f := range pk.Filters {
		if !c.unsubscribe(f.Filter, true) {
			codes[i] = packets.CodeNoSubscriptionExisted.Code
		}
	}
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsuback}, ProtocolVersion: c.version,
		PacketID: pk.PacketID, ReasonCodes: codes}
	c.out.Push(outItem{kind: itemRaw, b: encodePacket(&ack)})
	return nil
}

// unsubscribe ends the subscription to filter, deleting a durable one
// (its messages go with it) when drop is set. Its deliveries in flight
// are still answered by the client; their answers go nowhere.
func (c *conn) unsubscribe(filter string, drop bool) bool {
	sub := c.subs[filter]
	if sub == nil {
		return false
	}
	delete(c.subs, filter)
	c.outMu.Lock()
	for _, e := range c.inflight {
		if e.cons == sub.cons {
			e.cons = nil
		}
	}
	c.outMu.Unlock()
	sub.cons.Close()
	if sub.durable && drop {
		c.sess.SetClientRecord(recFilter+filter, nil, nil)
		c.sess.Unsubscribe(filter)
	}
	return true
}

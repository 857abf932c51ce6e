package mqtt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core"
)

// Property names the bridge adds to core messages.
const (
	// PropOrigin marks a message that came from MQTT, so the bridge does
	// not hand it back to mochi, which delivered it to MQTT already.
	PropOrigin = "_JUNCTION_ORIGIN"
	// PropRetain records an MQTT publish's retain flag.
	PropRetain = "mqtt.retain"
	originMQTT = "mqtt"
)

// clientState is what the bridge keeps per MQTT connection.
type clientState struct {
	cl   *mochi.Client
	sess *core.Session

	mu    sync.Mutex
	p     *pclient // guarded by mu: set for a persistent session, or once a shared subscription needs it
	acker *acker   // guarded by mu: started by the first pipelined QoS 1 publish
	// subDenied holds the filters of the SUBSCRIBE being processed that
	// core refuses, from OnSubscribe to OnSubscribed (see OnACLCheck).
	subDenied map[string]bool // guarded by mu
}

// takeDenied forgets the refused filters of the SUBSCRIBE just
// processed, reporting whether there were any.
func (cs *clientState) takeDenied() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	had := cs.subDenied != nil
	cs.subDenied = nil
	return had
}

// ackerFor returns the connection's acker, starting it on first use.
func (cs *clientState) ackerFor(br *bridge) *acker {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.acker == nil {
		cs.acker = newAcker(br, cs.cl, br.s.cfg.ReceiveMaximum)
	}
	return cs.acker
}

// pclient returns the connection's core-served subscriptions, starting
// them on first use.
func (cs *clientState) pclient(br *bridge) *pclient {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.p == nil {
		cs.p = newPClient(br, cs.cl, cs.sess)
	}
	return cs.p
}

func (cs *clientState) close() {
	cs.mu.Lock()
	p, a := cs.p, cs.acker
	cs.mu.Unlock()
	if a != nil {
		a.close()
	}
	if p != nil {
		p.close()
	}
	cs.sess.Close()
}

// bridge is the mochi hook that carries publishes into core, and the
// core consumer that carries other protocols' messages into mochi.
type bridge struct {
	mochi.HookBase
	s   *Server
	b   *core.Broker
	log zerolog.Logger

	mu       sync.Mutex
	users    map[*mochi.Client]string       // guarded by mu: authenticated, not yet established
	sessions map[*mochi.Client]*clientState // guarded by mu
	byID     map[string]*clientState        // guarded by mu: the current connection of each client id

	// checking counts the clients with refused filters between
	// OnSubscribe and OnSubscribed: while it is 0, OnACLCheck allows
	// deliveries without looking anything up.
	checking atomic.Int32

	inject *mochi.Client  // the internal client core's messages are published as
	sess   *core.Session  // the bridge's own core session
	cons   *core.Consumer // on "#": every multicast message
	inMu   sync.Mutex
	in     []core.Delivery // guarded by inMu: delivered, not yet taken by run
	inWake chan struct{}
	expiry *time.Timer // expires sessions restored at start that nobody resumed
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

func newBridge(s *Server, b *core.Broker) (*bridge, error) {
	br := &bridge{
		s: s, b: b, log: s.cfg.Logger,
		users:    make(map[*mochi.Client]string),
		sessions: make(map[*mochi.Client]*clientState),
		byID:     make(map[string]*clientState),
		inWake:   make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	br.inject = s.mochi.NewClient(nil, "local", "junction-bridge", true)
	br.inject.Properties.ProtocolVersion = 5 // so MQTT 5 properties pass through
	sess, err := b.NewSession(core.SessionOptions{User: "mqtt-bridge"})
	if err != nil {
		return nil, err
	}
	br.sess = sess
	// The handler (called under a queue lock) only appends and wakes
	// run, which takes what has gathered at once: most of it, MQTT's own
	// publishes coming back, needs only an ack, and one wake and one
	// cumulative ack serve a burst.
	br.cons, err = sess.Subscribe(core.ConsumerOptions{
		Address: "#", RoutingType: core.Multicast, Credit: s.cfg.BridgeCredit,
		Handler: func(d core.Delivery) {
			br.inMu.Lock()
			br.in = append(br.in, d)
			br.inMu.Unlock()
			select {
			case br.inWake <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("mqtt: bridge subscription: %w", err)
	}
	br.wg.Add(1)
	go br.run()
	// Persistent sessions restored from the journal are unknown to mochi,
	// whose expiry only covers sessions it saw: give them the maximum
	// session expiry from now, then drop those not resumed.
	var restored []string
	for _, id := range b.DurableClientIDs() {
		if len(id) > len(clientIDPrefix) && id[:len(clientIDPrefix)] == clientIDPrefix {
			restored = append(restored, id[len(clientIDPrefix):])
		}
	}
	if len(restored) > 0 {
		br.expiry = time.AfterFunc(s.cfg.MaxSessionExpiry, func() {
			for _, id := range restored {
				br.mu.Lock()
				_, connected := br.byID[id]
				br.mu.Unlock()
				if !connected {
					br.discardSession(id)
				}
			}
		})
	}
	return br, nil
}

// OnClientExpired drops an expired persistent session's subscriptions and
// the messages they held.
func (br *bridge) OnClientExpired(cl *mochi.Client) {
	br.discardSession(cl.ID)
}

// discardSession deletes the durable subscriptions of MQTT client id.
func (br *bridge) discardSession(id string) {
	s, err := br.b.NewSession(core.SessionOptions{ClientID: clientIDPrefix + id})
	if err != nil {
		return // connected again meanwhile
	}
	for _, info := range s.DurableSubscriptions() {
		s.Unsubscribe(info.Name)
	}
	s.Close()
	br.log.Debug().Str("client", id).Msg("mqtt: expired persistent session dropped")
}

// ID implements mochi.Hook.
func (br *bridge) ID() string { return "junction-bridge" }

// Provides implements mochi.Hook.
func (br *bridge) Provides(b byte) bool {
	switch b {
	case mochi.OnConnectAuthenticate, mochi.OnACLCheck, mochi.OnSessionEstablished,
		mochi.OnDisconnect, mochi.OnPublish, mochi.OnSubscribed, mochi.OnUnsubscribed,
		mochi.OnPacketRead, mochi.OnPacketEncode, mochi.OnWillSent, mochi.OnClientExpired, mochi.OnSubscribe:
		return true
	}
	return false
}

// OnConnectAuthenticate checks the client's credentials with core's
// authenticator, the one every protocol uses.
func (br *bridge) OnConnectAuthenticate(cl *mochi.Client, pk packets.Packet) bool {
	user, err := br.b.AuthenticateFrom(context.Background(), cl.Net.Remote, string(pk.Connect.Username), string(pk.Connect.Password))
	if err != nil {
		br.log.Debug().Err(err).Str("client", cl.ID).Msg("mqtt authentication failed")
		return false
	}
	br.mu.Lock()
	br.users[cl] = user
	br.mu.Unlock()
	return true
}

// OnACLCheck answers mochi's checks with core's Authorizer, through the
// client's core session, so that refusals are counted and logged as
// core's own are. A publish (write) needs send on its address, and what
// auto-creating the address needs; mochi then drops a refused QoS 0
// publish, answers QoS 1 and 2 with reason 0x87 on MQTT 5 and closes the
// connection on MQTT 3.1.1 [MQTT-3.3.5-2]. A SUBSCRIBE filter is refused
// when OnSubscribe found that core would refuse its subscription (0x87,
// or 0x80 on 3.1.1). mochi also asks before each delivery to a
// subscriber it serves (not write, the message's topic; retained
// messages too): the client's user must be allowed to consume from the
// message's address, as core checks each message to its own wildcard
// subscriptions (a filter's consume was checked on its pattern, which a
// narrower setting may refuse), and mochi drops a refused message for
// this subscriber. Core caches the decision per session and address.
func (br *bridge) OnACLCheck(cl *mochi.Client, topic string, write bool) bool {
	if !br.b.Authorizing() {
		return true
	}
	if !write {
		var cs *clientState
		if br.checking.Load() != 0 {
			if cs = br.state(cl); cs != nil {
				cs.mu.Lock()
				denied := cs.subDenied[topic]
				cs.mu.Unlock()
				if denied {
					return false
				}
			}
		}
		if strings.ContainsAny(topic, "+#") || strings.HasPrefix(topic, "$") {
			return true // a filter being subscribed (checked by OnSubscribe), or $SYS
		}
		if cs == nil {
			if cs = br.state(cl); cs == nil {
				return false // no core session to authorize with: it is closing
			}
		}
		return cs.sess.Authorize(core.PermConsume, TopicToAddress(topic)) == nil
	}
	cs := br.state(cl)
	if cs == nil {
		return false // no core session to authorize with: it is closing
	}
	addr := TopicToAddress(topic)
	rt := core.Multicast
	if q := br.b.Queue(addr); q != nil && q.RoutingType() == core.Anycast {
		rt = core.Anycast // as OnPublish sends it
	}
	return cs.sess.AuthorizeSend(addr, rt) == nil
}

// OnSubscribe asks core, for each filter, whether it would allow the
// subscription the bridge or mochi would serve (consume on the pattern,
// and creating a durable, shared or non-durable subscription), and
// keeps the refused filters for OnACLCheck, which mochi calls next.
func (br *bridge) OnSubscribe(cl *mochi.Client, pk packets.Packet) packets.Packet {
	if !br.b.Authorizing() {
		return pk
	}
	cs := br.state(cl)
	if cs == nil {
		return pk
	}
	var denied map[string]bool
	for _, sub := range pk.Filters {
		err := cs.sess.AuthorizeSubscribe(subscribeOptions(cl, sub.Filter, min(sub.Qos, 2)))
		if errors.Is(err, core.ErrUnauthorized) {
			if denied == nil {
				denied = make(map[string]bool)
			}
			denied[sub.Filter] = true
		}
	}
	if denied != nil {
		cs.mu.Lock()
		had := cs.subDenied != nil
		cs.subDenied = denied
		cs.mu.Unlock()
		if !had {
			br.checking.Add(1)
		}
	}
	return pk
}

// subscribeOptions are the core options of client cl's subscription to
// filter, as the bridge serves it (shared, or a persistent session's
// durable one) or as mochi does (a non-durable subscription, in core's
// terms). Address, routing type and names only.
func subscribeOptions(cl *mochi.Client, filter string, qos byte) core.ConsumerOptions {
	o := core.ConsumerOptions{RoutingType: core.Multicast}
	if group, f, ok := splitShared(filter); ok {
		o.Address = FilterToPattern(f)
		o.SharedSubscriptionName = group
		return o
	}
	o.Address = FilterToPattern(filter)
	if persistentSession(cl) {
		o.SubscriptionName = subName(filter, qos)
	}
	return o
}

// OnSessionEstablished opens the client's core session (see openSession).
func (br *bridge) OnSessionEstablished(cl *mochi.Client, _ packets.Packet) {
	br.mu.Lock()
	user := br.users[cl]
	delete(br.users, cl)
	prev := br.byID[cl.ID]
	if prev != nil {
		// Session takeover: the previous connection of this client id
		// lets go of the core session before the new one opens it.
		delete(br.byID, cl.ID)
		delete(br.sessions, prev.cl)
	}
	br.mu.Unlock()
	if prev != nil {
		prev.close()
	}
	sess, p, err := br.openSession(cl, user)
	if err != nil {
		br.log.Warn().Err(err).Str("client", cl.ID).Msg("mqtt: no core session")
		br.s.mochi.DisconnectClient(cl, packets.ErrServerUnavailable)
		return
	}
	cs := &clientState{cl: cl, sess: sess, p: p}
	br.mu.Lock()
	br.sessions[cl] = cs
	br.byID[cl.ID] = cs
	br.mu.Unlock()
	if br.b.Authorizing() && atomic.LoadUint32(&cl.Properties.Will.Flag) == 1 {
		// mochi publishes a will without an ACL check: a will the user
		// may not send is dropped now, as a refused QoS 0 publish is.
		if sess.AuthorizeSend(TopicToAddress(cl.Properties.Will.TopicName), core.Multicast) != nil {
			atomic.StoreUint32(&cl.Properties.Will.Flag, 0)
		}
	}
}

// OnDisconnect closes the client's core session; a persistent session's
// durable subscriptions keep its messages for the next connection.
func (br *bridge) OnDisconnect(cl *mochi.Client, _ error, _ bool) {
	br.mu.Lock()
	cs := br.sessions[cl]
	delete(br.sessions, cl)
	delete(br.users, cl)
	if cs != nil && br.byID[cl.ID] == cs {
		delete(br.byID, cl.ID)
	}
	br.mu.Unlock()
	if cs != nil {
		if cs.takeDenied() {
			br.checking.Add(-1) // a SUBSCRIBE cut short
		}
		cs.close()
	}
}

func (br *bridge) state(cl *mochi.Client) *clientState {
	br.mu.Lock()
	defer br.mu.Unlock()
	return br.sessions[cl]
}

// OnSubscribed hands the subscriptions core serves to core.
func (br *bridge) OnSubscribed(cl *mochi.Client, pk packets.Packet, codes []byte) {
	if cs := br.state(cl); cs != nil {
		if cs.takeDenied() {
			br.checking.Add(-1)
		}
		br.onSubscribed(cs, pk, codes)
	}
}

// OnUnsubscribed ends core-served subscriptions (deleting a persistent
// session's durable ones).
func (br *bridge) OnUnsubscribed(cl *mochi.Client, pk packets.Packet) {
	if cs := br.state(cl); cs != nil {
		if p := cs.current(); p != nil {
			for _, f := range pk.Filters {
				p.unsubscribe(f.Filter)
			}
		}
	}
}

// OnPacketRead watches for the PUBACKs of core-served deliveries.
func (br *bridge) OnPacketRead(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Type == packets.Puback {
		if cs := br.state(cl); cs != nil {
			if p := cs.current(); p != nil {
				p.acked(pk.PacketID)
			}
		}
	}
	return pk, nil
}

// current returns the connection's pclient, or nil if none started.
func (cs *clientState) current() *pclient {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.p
}

// OnPublish sends an MQTT publish into core before mochi acknowledges it
// (QoS 1 and 2 wait for the journal when the message reaches a durable
// queue) and lets mochi deliver it to MQTT subscribers itself.
func (br *bridge) OnPublish(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || len(pk.TopicName) > 0 && pk.TopicName[0] == '$' {
		return pk, nil // the bridge's own injection, or $SYS
	}
	cs := br.state(cl)
	if cs == nil {
		return pk, nil
	}
	sess := cs.sess
	m := messageFromPublish(pk)
	if q := br.b.Queue(m.Address); q != nil && q.RoutingType() == core.Anycast {
		m.RoutingType = core.Anycast // a device feeding a work queue
	}
	if pk.FixedHeader.Qos == 1 && !pk.FixedHeader.Retain && !pk.FixedHeader.Dup && !noLocal(cl) {
		// Pipelined: route now and PUBACK when core confirms, so that a
		// publisher with many messages in flight shares the journal's
		// syncs. mochi is told to drop the packet (no PUBACK of its own)
		// and gets it back from the bridge's internal client for its
		// subscribers.
		a := cs.ackerFor(br)
		slot := a.reserve(pk.PacketID)
		if slot == nil {
			return pk, packets.ErrRejectPacket // closing
		}
		// MQTT subscribers first, so that none can subscribe after the
		// PUBACK and still be handed this message. mochi copies the packet
		// for each subscriber; the payload is shared with m read-only.
		local := pk
		local.Properties = pk.Properties.Copy(false) // as Packet.Copy: no topic alias, subscription ids
		local.FixedHeader.Dup = false
		local.PacketID = 1 // mochi checks that a QoS 1 publish has one; the inline client never acks
		if err := br.s.mochi.InjectPacket(br.inject, local); err != nil {
			br.log.Warn().Err(err).Str("client", cl.ID).Msg("mqtt: delivery to MQTT subscribers failed")
		}
		sess.SendAsync(m, func(err error) { a.complete(slot, err) })
		return handled(pk), nil
	}
	err := sess.Send(context.Background(), m)
	if err == nil && pk.FixedHeader.Retain {
		// mochi keeps the retained message for its subscribers; core's
		// copy is journaled so that it survives a restart.
		err = br.b.Retain(m)
	}
	if err != nil {
		denied := errors.Is(err, core.ErrUnauthorized) // core has logged it
		full := refusedFull(err)                       // and counted these (refusal.go)
		if !denied && !full {
			br.log.Warn().Err(err).Str("client", cl.ID).Str("topic", pk.TopicName).Msg("mqtt publish not accepted")
		}
		switch {
		case denied && pk.FixedHeader.Qos == 0:
			return pk, packets.ErrRejectPacket // dropped, as OnACLCheck's refusals are
		case full && pk.FixedHeader.Qos == 0:
			return pk, packets.ErrRejectPacket // dropped, counted as refused
		case full && cl.Properties.ProtocolVersion == 5:
			return nack(cl, pk, packets.ErrQuotaExceeded) // PUBACK/PUBREC with reason 0x97
		case denied && cl.Properties.ProtocolVersion == 5:
			return nack(cl, pk, packets.ErrNotAuthorized) // PUBACK/PUBREC with reason 0x87
		case cl.Properties.ProtocolVersion == 5 && pk.FixedHeader.Qos > 0:
			return pk, packets.ErrUnspecifiedError // PUBACK/PUBREC with reason 0x80
		}
		// MQTT 3 has no negative acknowledgement: close the connection
		// rather than confirm what was not stored [MQTT-4.8.0-1].
		br.s.mochi.DisconnectClient(cl, packets.ErrUnspecifiedError)
		return pk, packets.ErrRejectPacket
	}
	return pk, nil
}

// handled returns pk marked so that mochi neither acknowledges it nor
// delivers it: the bridge has done both. (Rejecting it with
// ErrRejectPacket would do the same, but mochi logs each rejection at
// debug level, boxing the whole packet whether or not the level is on:
// an allocation the size of the packet for every pipelined publish.)
func handled(pk packets.Packet) packets.Packet {
	pk.FixedHeader.Qos = 0 // mochi acks only QoS > 0
	pk.Ignore = true       // and forwards nothing marked Ignore
	return pk
}

// noLocal reports whether an MQTT 5 client has a subscription with the
// no-local option: its publishes must then keep their origin, which the
// pipelined path (re-published by the bridge's client) would lose.
func noLocal(cl *mochi.Client) bool {
	if cl.Properties.ProtocolVersion < 5 {
		return false
	}
	for _, sub := range cl.State.Subscriptions.GetAll() {
		if sub.NoLocal {
			return true
		}
	}
	return false
}

// PropQoS records the QoS of the publish a message came from, under the
// name ActiveMQ gives it, so that a STOMP or AMQP consumer can tell QoS 1
// from QoS 2.
const PropQoS = "ActiveMQ.MQTT.QoS"

// baseProperties are the properties of most MQTT messages, one map per
// QoS shared by them: core never changes a message's properties (a copy
// for a dead-letter address gets a map of its own).
var baseProperties = [3]map[string]any{
	{PropOrigin: originMQTT, PropQoS: int64(0)},
	{PropOrigin: originMQTT, PropQoS: int64(1)},
	{PropOrigin: originMQTT, PropQoS: int64(2)},
}

// messageFromPublish maps a PUBLISH to a core message (see the package
// doc for the table).
//
// The body is the packet's payload, not a copy: mochi v2.7.9 decodes
// every packet it reads from a fresh copy of its bytes (Client.ReadPacket)
// and copies the packet again for each subscriber it delivers to, so
// nothing writes to the payload afterwards.
func messageFromPublish(pk packets.Packet) *core.Message {
	m := &core.Message{
		Address:       TopicToAddress(pk.TopicName),
		RoutingType:   core.Multicast,
		Durable:       pk.FixedHeader.Qos > 0,
		Priority:      core.DefaultPriority,
		Body:          pk.Payload,
		ContentType:   pk.Properties.ContentType,
		CorrelationID: string(pk.Properties.CorrelationData),
		Properties:    baseProperties[min(pk.FixedHeader.Qos, 2)],
	}
	if pk.FixedHeader.Retain || len(pk.Properties.User) > 0 {
		m.Properties = map[string]any{PropOrigin: originMQTT, PropQoS: int64(pk.FixedHeader.Qos)}
	}
	if pk.Properties.ResponseTopic != "" {
		m.ReplyTo = core.FormatDestination(TopicToAddress(pk.Properties.ResponseTopic), core.Multicast)
	}
	if e := pk.Properties.MessageExpiryInterval; e > 0 {
		m.Expiration = time.Now().Add(time.Duration(e) * time.Second)
	}
	if pk.FixedHeader.Retain {
		m.Properties[PropRetain] = true
	}
	for _, u := range pk.Properties.User {
		if _, taken := m.Properties[u.Key]; !taken {
			m.Properties[u.Key] = u.Val // MQTT allows repeats; the first wins, as in STOMP
		}
	}
	return m
}

// publishFromMessage maps a core message to the PUBLISH injected into
// mochi: QoS 1 for a durable message (mochi caps it to each
// subscription's QoS), else 0.
func publishFromMessage(m *core.Message, now time.Time) packets.Packet {
	var qos byte
	if m.Durable {
		qos = 1
	}
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos},
		TopicName:   AddressToTopic(m.Address),
		Payload:     m.Body,
		PacketID:    uint16(qos), // mochi checks inline publishes for a packet id
	}
	pk.Properties.ContentType = m.ContentType
	if m.CorrelationID != "" {
		pk.Properties.CorrelationData = []byte(m.CorrelationID)
	}
	if m.ReplyTo != "" {
		// A queue has no MQTT name but its topic, whose publishes feed
		// the queue while it exists.
		addr, _ := core.ParseDestination(m.ReplyTo)
		pk.Properties.ResponseTopic = AddressToTopic(addr)
	}
	if !m.Expiration.IsZero() {
		pk.Properties.MessageExpiryInterval = uint32(max(1, m.Expiration.Sub(now)/time.Second))
	}
	for k, v := range m.Properties {
		if s, ok := v.(string); ok && !core.IsInternalProperty(k) {
			pk.Properties.User = append(pk.Properties.User, packets.UserProperty{Key: k, Val: s})
		}
	}
	return pk
}

// run injects core's multicast messages into mochi, then acks them and
// returns the credit. Messages of MQTT origin were delivered by mochi
// already and are only acked.
func (br *bridge) run() {
	defer br.wg.Done()
	var batch []core.Delivery
	for {
		select {
		case <-br.done:
			return
		case <-br.inWake:
		}
		br.inMu.Lock()
		batch, br.in = br.in, batch[:0]
		br.inMu.Unlock()
		if len(batch) == 0 {
			continue
		}
		now := time.Now()
		for _, d := range batch {
			m := d.Message
			if m.Properties[PropOrigin] != originMQTT && !m.Expired(now) {
				if err := br.s.mochi.InjectPacket(br.inject, publishFromMessage(m, now)); err != nil {
					br.log.Warn().Err(err).Str("address", m.Address).Msg("mqtt: delivery to MQTT subscribers failed")
				}
			}
		}
		// Every delivery up to the last is done with: one cumulative ack.
		if _, err := br.cons.AckUpTo(batch[len(batch)-1].ID); err != nil && !errors.Is(err, core.ErrUnknownDelivery) {
			br.log.Warn().Err(err).Msg("mqtt: bridge ack failed")
		}
		br.cons.Flow(len(batch))
		clear(batch)
	}
}

// close stops the bridge goroutine and its core session.
func (br *bridge) close() {
	br.once.Do(func() {
		if br.expiry != nil {
			br.expiry.Stop()
		}
		close(br.done)
		br.wg.Wait()
		br.sess.Close()
	})
}

// OnWillSent passes a will that mochi has just published to its MQTT
// subscribers on to core, for the other protocols' subscribers.
func (br *bridge) OnWillSent(cl *mochi.Client, pk packets.Packet) {
	if len(pk.TopicName) > 0 && pk.TopicName[0] == '$' {
		return
	}
	m := messageFromPublish(pk)
	if err := br.sess.Send(context.Background(), m); err != nil {
		br.log.Warn().Err(err).Str("client", cl.ID).Msg("mqtt: will not passed to core")
	}
}

// OnPacketEncode keeps user properties on PUBLISH packets for clients
// that set Request Problem Information to 0: mochi v2.7.9 then strips
// them from every packet, but [MQTT-3.1.2-29] exempts PUBLISH (as well as
// CONNACK and DISCONNECT), whose user properties are the message's own.
func (br *bridge) OnPacketEncode(_ *mochi.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Publish {
		pk.Mods.DisallowProblemInfo = false
	}
	return pk
}

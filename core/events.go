package core

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Broker events: what happens to the broker (connections, consumers,
// addresses, queues, messages dead-lettered, expired or dropped, slow
// consumers, full addresses, failed logins), published as non-durable
// messages to a multicast notification address, as Artemis's management
// notifications and ActiveMQ's advisories are, so that any client of any
// protocol subscribes to them (with selectors on their properties).
//
// Off the send path: the code that notices an event only offers it to a
// bounded channel without waiting (emit); a full channel drops the event
// and counts it. One goroutine takes events from the channel and routes
// them, so a flood of events costs messaging a failed channel send each.
// Events about the notification address and the advisory topics
// themselves are never emitted: a subscriber cannot make a loop.
//
// In a cluster (package cluster) each node's access broker publishes
// its own events (connections, consumers, failed logins) and those of
// the group brokers of the groups the node leads (addresses, queues,
// messages dead-lettered, expired or dropped, slow consumers, full
// addresses), which hand them over (Config.EventsTo, ForwardEvent)
// instead of publishing them: a group broker's connection and consumer
// events are dropped, since they are the access brokers' sessions and
// consumers seen again. The access broker sends each event through an
// internal session, as a client's non-durable multicast send, to the
// notification address's group, whose subscribers, on every node, get
// every node's events; each says its node (PropEventNode). The same
// bounded buffer takes every event of the node, so a flood of them
// costs messaging a failed channel send each, there too.

// EventsConfig configures broker events. The zero value publishes none.
type EventsConfig struct {
	// Enabled publishes events.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// Address is the multicast notification address; empty means
	// DefaultNotificationAddress.
	Address string `yaml:"address" json:"address"`
	// Advisory also publishes each event ActiveMQ has an advisory for
	// to that advisory topic (ActiveMQ.Advisory.*).
	Advisory bool `yaml:"advisory" json:"advisory"`
	// Buffer bounds the events waiting to be published; past it they are
	// dropped and counted. Zero means DefaultEventBuffer.
	Buffer int `yaml:"buffer" json:"buffer"`
}

// DefaultNotificationAddress is Artemis's notification address.
const DefaultNotificationAddress = "activemq.notifications"

// DefaultEventBuffer is the default bound on events waiting.
const DefaultEventBuffer = 10000

// AdvisoryPrefix begins ActiveMQ's advisory topics.
const AdvisoryPrefix = "ActiveMQ.Advisory."

// recentEvents is how many events RecentEvents keeps.
const recentEvents = 500

// The event types, Artemis's notification type names.
const (
	EventConnectionCreated   = "CONNECTION_CREATED"
	EventConnectionDestroyed = "CONNECTION_DESTROYED"
	EventConsumerCreated     = "CONSUMER_CREATED"
	EventConsumerClosed      = "CONSUMER_CLOSED"
	EventAddressAdded        = "ADDRESS_ADDED"
	EventAddressRemoved      = "ADDRESS_REMOVED"
	EventBindingAdded        = "BINDING_ADDED"
	EventBindingRemoved      = "BINDING_REMOVED"
	EventMessageExpired      = "MESSAGE_EXPIRED"
	EventMessageDeadLettered = "MESSAGE_DEAD_LETTERED"
	EventMessageDropped      = "MESSAGE_DROPPED"
	EventConsumerSlow        = "CONSUMER_SLOW"
	EventAddressFull         = "ADDRESS_FULL"
	EventAuthFailure         = "SECURITY_AUTHENTICATION_VIOLATION"
)

// The properties of an event message (Artemis's names).
const (
	PropNotifType      = "_AMQ_NotifType"
	PropNotifTimestamp = "_AMQ_NotifTimestamp"
	PropEventAddress   = "_AMQ_Address"
	PropRoutingName    = "_AMQ_RoutingName"
	PropEventUser      = "_AMQ_User"
	PropRemoteAddress  = "_AMQ_RemoteAddress"
	PropClientID       = "_AMQ_ClientID"
	PropProtocol       = "_AMQ_Protocol"
	PropConnectionID   = "_AMQ_ConnectionID"
	PropFilterString   = "_AMQ_FilterString"
	PropConsumerCount  = "_AMQ_ConsumerCount"
	// PropEventCount is Junction's: the messages a coalesced
	// MESSAGE_DROPPED event stands for.
	PropEventCount = "_AMQ_Count"
	// PropEventNode is Junction's: in a cluster, the id of the node whose
	// broker the event happened on (a string, as Artemis's node ids are).
	PropEventNode = "_AMQ_NodeID"
)

// Event is one broker event. Empty fields do not apply to its type.
type Event struct {
	Type          string    `json:"type"`
	Time          time.Time `json:"time"`
	Address       string    `json:"address,omitempty"`
	Queue         string    `json:"queue,omitempty"`
	User          string    `json:"user,omitempty"`
	RemoteAddr    string    `json:"remoteAddress,omitempty"`
	ClientID      string    `json:"clientId,omitempty"`
	Protocol      string    `json:"protocol,omitempty"`
	ConnectionID  uint64    `json:"connectionId,omitempty"`
	Filter        string    `json:"filter,omitempty"`
	ConsumerCount int64     `json:"consumerCount,omitempty"`
	Reason        string    `json:"reason,omitempty"`
	// Count is how many messages a MESSAGE_DROPPED event stands for:
	// the queue's drops since its previous one (at most
	// dropEventsPerSecond events per queue).
	Count int64 `json:"count,omitempty"`
	// Multicast says the address of a consumer or queue event takes
	// multicast sends (an ActiveMQ topic), for the advisory's name.
	Multicast bool `json:"-"`
	// Node is, in a cluster, the node the event happened on.
	Node string `json:"node,omitempty"`
	// countless: ConsumerCount is not known here (the consumer of a
	// cluster's mirror queue: the queue and its count are its group's).
	countless bool
}

// EventCluster is implemented by a Cluster whose access broker names
// its node in the events it publishes (PropEventNode).
type EventCluster interface {
	NodeName() string
}

// EventStats counts events.
type EventStats struct {
	Published, Dropped uint64
}

// events is the broker's event publisher; nil when events are off.
type events struct {
	cfg EventsConfig
	ch  chan Event

	// forward, on a cluster's group broker, takes the events instead
	// of ch (Config.EventsTo).
	forward func(Event)
	// On a cluster's access broker: the node's name, and the internal
	// session the events are sent through.
	node string
	sess *Session

	published, dropped atomic.Uint64

	drops sync.Map // *Queue → *dropWindow: MESSAGE_DROPPED per queue, coalesced

	mu       sync.Mutex
	recent   []Event              // ring of the last recentEvents
	next     int                  // where the next goes in recent
	fullSeen map[string]time.Time // ADDRESS_FULL per queue, at most once a second
}

// dropEventInterval is the least time between two MESSAGE_DROPPED
// events of one queue: a queue dropping under load (DROP, one per
// message) emits at most ten a second, each counting the drops since the
// previous one, so that the flood is not one event per message.
const dropEventInterval = 100 * time.Millisecond

// dropWindow coalesces one queue's MESSAGE_DROPPED events.
type dropWindow struct {
	last atomic.Int64 // unix nanos of the last event
	n    atomic.Int64 // drops since
}

// startEvents creates the notification address (on a single broker)
// and the publisher, after recovery (b.ev is nil until then: recovered
// queues are not news); a cluster's group broker gets no publisher
// (Config.EventsTo), and an access broker one that sends through an
// internal session.
func (b *Broker) startEvents(cfg EventsConfig) {
	if !cfg.Enabled {
		return
	}
	if cfg.Address == "" {
		cfg.Address = DefaultNotificationAddress
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultEventBuffer
	}
	ev := &events{cfg: cfg, fullSeen: make(map[string]time.Time)}
	switch {
	case b.cfg.EventsTo != nil:
		// A group broker: its node's access broker publishes.
		ev.forward = b.cfg.EventsTo
		b.ev.Store(ev)
		return
	case b.cluster != nil:
		// An access broker: the notification address is its group's.
		s, err := b.NewSession(SessionOptions{})
		if err != nil {
			b.log.Error().Err(err).Msg("broker events not published: no session to send them")
			return
		}
		ev.sess = s
		if nc, ok := b.cluster.(EventCluster); ok {
			ev.node = nc.NodeName()
		}
	default:
		b.mu.Lock()
		a := b.addressLocked(cfg.Address, false)
		b.addRoutingLocked(a, Multicast)
		b.mu.Unlock()
	}
	ev.ch = make(chan Event, cfg.Buffer)
	b.ev.Store(ev)
	b.wg.Add(1)
	go b.publishEvents(ev)
}

// EventStats returns the counts of events published and dropped.
func (b *Broker) EventStats() EventStats {
	ev := b.ev.Load()
	if ev == nil {
		return EventStats{}
	}
	return EventStats{Published: ev.published.Load(), Dropped: ev.dropped.Load()}
}

// EventsEnabled reports whether events are published, and where.
func (b *Broker) EventsEnabled() (address string, ok bool) {
	ev := b.ev.Load()
	if ev == nil {
		return "", false
	}
	return ev.cfg.Address, true
}

// RecentEvents returns the last events published (at most 500), the
// newest last.
func (b *Broker) RecentEvents() []Event {
	ev := b.ev.Load()
	if ev == nil {
		return nil
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	out := make([]Event, 0, len(ev.recent))
	if len(ev.recent) == recentEvents {
		out = append(out, ev.recent[ev.next:]...)
		return append(out, ev.recent[:ev.next]...)
	}
	return append(out, ev.recent...)
}

// about reports whether an event about address would be about the
// notifications themselves.
func (ev *events) about(address string) bool {
	return address == ev.cfg.Address || strings.HasPrefix(address, AdvisoryPrefix)
}

// ForwardEvent publishes e, an event of another broker of this process
// (a cluster's group broker, Config.EventsTo), as one of this broker's
// own: without waiting, dropped and counted when the buffer is full.
func (b *Broker) ForwardEvent(e Event) { b.emit(e) }

// emit offers e to the publisher without waiting; callable with any lock
// held. A full buffer drops e, counted.
func (b *Broker) emit(e Event) {
	ev := b.ev.Load()
	if ev == nil || (e.Address != "" && ev.about(e.Address)) {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if ev.forward != nil {
		switch e.Type {
		case EventConnectionCreated, EventConnectionDestroyed, EventConsumerCreated, EventConsumerClosed:
			// The access brokers' sessions and consumers, seen again
			// upstream: their own events say it.
		default:
			ev.forward(e)
		}
		return
	}
	select {
	case ev.ch <- e:
	default:
		ev.dropped.Add(1)
	}
}

// emitSession emits a connection event for a client's session.
func (b *Broker) emitSession(typ string, s *Session) {
	if b.ev.Load() == nil || s.opts.Protocol == "" {
		return
	}
	b.emit(Event{Type: typ, User: s.opts.User, RemoteAddr: s.opts.RemoteAddr, ClientID: s.opts.ClientID,
		Protocol: s.opts.Protocol, ConnectionID: s.id})
}

// emitConsumer emits a consumer event for a client's consumer of q.
func (b *Broker) emitConsumer(typ string, c *Consumer, q *Queue) {
	if b.ev.Load() == nil || c.s.opts.Protocol == "" {
		return
	}
	s := c.s
	e := Event{Type: typ, Address: q.address, Queue: q.name, User: s.opts.User, RemoteAddr: s.opts.RemoteAddr,
		ClientID: s.opts.ClientID, Protocol: s.opts.Protocol, ConnectionID: s.id,
		ConsumerCount: q.stats.consumers.Load(), Multicast: q.routing == Multicast}
	switch {
	case q.up != nil:
		// A mirror (cluster.go): the queue is its group's.
		e.Queue, e.Filter, e.ConsumerCount, e.countless = c.ev.queue, c.ev.filter, 0, true
	case c.sel != nil:
		e.Filter = c.sel.String()
	case q.filter != nil:
		e.Filter = q.filter.String()
	}
	b.emit(e)
}

// mirrorEvent is what the events of a mirror's consumer say of the
// queue it reads, which lives in a group: its name when the consumer's
// options tell it (a queue, an anycast address, a durable subscription),
// and the consumer's selector.
type mirrorEvent struct{ queue, filter string }

func mirrorEventOf(o ConsumerOptions, clientID string) mirrorEvent {
	e := mirrorEvent{queue: o.Queue, filter: strings.TrimSpace(o.Selector)}
	switch {
	case e.queue != "":
	case o.RoutingType == Anycast:
		e.queue = o.Address
	case o.SubscriptionName != "" && clientID != "":
		e.queue = durableName(clientID, o.SubscriptionName)
	}
	return e
}

// emitQueue emits a queue event (BINDING_ADDED, BINDING_REMOVED,
// CONSUMER_SLOW) about q.
func (b *Broker) emitQueue(typ string, q *Queue, reason string) {
	ev := b.ev.Load()
	if ev == nil {
		return
	}
	if typ == EventBindingRemoved {
		ev.drops.Delete(q)
	}
	b.emit(Event{Type: typ, Address: q.address, Queue: q.name, Reason: reason, Multicast: q.routing == Multicast,
		ConsumerCount: q.stats.consumers.Load()})
}

// emitDrop emits the event of a message q did not take, or of a send it
// refused or held back (full: ADDRESS_FULL, at most once a second per
// queue).
func (b *Broker) emitDrop(q *Queue, m *Message, s *Session, full bool, reason string) {
	ev := b.ev.Load()
	if ev == nil || ev.about(m.Address) || ev.about(q.address) {
		return
	}
	typ := EventMessageDropped
	var count int64
	if !full {
		w, _ := ev.drops.Load(q)
		if w == nil {
			w, _ = ev.drops.LoadOrStore(q, &dropWindow{})
		}
		dw := w.(*dropWindow)
		dw.n.Add(1)
		now := time.Now().UnixNano()
		l := dw.last.Load()
		if now-l < int64(dropEventInterval) || !dw.last.CompareAndSwap(l, now) {
			return
		}
		count = dw.n.Swap(0)
	}
	if full {
		typ = EventAddressFull
		now := time.Now()
		ev.mu.Lock()
		last, seen := ev.fullSeen[q.name]
		if seen && now.Sub(last) < time.Second {
			ev.mu.Unlock()
			return
		}
		if len(ev.fullSeen) > 10000 {
			clear(ev.fullSeen)
		}
		ev.fullSeen[q.name] = now
		ev.mu.Unlock()
	}
	e := Event{Type: typ, Address: m.Address, Queue: q.name, Reason: reason, Multicast: q.routing == Multicast, Count: count}
	if s != nil {
		e.User, e.RemoteAddr, e.ClientID, e.Protocol, e.ConnectionID = s.opts.User, s.opts.RemoteAddr, s.opts.ClientID, s.opts.Protocol, s.id
	}
	b.emit(e)
}

// publishEvents routes the events until the broker closes.
func (b *Broker) publishEvents(ev *events) {
	defer b.wg.Done()
	if ev.sess != nil {
		defer ev.sess.Close()
	}
	for {
		select {
		case <-b.done:
			return
		case e := <-ev.ch:
			select {
			case <-b.done:
				// Closing: a cluster send may wait for its group's
				// leader, so none is begun.
				return
			default:
			}
			if ev.node != "" {
				e.Node = ev.node
			}
			ev.mu.Lock()
			if len(ev.recent) < recentEvents {
				ev.recent = append(ev.recent, e)
			} else {
				ev.recent[ev.next] = e
				ev.next = (ev.next + 1) % recentEvents
			}
			ev.mu.Unlock()
			b.publishEvent(ev, e, ev.cfg.Address)
			if ev.cfg.Advisory {
				if topic := advisoryTopic(e); topic != "" {
					b.publishEvent(ev, e, topic)
				}
			}
			ev.published.Add(1)
		}
	}
}

// publishEvent sends e as a non-durable multicast message to address.
// When nobody would receive it (see unheard), the message is not made:
// the event counts as routed to nobody, as its send would have.
func (b *Broker) publishEvent(ev *events, e Event, address string) {
	if address != ev.cfg.Address {
		if validAddress(address) != nil {
			return // refused by prepare: nothing made
		}
		// An advisory topic is made on first use, whatever the address
		// settings say about auto-creating.
		b.mu.RLock()
		a := b.addresses[address]
		made := a != nil && a.isMulti
		b.mu.RUnlock()
		if !made {
			b.mu.Lock()
			if !b.closed {
				a := b.addressLocked(address, true)
				b.addRoutingLocked(a, Multicast)
			}
			b.mu.Unlock()
		}
	}
	if b.unheard(address) {
		return
	}
	body, _ := json.Marshal(e)
	p := map[string]any{
		PropNotifType:      e.Type,
		PropNotifTimestamp: e.Time.UnixMilli(),
	}
	for k, v := range map[string]string{
		PropEventAddress: e.Address, PropRoutingName: e.Queue, PropEventUser: e.User,
		PropRemoteAddress: e.RemoteAddr, PropClientID: e.ClientID, PropProtocol: e.Protocol,
		PropFilterString: e.Filter, PropReason: e.Reason,
	} {
		if v != "" {
			p[k] = v
		}
	}
	if e.ConnectionID != 0 {
		p[PropConnectionID] = int64(e.ConnectionID)
	}
	if e.Count != 0 {
		p[PropEventCount] = e.Count
	}
	if e.Node != "" {
		p[PropEventNode] = e.Node
	}
	switch e.Type {
	case EventConsumerCreated, EventConsumerClosed, EventBindingAdded, EventBindingRemoved, EventConsumerSlow:
		if !e.countless {
			p[PropConsumerCount] = e.ConsumerCount
		}
	}
	m := &Message{Address: address, RoutingType: Multicast, Properties: p, Body: body, ContentType: "application/json",
		Priority: DefaultPriority}
	if ev.sess != nil {
		// A cluster's access broker: a non-durable send to the address's
		// group, as a client's (an advisory topic is made there as any
		// address is, by auto-creation). Nothing waits for it.
		if err := ev.sess.send(context.Background(), m, nil); err != nil {
			b.log.Debug().Err(err).Str("address", address).Str("event", e.Type).Msg("event not published")
		}
		return
	}
	now := time.Now()
	if err := b.prepare(m, "", now); err != nil {
		return
	}
	if _, err := b.route(m, now, nil); err != nil {
		b.log.Debug().Err(err).Str("address", address).Str("event", e.Type).Msg("event not published")
	}
}

// unheard reports whether an event sent to address, an existing
// multicast address, would reach no queue: no divert may take it, and no
// subscription is bound to the address or matches it with wildcards. It
// then counts the send unrouted, as routing the event would have, so
// that an event nobody listens to costs no encoding and no routing (two
// per connection: opened, closed). A subscriber whose selector refuses
// the event is a listener here: routing decides.
func (b *Broker) unheard(address string) bool {
	if b.diverts.Load() != nil {
		return false
	}
	b.mu.RLock()
	a := b.addresses[address]
	ok := a != nil && a.isMulti && !b.closed
	b.mu.RUnlock()
	if !ok || len(b.multicastRoutes(a)) > 0 {
		return false
	}
	a.unrouted.Add(1)
	return true
}

// advisoryTopic names the ActiveMQ advisory topic of e, or "" when
// ActiveMQ has none for it.
func advisoryTopic(e Event) string {
	kind := "Queue."
	if e.Multicast {
		kind = "Topic."
	}
	switch e.Type {
	case EventConnectionCreated, EventConnectionDestroyed:
		return AdvisoryPrefix + "Connection"
	case EventConsumerCreated, EventConsumerClosed:
		return AdvisoryPrefix + "Consumer." + kind + e.Address
	case EventBindingAdded, EventBindingRemoved:
		if e.Multicast {
			return AdvisoryPrefix + "Topic"
		}
		return AdvisoryPrefix + "Queue"
	case EventMessageExpired:
		return AdvisoryPrefix + "Expired." + kind + e.Address
	case EventMessageDeadLettered:
		return AdvisoryPrefix + "MessageDLQd." + kind + e.Address
	case EventMessageDropped:
		return AdvisoryPrefix + "MessageDiscarded." + kind + e.Address
	case EventConsumerSlow:
		return AdvisoryPrefix + "SlowConsumer." + kind + e.Address
	case EventAddressFull:
		return AdvisoryPrefix + "FULL." + kind + e.Address
	}
	return ""
}

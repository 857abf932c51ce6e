package core

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// RoutingType says how an address hands a message to its queues.
type RoutingType uint8

const (
	// RoutingDefault means "whatever the address settings say" on a send,
	// and is never stored on an address.
	RoutingDefault RoutingType = iota
	// Anycast delivers each message to one consumer of the address's queue
	// (point-to-point; competing consumers).
	Anycast
	// Multicast delivers each message to every subscription of the address
	// (publish/subscribe).
	Multicast
	// QueueElseTopic is anycast when the address has a queue at the
	// moment the message is routed, else multicast: an MQTT publish,
	// which may feed a work queue or a topic, says nothing else. Routing
	// decides it where the address lives (in a cluster, on the group's
	// leader), so no lookup from the sending node, which can fail or be
	// stale during a failover, sends a message to no one.
	QueueElseTopic
)

// String returns "anycast", "multicast" or "default".
func (r RoutingType) String() string {
	switch r {
	case Anycast:
		return "anycast"
	case Multicast:
		return "multicast"
	case QueueElseTopic:
		return "queue-else-topic"
	}
	return "default"
}

// ParseRoutingType parses "anycast" or "multicast" (and "" as RoutingDefault).
func ParseRoutingType(s string) (RoutingType, error) {
	switch s {
	case "anycast", "ANYCAST":
		return Anycast, nil
	case "multicast", "MULTICAST":
		return Multicast, nil
	case "":
		return RoutingDefault, nil
	}
	return RoutingDefault, fmt.Errorf("core: unknown routing type %q", s)
}

// DefaultPriority is the priority of a message that does not ask for one,
// as in JMS.
const DefaultPriority = 4

// MaxPriority is the highest priority; 0 is the lowest.
const MaxPriority = 9

// Message is the protocol-neutral message. A front-end fills it once from
// its frame and hands it to [Session.Send]; from then on it is immutable and
// shared: a multicast message is referenced by every subscription that
// receives it, never copied, so neither core nor a front-end may change a
// sent Message or its Body or Properties.
//
// The per-queue delivery state (delivery count, redelivered flag) lives on
// the queue's reference to the message and is reported in [Delivery].
type Message struct {
	// ID is assigned by the broker on Send; zero before.
	ID uint64
	// Address the message was sent to (no protocol prefix).
	Address string
	// RoutingType chosen by the sender; RoutingDefault lets the address
	// settings decide. Set to the effective type on Send.
	RoutingType RoutingType
	// Durable messages survive a restart when they reach a durable queue.
	Durable bool
	// Priority from 0 (lowest) to 9; higher priorities are delivered first.
	Priority uint8
	// Timestamp is when the message was sent; the broker sets it on Send
	// when zero.
	Timestamp time.Time
	// Expiration is the instant after which the message is not delivered
	// but moved to the expiry address; zero means never.
	Expiration time.Time
	// DeliveryTime, when in the future, holds the message back until then
	// (scheduled delivery).
	DeliveryTime time.Time
	// Properties are application properties. Values are string, int64,
	// float64, bool, []byte or nil; see [ValidateProperties].
	Properties map[string]any
	// Body is the payload, owned by the message once sent.
	Body []byte
	// ContentType is a MIME type such as "text/plain".
	ContentType string
	// CorrelationID, ReplyTo and GroupID carry the request/reply and
	// message-group metadata every protocol has.
	CorrelationID string
	// ReplyTo is where replies go, written by FormatDestination.
	ReplyTo string
	GroupID string
	// UserID is the authenticated user that sent the message; set by the
	// session, not trusted from the client.
	UserID string

	// durableRefs counts the journaled queue references not yet settled;
	// the message record is deleted with the last one.
	durableRefs atomic.Int32
	// lb is set when the body is stored in the large-message store:
	// streamed there (Body nil; see Streamed), or kept in memory as well
	// (a body a front-end read whole, journaled above the threshold).
	lb *largeBody
	// memRefs counts the queue references holding the message in memory:
	// its size counts against the broker's memory budget once, while
	// memRefs > 0 (see Broker.hold).
	memRefs atomic.Int32
	// origin is the id of the Session that sent the message, for no-local
	// subscriptions; set before routing, never journaled (a recovered
	// message, or a copy moved to a dead-letter address, has none: 0).
	origin uint64
}

// ValidateProperties checks that every property value has one of the
// types core carries: string, int64, float64, bool, []byte or nil.
func ValidateProperties(p map[string]any) error {
	for k, v := range p {
		switch v.(type) {
		case string, int64, float64, bool, []byte, nil:
		default:
			return fmt.Errorf("%w: property %q has type %T", ErrInvalidMessage, k, v)
		}
	}
	return nil
}

// Expired reports whether m has an expiration at or before now.
func (m *Message) Expired(now time.Time) bool {
	return !m.Expiration.IsZero() && !now.Before(m.Expiration)
}

// shallowCopy returns a copy of m's fields sharing its body and
// properties (which nobody changes), without its broker-internal state:
// a copy another broker may hold.
func (m *Message) shallowCopy() *Message {
	c := &Message{
		ID: m.ID, Address: m.Address, RoutingType: m.RoutingType, Durable: m.Durable, Priority: m.Priority,
		Timestamp: m.Timestamp, Expiration: m.Expiration, DeliveryTime: m.DeliveryTime,
		Properties: m.Properties, Body: m.Body, ContentType: m.ContentType,
		CorrelationID: m.CorrelationID, ReplyTo: m.ReplyTo, GroupID: m.GroupID, UserID: m.UserID,
	}
	if m.Streamed() {
		// Shared: a copy sent under an id of its own (a divert's, a
		// composite destination's part) gets a file of its own in
		// prepare (Broker.ownBody).
		c.lb = m.lb
	}
	return c
}

// copyFor returns a shallow copy of m sent to address, for moving a
// message to a dead-letter or expiry address. Properties are copied so
// that the added ones do not touch the original; the body is shared.
func (m *Message) copyFor(address string, extra map[string]any) *Message {
	c := Message{
		Address: address, RoutingType: Anycast, Durable: m.Durable, Priority: m.Priority,
		Timestamp: m.Timestamp, Body: m.Body, ContentType: m.ContentType,
		CorrelationID: m.CorrelationID, ReplyTo: m.ReplyTo, GroupID: m.GroupID, UserID: m.UserID,
	}
	if m.Streamed() {
		// Shared until the copy is sent: prepare gives it a file of its
		// own (Broker.ownBody).
		c.lb = m.lb
	}
	c.Properties = make(map[string]any, len(m.Properties)+len(extra))
	for k, v := range m.Properties {
		c.Properties[k] = v
	}
	for k, v := range extra {
		c.Properties[k] = v
	}
	return &c
}

// Properties added to a message moved to a dead-letter or expiry address;
// the names are those ActiveMQ Artemis uses, so tools written for it work.
const (
	PropOriginalAddress = "_AMQ_ORIG_ADDRESS"
	PropOriginalQueue   = "_AMQ_ORIG_QUEUE"
	PropOriginalID      = "_AMQ_ORIG_MESSAGE_ID"
	// PropReason says why: "rejected", "expired", "max-deliveries"...
	PropReason = "_AMQ_REASON"
)

// Message.ReplyTo names where replies go as a destination with its
// routing type, so that every front-end can write it in its own terms:
// "queue://NAME" (anycast), "topic://NAME" (multicast), or a bare
// address whose routing type the address decides (a temporary queue's
// name, for example). These are ActiveMQ Artemis's and Qpid JMS's
// prefixes.
const (
	QueuePrefix = "queue://"
	TopicPrefix = "topic://"
)

// FormatDestination writes addr with the prefix of rt (none for
// RoutingDefault), for Message.ReplyTo.
func FormatDestination(addr string, rt RoutingType) string {
	switch rt {
	case Anycast:
		return QueuePrefix + addr
	case Multicast:
		return TopicPrefix + addr
	}
	return addr
}

// ParseDestination splits a destination written by FormatDestination
// into its address and routing type.
func ParseDestination(s string) (addr string, rt RoutingType) {
	if a, ok := strings.CutPrefix(s, QueuePrefix); ok {
		return a, Anycast
	}
	if a, ok := strings.CutPrefix(s, TopicPrefix); ok {
		return a, Multicast
	}
	return s, RoutingDefault
}

// InternalPropertyPrefix begins the names of properties a front-end
// keeps for its own use (such as what AMQP fields core has no field for,
// or MQTT's loop guard). Front-ends never show another's internal
// properties to clients.
const InternalPropertyPrefix = "_JUNCTION_"

// IsInternalProperty reports whether the property name is internal.
func IsInternalProperty(name string) bool {
	return strings.HasPrefix(name, InternalPropertyPrefix)
}

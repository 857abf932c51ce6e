// Package amqp is Junction's AMQP 1.0 front-end: the server side of the
// protocol (ISO/IEC 19464), over core.
//
// The codec lives in amqp/internal/encoding (the type system) and
// amqp/internal/frames (frames, performatives, message sections); this
// package holds the connection, session and link state machines and the
// mapping onto core.
//
// # Connections
//
// A client sends the SASL header (mechanisms PLAIN, checked by core's
// authenticator; ANONYMOUS when it accepts anonymous clients; EXTERNAL
// over TLS with a verified client certificate, whose subject's common
// name is then the user) or,
// unless [Config.RequireSASL], the plain AMQP header when anonymous
// clients are accepted. Open carries the broker's limits
// (max-frame-size, channel-max), half of its idle timeout, and the
// capabilities ANONYMOUS-RELAY, DELAYED_DELIVERY and SHARED-SUBS. The
// broker sends empty frames at half the client's idle timeout and closes
// a client silent for its own with amqp:resource-limit-exceeded. The
// client's container-id is its core client id: a second connection with
// the same one is refused (open marked
// amqp:connection-establishment-failed, then close).
//
// An idle connection is cheap: on plain TCP, [Server.ServeConn]'s
// goroutine only waits for data, holding no buffer (internal/inbound);
// a worker goroutine reads and handles what has arrived, with read
// buffers from a pool, and exits; the write side (internal/outbound)
// runs a goroutine only while there is something to write. The same on
// the one port. Over TLS or WebSockets the bytes are not the socket's:
// the worker stays, blocked in its read with its buffer.
//
// # Large messages
//
// On a broker with a large-message store, a client's message whose body
// is one data section above the large-message threshold is streamed to
// its file as its transfer frames arrive, up to
// [Config.MaxLargeMessageSize] (1 GiB; the links' advertised
// max-message-size), and a streamed body goes to client receivers from
// its file, cut into transfer frames as usual; see stream.go. Other
// bodies are reassembled in memory within [Config.MaxMessageSize].
//
// # Addresses
//
// A terminus address (or a message's to on the anonymous relay, a
// sending link with no target address) maps to a core address and
// routing type by the first rule that applies: a queue:// or topic://
// prefix; the capability queue, temporary-queue or anycast (anycast),
// topic, temporary-topic or multicast (multicast); the x-opt-jms-dest annotation on the
// anonymous relay; the routing type of the existing address (multicast
// when it only has subscriptions); anycast.
//
// A receiving link on a multicast address is a subscription: durable when
// its source is durable (configuration or unsettled-state) with expiry
// policy never, named by the container-id and the link name, kept by a
// detach without close and resumed by the next attach, deleted by a
// closing detach; shared (capability shared) under the link name less
// Qpid JMS's "|global" suffix; otherwise temporary. A dynamic source or
// target creates a temporary queue, deleted with the link. The filters
// apache.org:selector-filter:string (a JMS selector) and
// apache.org:no-local-filter:list apply; others are dropped from the
// attach answer, which tells the client they are not in force.
//
// # Link names
//
// A link is its handle on its session; every attach starts a new link,
// and none is looked up or resumed by name. Links that share a name (in
// one session, as Qpid Proton's BlockingConnection names two receivers
// on one address; in two sessions; in two directions) are each attached,
// and no attach is refused or closes the connection over a name, although
// the specification asks names to be unique per container pair and
// direction. A name counts where it names something: a shared
// subscription (its receivers share it) and a durable one (container-id
// and link name; one consumer at a time, so a second receiver is refused
// with amqp:resource-locked). Link stealing (amqp:link:stolen) cannot
// arise, since a container has at most one connection.
//
// # Flow and delivery
//
// A client receiver's link credit is its consumer's core credit, kept
// exact against deliveries in progress; drain hands over what the credit
// allows, then gives up the rest. Messages larger than the client's
// max-frame-size are split across transfers. A client sender gets
// [Config.LinkCredit] credit, topped up as deliveries are confirmed: the
// credit bounds what it has in flight. While a queue of the sender's
// address is full with address-full-policy BLOCK (core.Broker.Blocked)
// no credit is granted; the connection's writer checks again every
// 75 ms and grants credit once there is room (hold.go). Anonymous-relay
// senders are not held. A send to a full FAIL address, or a durable send
// past the disk limit, is rejected with amqp:resource-limit-exceeded.
// An unsettled delivery is
// accepted once core has it: for a durable message on a durable queue,
// once the journal has synced it; rejected with the error's condition
// otherwise (amqp:unauthorized-access for what core's Authorizer
// refuses, which also refuses a sending link's attach when the user may
// not send to its address, and a receiving link's when it may not
// consume). Outcomes from clients: accepted acks; released returns the
// message without counting an attempt; modified with delivery-failed
// counts one; modified with undeliverable-here and rejected dead-letter
// it. A delivery's header carries core's failed attempts as
// delivery-count; a message that may have been delivered before without
// core counting it (recovered after a restart, or handed over by a
// cluster failover) goes out with first-acquirer false and a
// delivery-count of at least 1, since Qpid JMS and others read a
// possible redelivery from the count alone.
//
// # Transactions
//
// A coordinator link (amqp:local-transactions) declares core local
// transactions and discharges them; transfers and accepted outcomes in
// transactional-state join the transaction.
//
// # Message sections
//
// The mapping of message sections onto core.Message fields is in
// docs/protocol-mapping.md. Application properties become core
// properties of core's types (for selectors and the other protocols);
// when a value's AMQP type is not what core's type gives back (an int, a
// symbol, a list...), the section is also kept as received, and an AMQP
// consumer gets each value as it was encoded, while the message still
// has the core property it was mapped to (appProperties). Values core
// has no type for (decimals, lists, maps, arrays, described values) are
// AMQP's only. Message annotations and the footer are kept as received;
// delivery annotations are for one hop and are not passed on.
package amqp

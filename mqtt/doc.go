// Package mqtt serves MQTT 3.1, 3.1.1 and 5 clients on core alone: core
// routes every publish once, and every subscription is a core consumer,
// so MQTT devices and the other protocols see one broker.
//
// # Connections
//
// Junction's transports accept each connection and hand it to
// [Server.ServeConn]. The connection loop is the package's own; it uses
// mochi-mqtt's packets package as the codec only (decoding each packet
// once; encoding the rare ones), and writes PUBLISH and the
// acknowledgements itself (encode.go).
//
//   - Reading (reader.go): a packet is a view of a pooled read buffer,
//     or an allocation of its own when it is larger than that buffer; a
//     PUBLISH is copied once, into the allocation its message keeps as
//     its body. On a broker with a large-message store a PUBLISH above
//     the large-message threshold is streamed instead: its payload goes
//     from the socket to its file as it arrives, up to
//     Config.MaxMessageSize (256 MiB), and goes out to subscribers from
//     the file (stream.go). While a plain TCP connection is idle it holds no read
//     buffer: it waits for the socket to be readable and only then takes
//     a buffer.
//   - Goroutines (conn.go): the connection's goroutine only waits, for
//     data and for a worker, a goroutine that handles what has arrived
//     and exits once the connection has nothing more to read. An idle
//     plain TCP connection costs that one goroutine, with the small stack
//     waiting needs (on the one port too, once the bytes its detection
//     read ahead are handed out). Over TLS or WebSockets the bytes are
//     not the socket's (internal/inbound): the worker stays, blocked in
//     its read with its buffer, two goroutines in all.
//   - Writing: everything the connection sends goes through an
//     internal/outbound Writer, which gathers a burst (deliveries,
//     acknowledgements) into one write and runs a goroutine only while
//     there is something to write.
//   - Before authentication the CONNECT is read within
//     Config.PreAuthMaxPacketSize, its bytes charged to the broker's
//     pre-authentication budget (preauth.go); after it each packet must
//     arrive within Config.FrameTimeout plus the time its bytes earn at
//     FrameMinRate (core/guard).
//
// # Topics and addresses
//
// An MQTT topic is the multicast address whose words are its levels
// ([TopicToAddress]: '/' becomes '.', a '.' inside a level becomes "//";
// reversible with [AddressToTopic]). Filters map the same way with '+'
// as '*' and '#' as '#'. So an MQTT subscriber on sensors/+/temp and a
// STOMP subscriber on /topic/sensors.*.temp see the same messages.
// Topics that begin with '$' are the broker's: no client publishes there
// (refused as not authorized), and a filter that begins with a wildcard
// does not match them [MQTT-4.7.2-1].
//
// A publish goes to core as a message on the topic's address: multicast,
// unless an anycast queue of that name exists (a STOMP or AMQP work
// queue), in which case it goes to the queue. Authorization is core's,
// decided for the concrete address (docs/protocol-mapping.md,
// Authorization).
//
// # Publishes from clients
//
//   - QoS 0: routed, nothing answered; a refused one is dropped.
//   - QoS 1: routed at once and acknowledged when core confirms it
//     (after the journal's sync when it reaches a durable queue), PUBACKs
//     in the order the publishes arrived (acks.go), so that a publisher
//     with many in flight shares the journal's syncs.
//   - QoS 2 (method B of the spec, 4.3.3): routed at once, PUBREC once
//     core confirms it; its packet id is remembered until PUBREL, so that
//     a resend is answered but not routed again. A persistent session
//     remembers it in core, in the same journal transaction as the
//     message, so a restart or a crash cannot route it twice.
//   - Refusals: MQTT 5 gets reason 0x87 (not authorized) or 0x97 (an
//     address full with address-full-policy FAIL, or a disk over its
//     limit) in the PUBACK or PUBREC; MQTT 3.1.1 has no negative
//     acknowledgement, so the connection closes after the answers before
//     it [MQTT-4.8.0-1]. With BLOCK, the publish waits in core while the
//     address is full, and the connection reads nothing meanwhile.
//   - Retained publishes are also kept in core's retained store
//     (journaled) before the answer; an empty one clears it.
//
// # Subscriptions and deliveries
//
// Each topic filter of a SUBSCRIBE is a core consumer: a non-durable
// subscription for a clean session, a durable subscription of the client
// id "mqtt/<id>" named by the filter for a persistent session (its
// messages are journaled and wait while the client is away, within
// Config.MaxSessionBytes), and a core shared subscription named GROUP for
// MQTT 5's $share/GROUP/filter, which STOMP's and AMQP's shared
// subscriptions of the same name on the same pattern join. A client whose
// filters overlap gets a copy per matching subscription, at the QoS of
// each (MQTT-3.3.5-1 allows it).
//
// A delivery goes out at the lower of the subscription's QoS and the
// message's: its publish's QoS for a message from MQTT, else 1 for a
// durable message and 0 for another. QoS 1 and 2 deliveries take a packet
// id and a place in the client's Receive Maximum [MQTT-3.3.4-7]; on a
// durable subscription the packet id is marked on the message in core
// (journaled with it) before the PUBLISH leaves, so that after a
// reconnect, a restart or a kill -9 it goes out again under the same id
// with DUP set, and a QoS 2 delivery the client acknowledged with PUBREC
// goes out as PUBREL [MQTT-4.4.0-1]. A delivery is acked in core when the
// client's PUBACK or PUBCOMP comes (QoS 0: once written). A message past
// its expiry is not sent; the expiry interval sent is the time left.
// Retained messages come from core's retained store when a subscription
// is made (retain handling 0, or 1 for a new one), never for a shared
// one; a live message keeps its retain flag only with
// retain-as-published. No-local is core's; a subscription identifier is
// sent with each delivery of its subscription.
//
// # Sessions
//
// A session's state is in core, so it is exact after a restart and a
// kill -9 (session.go): its subscriptions are consumers, its deliveries
// in flight carry their packet ids as marks, and the rest is in client
// records of "mqtt/<id>" (the session's expiry interval and when its
// last connection ended, its will, each subscription's options, each QoS
// 2 publish awaiting PUBREL). CONNACK's session present flag is set when
// core holds a session for the client id that has not expired
// [MQTT-3.2.2-2]. A new connection with a client id in use takes the
// session over: the old connection gets DISCONNECT 0x8E on MQTT 5 and is
// closed. A persistent session without a connection ends when its expiry
// interval (capped by Config.MaxSessionExpiry) has passed; its will is
// published after the will delay, unless the client is back first. At a
// shutdown wills stay in core and the next start publishes them, as
// after a crash.
//
// # The spec's answers
//
// MQTT 3.1.1 CONNACK return codes: 0x01 for a protocol level other than
// 3.1 (MQIsdp 3), 3.1.1 (4) and 5, then the close (in the 3.1.1 form,
// which every version's client reads); 0x02 for an empty client id with
// clean session 0; 0x04 for credentials that do not pass; 0x05 for a
// client without credentials where they are needed; 0x03 when the
// broker cannot take the client (its pre-authentication budget, a
// session it cannot store). MQTT 5 gets the corresponding reason codes
// (0x85, 0x86, 0x87, 0x88, 0x89; 0x8C for an authentication method,
// 0x90 for a will topic with wildcards, 0x95 for a CONNECT too large),
// and CONNACK advertises what the broker enforces: Maximum Packet Size,
// Receive Maximum, Topic Alias Maximum (inbound aliases honoured),
// Maximum QoS when below 2, Retain, Wildcard, Subscription Identifier and
// Shared Subscription Available, Session Expiry Interval when capped,
// Server Keep Alive when Config.MaxKeepAlive overrides the client's, an
// Assigned Client Identifier for an empty one. A connection the broker
// ends gets DISCONNECT with the reason first on MQTT 5: 0x81 malformed
// packet, 0x82 protocol error, 0x8B server shutting down, 0x8D keep-alive
// timeout (or a packet too slow to arrive), 0x8E session taken over, 0x93
// receive maximum exceeded, 0x94 topic alias invalid, 0x95 packet too
// large, 0x98 administrative action, 0x9B QoS not supported.
//
// # $SYS
//
// The $SYS/broker/... topics carry core's statistics of every protocol
// (clients, messages in and out, retained messages, subscriptions,
// uptime, version; sys.go), published every Config.SysInterval and kept
// as retained messages in memory.
//
// Field mapping (MQTT 5 properties; 3.1.1 has only the payload):
//
//	payload                    Body, byte for byte
//	content type               ContentType
//	response topic             ReplyTo (as an address)
//	correlation data           CorrelationID
//	message expiry interval    Expiration (the time left when delivered)
//	user properties            Properties (strings; the first of a name);
//	                           MQTT subscribers get them as sent, in order
//	payload format indicator   kept for MQTT subscribers
//	QoS > 0                    Durable; Properties["ActiveMQ.MQTT.QoS"]
//	retain                     Properties["mqtt.retain"] = true
package mqtt

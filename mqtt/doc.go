// Package mqtt serves MQTT 3.1, 3.1.1 and 5 clients with an embedded
// mochi-mqtt engine and bridges it to core, so that MQTT devices and the
// other protocols see one broker.
//
// # Connections
//
// mochi runs with no listener of its own: Junction's transports accept
// each connection and hand it to [Server.ServeConn], which gives it to
// mochi's EstablishConnection. Packet handling, keep-alive, QoS flows,
// retained messages, wills and sessions are mochi's. Limits are set
// where mochi has none: a maximum packet size, a finite session expiry,
// a per-client bound on queued writes, a deadline for CONNECT, and a
// bound on each client's subscriptions. Where mochi's answer to a limit
// is silent, Junction's is the protocol's (limits.go): DISCONNECT 0x95
// for a packet too large and SUBACK 0x97 past the subscription limit,
// on MQTT 5.
//
// # Topics and addresses
//
// An MQTT topic is the multicast address whose words are its levels
// ([TopicToAddress]: '/' becomes '.', a '.' inside a level becomes "//";
// reversible with [AddressToTopic]). Filters map the same way with '+'
// as '*' and '#' as '#'. So an MQTT subscriber on sensors/+/temp and a
// STOMP subscriber on /topic/sensors.*.temp see the same messages.
//
// Authorization is core's: the bridge answers mochi's ACL checks from
// the client's core session (a refused filter gets SUBACK 0x87, 0x80 on
// 3.1.1; a refused publish is dropped at QoS 0, answered 0x87 at QoS 1
// and 2 on MQTT 5, and closes a 3.1.1 connection), and drops a will the
// user may not send (docs/protocol-mapping.md, Authorization).
//
// A publish to a full address with address-full-policy FAIL, or a QoS 1
// or 2 publish while the store is over its disk limit, is answered with
// reason 0x97 (quota exceeded) in the PUBACK or PUBREC on MQTT 5; MQTT
// 3.1.1 has no negative acknowledgement, so the connection is closed; a
// QoS 0 publish is dropped (counted as refused). With BLOCK, the
// bridge's publish hook waits in core while the address is full, so
// mochi stops reading the publisher's connection until there is room
// (refusal.go).
//
// # The bridge, both ways
//
//   - An MQTT PUBLISH is sent to core as a message on the topic's address:
//     multicast, unless an anycast queue of that name exists (a STOMP or
//     AMQP work queue), in which case it goes to the queue. QoS 1 and 2
//     publishes are durable: mochi acknowledges them (PUBACK, PUBREC)
//     only after core has journaled them, when they reach a durable
//     queue. mochi also delivers the publish to its MQTT subscribers
//     directly; the copy in core carries the property
//     _JUNCTION_ORIGIN=mqtt so that the bridge does not bring it back.
//   - The bridge holds one core subscription on every multicast address
//     ("#"). Each message from another protocol is injected into mochi as
//     a publish from an internal client, and mochi delivers it to the
//     matching MQTT subscribers: QoS 1 if the message is durable (capped
//     by the subscription's QoS), else QoS 0.
//
// # Subscriptions core serves
//
// Two kinds of subscription are served from core instead of mochi's
// fan-out (mochi keeps them in the client's session state for SUBACK
// and UNSUBSCRIBE, but not in its fan-out index):
//
//   - Every subscription of a persistent session (MQTT 3 clean session
//     false, MQTT 5 session expiry > 0) is a durable core subscription of
//     the client id "mqtt/<id>", named "q<QoS>/<filter>". Its messages
//     are journaled: they wait while the device is away, survive a
//     restart and kill -9, and a QoS 1/2 publish reaching one is
//     acknowledged only after the journal's sync. Each has a byte budget
//     (Config.MaxSessionBytes); overflow follows the address's full
//     policy (PAGE by default: to disk when the broker persists; see
//     Config.MaxSessionBytes). A clean start discards the session's
//     subscriptions.
//   - MQTT 5 shared subscriptions $share/GROUP/filter are core shared
//     subscriptions named GROUP on the filter's pattern, so a STOMP
//     subscriber with shared-subscription-name:GROUP on the same topic
//     pattern competes in the same group.
//
// Their deliveries are written to the connection by a per-connection
// writer: QoS 1 for a durable message on a QoS 1 or 2 subscription
// (acked in core on the client's PUBACK), else QoS 0 (acked once
// written). Wills are published by mochi and passed on to core.
//
// Retained messages are served by mochi; each is also kept by core's
// last-value store (Broker.Retain), journaled, and loaded back into mochi
// at start, so they survive a restart.
//
// Field mapping (MQTT 5 properties; 3.1.1 has only the payload):
//
//	payload                    Body, byte for byte
//	content type               ContentType
//	response topic             ReplyTo (as an address)
//	correlation data           CorrelationID
//	message expiry interval    Expiration
//	user properties            Properties (strings)
//	QoS > 0                    Durable
//	retain                     Properties["mqtt.retain"] = true
package mqtt

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
// a per-client bound on queued writes.
//
// # Topics and addresses
//
// An MQTT topic is the multicast address whose words are its levels
// ([TopicToAddress]: '/' becomes '.', a '.' inside a level becomes "//";
// reversible with [AddressToTopic]). Filters map the same way with '+'
// as '*' and '#' as '#'. So an MQTT subscriber on sensors/+/temp and a
// STOMP subscriber on /topic/sensors.*.temp see the same messages.
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

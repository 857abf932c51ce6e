// Package stomp serves STOMP 1.0, 1.1 and 1.2 clients over core.
//
// # Connection lifecycle
//
// [Server.ServeConn] owns one connection. It reads frames with a bounded
// reader (package stomp/internal/wire: limits on frame size, header count
// and header length are checked before anything is allocated), and an
// internal/outbound Writer coalesces outgoing frames, running a goroutine
// only while there is something to write. On plain TCP an idle
// connection holds no read buffer and one goroutine, which only waits
// (internal/inbound), on the one port too; over TLS or WebSockets a
// worker stays blocked in its read with its buffer. The first frame must
// be CONNECT or STOMP; the server negotiates the version (the highest
// both sides accept), heart-beats and identity, and opens a
// [core.Session]. Any protocol violation gets an
// ERROR frame with a message header and a body saying what was wrong, and
// the connection closes; the session then returns unacked messages to
// their queues. DISCONNECT with a receipt is answered before closing.
// An operation core's Authorizer refuses gets ERROR "not authorized",
// the body naming the user, permission and address. A SEND to a full
// address with address-full-policy FAIL gets ERROR "address full", a
// persistent SEND while the store is over its disk limit ERROR "disk
// full" (the body names the queue or the limit). With BLOCK, the SEND
// waits in core while the address is full: the connection is not read
// meanwhile, and its RECEIPT comes once there is room.
//
// # Large messages
//
// On a broker with a large-message store, a SEND whose content-length is
// above the broker's large-message threshold is streamed: the reader
// returns it without its body, which goes from the socket to its file as
// it arrives ([core.Session.ReceiveBody]), up to [Config.MaxMessageSize]
// (100 MiB by default) however small [Config.MaxFrameSize] is. A MESSAGE
// of such a body is written from its file (stream.go). Either way one
// transfer costs a 1 MiB buffer, whatever the body's size. A SEND without
// content-length is read whole, within MaxFrameSize.
//
// # Heart-beats
//
// STOMP 1.1 and 1.2 negotiate each direction as the larger of what one
// side can do and the other wants, or none when either says 0. The
// broker can send, and wants to receive, as often as
// [Config.HeartBeatSend] and [Config.HeartBeatReceive] (default 1s), so a
// client gets the intervals it asks for, never faster than those;
// CONNECTED's heart-beat header gives the negotiated intervals (the
// broker's, then the client's). A client that sends nothing (no frame,
// no heart-beat) for [Config.HeartBeatGrace] (1.5) times its interval
// gets ERROR "heart-beat timeout" and the connection closes.
//
// # Destinations
//
//	/queue/NAME    anycast address NAME (point-to-point)
//	/topic/NAME    multicast address NAME (publish/subscribe); a
//	               SUBSCRIBE may use wildcards (* one word, # or >
//	               any number of words, words separated by '.')
//	NAME           NAME with the address settings' default routing type
//
// # Header mapping (SEND to core.Message, and back on MESSAGE)
//
//	persistent:true          Durable
//	priority:0-9             Priority (default 4)
//	expires:ms-since-epoch   Expiration (0 = never)
//	AMQ_SCHEDULED_DELAY:ms   DeliveryTime = now + delay
//	content-type             ContentType
//	correlation-id           CorrelationID
//	reply-to                 ReplyTo
//	JMSXGroupID              GroupID
//	any other header         Properties[name] = value (a string)
//
// MESSAGE frames carry message-id (the broker's message id), destination
// (where the message was sent), subscription, ack (1.2), redelivered,
// content-length (always: bodies may contain NUL), timestamp, and the
// mapped headers above; properties of other types are written as text.
//
// # SUBSCRIBE headers
//
//	destination                  what to read (see Destinations)
//	id                           the subscription's id (required from 1.1)
//	ack                          auto | client | client-individual
//	activemq.prefetchSize        the window of unacked messages (credit)
//	activemq.exclusive:true      take every message while attached
//	selector                     JMS message selector (package
//	                             core/selector): only matching messages
//	shared-subscription-name     join a shared topic subscription
//	activemq.subscriptionName    make a topic subscription durable
//	(or durable-subscription-name)
//
// A selector is SQL-92 as in JMS, such as "color = 'red' AND
// JMSPriority > 4"; identifiers are message properties, then the JMS
// header names (JMSPriority, JMSTimestamp, JMSCorrelationID,
// JMSDeliveryMode, JMSXGroupID, ...; see core.ConsumerOptions). On a
// queue the messages
// it does not select stay for other subscribers; a topic or durable
// subscription keeps only what it selects, and a durable one keeps its
// selector across restarts (subscribing again with another selector
// replaces it, as JMS does). Properties that come from STOMP headers are
// strings, so "price > 10" never matches a price sent in a header:
// compare them as strings, or use the mapped fields, which are numbers
// (JMSPriority, JMSTimestamp, JMSExpiration). A selector that does not
// parse gets an ERROR frame (message "invalid selector", the body naming
// the problem and its offset) and the connection closes.
//
// # Acknowledgement and flow
//
// SUBSCRIBE's ack header selects auto (the message is acked once written
// to the socket), client (ACK is cumulative over the subscription) or
// client-individual. activemq.prefetchSize sets the window of unacked
// messages (default 1000): the consumer's credit in core, given back as
// messages are acked (auto: as they are written), so a slow client holds
// messages in the queue, not in memory. NACK redelivers the message and
// counts a failed attempt (dead-lettered after the address's max delivery
// attempts). BEGIN, COMMIT and ABORT group SENDs and ACKs atomically.
//
// A topic SUBSCRIBE with shared-subscription-name:NAME joins the shared
// subscription NAME of that topic: its subscribers, from this protocol or
// another (MQTT 5 $share/NAME/filter), compete for each message.
//
// Durable topic subscriptions need client-id on CONNECT and
// activemq.subscriptionName (or durable-subscription-name) on SUBSCRIBE;
// they keep messages while the client is away. UNSUBSCRIBE detaches;
// UNSUBSCRIBE with the subscription name header deletes the durable
// subscription, as ActiveMQ does.
package stomp

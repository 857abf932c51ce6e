package mqtt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/core/guard"
	"github.com/junctionmq/junction/internal/outbound"
)

// A connection has one goroutine of its own: the caller's of ServeConn,
// which reads and handles packets in order (conn.serve). Everything the
// connection sends goes through its outbound.Writer, whose goroutine
// runs only while there is something to write; deliveries from core
// reach it from core's delivery handlers, answers to publishes from the
// journal's completions (acks.go). Between packets an idle connection
// holds no read buffer (reader.go).

// stop causes, for conn.stop.
type stopCause uint8

const (
	stopNone      stopCause = iota
	stopShutdown            // Server.Close, or ServeConn's context
	stopTakenOver           // another connection with the same client id
	stopAdmin               // core.Broker.CloseConnection
)

// errClientDisconnected ends the read loop after a DISCONNECT.
var errClientDisconnected = errors.New("mqtt: client disconnected")

// protoErr is a protocol error found in a packet: the connection closes,
// after DISCONNECT with code on MQTT 5.
type protoErr struct {
	code packets.Code
	what string
}

func (e *protoErr) Error() string { return "mqtt: " + e.what + ": " + e.code.Reason }

func protocolError(code packets.Code, format string, args ...any) *protoErr {
	return &protoErr{code: code, what: fmt.Sprintf(format, args...)}
}

// Items for the writer.
const (
	itemRaw      = iota // b: an encoded packet
	itemAck             // typ, id, code: PUBACK, PUBREC, PUBREL, PUBCOMP
	itemDelivery        // d, sub: a delivery from core
	itemRetained        // m, sub: a retained message for a new subscription
	itemClose           // close the connection once what came before is written
)

type outItem struct {
	kind byte
	typ  byte
	code byte
	id   uint16
	b    []byte
	d    core.Delivery
	m    *core.Message
	sub  *subscription
}

// inflight is a delivery of QoS 1 or 2 waiting for the client's answer.
type inflight struct {
	cons *core.Consumer // nil: a retained message, or its subscription is gone
	id   uint64         // core delivery id
	qos  byte
	rel  bool // QoS 2: PUBREC received, PUBREL sent, waiting for PUBCOMP
	// mark: the delivery's packet id is marked in core (durable
	// subscription of a persistent session).
	mark bool
}

// conn is one client connection.
type conn struct {
	s   *Server
	ctx context.Context // ServeConn's: its end stops the connection
	nc  net.Conn
	rd  packetReader
	out *outbound.Writer[outItem]
	// working waits for the worker doing the connection's work (inWorker).
	working sync.WaitGroup
	err     error // why the connection ends (errIdle: it has nothing to read for now)
	opened  bool  // open has run (in the first worker)
	closed  bool  // nothing more to do at the end: close has run, or open refused

	// Set by the handshake, then read-only:
	connectBy time.Time // the CONNECT's deadline; zero once handled
	version   byte      // 3 (3.1), 4 (3.1.1) or 5
	clientID  string
	user      string
	keepAlive time.Duration // 0: none
	maxOut    int           // the client's Maximum Packet Size; 0 = the protocol's
	window    int           // QoS 1 and 2 deliveries in flight at most
	sess      *core.Session

	// Owned by the read loop:
	expiry     uint32 // session expiry interval, seconds (may change at DISCONNECT)
	persistent bool   // the session outlives the connection (expiry > 0)
	connected  bool   // CONNACK 0 sent
	claimed    bool   // the client id is this connection's (Server.claim)
	will       *will
	willOK     bool // a DISCONNECT said to publish the will (0x04)
	willSent   bool
	stateKept  bool // core holds records or durable subscriptions of this session
	subs       map[string]*subscription
	aliases    []string                // topic aliases set by the client; index alias-1
	in         atomic.Pointer[inbound] // made at the first QoS 1 or 2 publish (inbound)

	// Shared between the read loop and the writer, guarded by outMu:
	outMu    sync.Mutex
	inflight map[uint16]*inflight // by packet id; made on first use
	reserved map[uint16]bool      // ids marked in core whose messages have not come back yet
	nextID   uint16

	// The writer's (outbound calls the encoder from one goroutine at a
	// time):
	enc     *encoderState // made at the first delivery
	wclosed bool          // itemClose was written: nothing more goes

	live    atomic.Pointer[core.Session] // sess, for stop from other goroutines
	cause   atomic.Uint32                // stopCause of a stop from another goroutine
	stopped atomic.Bool                  // stop has closed the network connection
	gone    chan struct{}                // guarded by s.mu: closed by Server.releaseAway; made by a waiting claim
}

// inbound is the state of a client's QoS 1 and 2 publishes, made at the
// first: an idle connection, or one that only subscribes, has none.
type inbound struct {
	acks ackQueue
	mu   sync.Mutex
	qos2 map[uint16]bool // guarded by mu: the client's QoS 2 publishes awaiting PUBREL
	qos1 atomic.Int32    // the client's QoS 1 publishes not yet acknowledged
}

// inb returns the connection's inbound state, making it (the read loop
// alone makes it).
func (c *conn) inb() *inbound {
	if in := c.in.Load(); in != nil {
		return in
	}
	in := &inbound{}
	in.acks.c = c
	c.in.Store(in)
	return in
}

// init sets a new connection up (ServeConn made it).
func (c *conn) init() {
	c.rd.init(c.nc)
	c.rd.rule = guard.Rule{Timeout: c.s.cfg.FrameTimeout, MinRate: c.s.cfg.FrameMinRate}
	c.rd.deadline = c
	c.connectBy = time.Now().Add(c.s.cfg.ConnectTimeout)
	c.version = 4
	c.out = outbound.New[outItem](c.nc, c, outbound.Config{WriteTimeout: c.s.cfg.WriteTimeout, HighWater: 1024})
}

// stop ends the connection from another goroutine: its read loop sees
// the cause when its read fails.
func (c *conn) stop(cause stopCause) {
	c.cause.CompareAndSwap(uint32(stopNone), uint32(cause))
	if c.stopped.Swap(true) {
		return
	}
	c.nc.SetReadDeadline(stopDeadline)
	// A publish waiting in core for room (address-full-policy BLOCK)
	// holds the read loop: closing the session ends the wait.
	if s := c.live.Load(); s != nil {
		s.Close()
	}
	if in := c.in.Load(); in != nil {
		in.acks.wake()
	}
}

// stopDeadline is the read deadline of a connection being stopped: long
// past, so that a read in progress or to come fails at once.
var stopDeadline = time.Unix(1, 0)

// closing reports whether the connection is being stopped.
func (c *conn) closing() bool { return c.stopped.Load() }

// Workers. A connection's goroutine (the caller's of ServeConn, which an
// idle connection keeps) does nothing but wait: for data, with no buffer
// (packetReader.waitIdle), and for a worker, a goroutine that does the
// connection's work (its setup, its packets until it has nothing more to
// read, its end) and returns to the pool (inbound.Workers). A
// goroutine's stack grows for the deepest call it makes and shrinks only
// at a garbage collection, which an idle broker seldom has: done on the
// connection's goroutine, the CONNECT's work alone would leave every
// idle connection with a stack of 4 or 8 KiB, where waiting fits in 2
// KiB.
const (
	workRun   = iota // conn.open first, then conn.work, its error in c.err
	workClose        // conn.close
)

// inWorker runs one kind of work in a worker (inbound.Workers), and
// waits for it. It makes no closure, so that this goroutine's stack
// stays as small as waiting needs.
func (c *conn) inWorker(kind int) {
	c.working.Add(1)
	c.s.workers.Go(c, kind)
	c.working.Wait()
}

// Work is the connection's work of one kind, on a worker.
func (c *conn) Work(kind int) {
	defer c.working.Done()
	switch kind {
	case workRun:
		if !c.opened {
			// The first worker sets the connection up, and goes on with
			// the CONNECT if it has arrived: a goroutine less per
			// connection.
			c.opened = true
			if c.open(); c.err != nil {
				c.closed = true // refused: the server is closing
				return
			}
			if c.rd.yield && !c.rd.wait.Ready() {
				// Wait for the CONNECT in the connection's goroutine,
				// not in a worker.
				c.err = errIdle
				return
			}
		}
		c.err = c.work()
		if c.err != errIdle {
			// The end, at once: a goroutine less to start before the
			// goodbye leaves.
			c.close()
			c.closed = true
		}
	case workClose:
		c.close()
	}
}

// serve runs the connection until it ends; c.err then says why, and
// c.closed whether the end's work is done. A connection that is not
// plain TCP cannot wait without a buffer: its worker reads until the
// end.
func (c *conn) serve() {
	for {
		c.inWorker(workRun)
		if c.err != errIdle {
			return
		}
		if c.err = c.rd.waitIdle(); c.err != nil {
			return
		}
	}
}

// work reads and handles packets: the CONNECT first, then the rest,
// until the connection ends, or until it has nothing more to read
// (errIdle, with packetReader.yield set).
func (c *conn) work() error {
	if !c.connected {
		if err := c.handshake(); err != nil {
			return err
		}
		c.readPhase()
		// The CONNECT was read exactly, and the client waits for its
		// CONNACK: no read to look for more.
		c.rd.answered = true
	}
	for {
		first, body, owned, err := c.rd.next()
		if err != nil {
			return err
		}
		if err := c.handle(first, body, owned); err != nil {
			return err
		}
		if c.rd.left > 0 {
			// A streamed payload the PUBLISH's handling did not take (a
			// resent QoS 2 publish, a refusal): read past it.
			if _, err := io.Copy(io.Discard, c.rd.payload()); err != nil {
				return err
			}
		}
		// A client that sends without reading its answers waits here.
		if err := c.out.Wait(); err != nil {
			return err
		}
	}
}

// readDeadline is the deadline of a read (packetReader): the connect
// timeout's until CONNECT is handled, then the keep-alive's, 1.5 times it
// from the last bytes read [MQTT-3.1.2-24] (none for a keep-alive of 0);
// long past once the connection is being stopped.
func (c *conn) readDeadline() time.Time {
	switch {
	case c.closing():
		return stopDeadline
	case c.connectBy != (time.Time{}):
		return c.connectBy
	case c.keepAlive == 0:
		return time.Time{}
	}
	return time.Now().Add(c.keepAlive * 3 / 2)
}

// readPhase sets the reader up for the packets after CONNECT: the
// maximum packet size, the keep-alive's deadline.
func (c *conn) readPhase() {
	c.rd.max = c.s.cfg.MaxPacketSize
	if th := c.sess.StreamThreshold(); th > 0 {
		c.rd.streamAbove, c.rd.maxStream, c.rd.v5 = th, max(c.s.cfg.MaxMessageSize, c.s.cfg.MaxPacketSize), c.version == 5
	}
	c.connectBy = time.Time{}
}

// decode decodes body into pk with mochi's decoders. A panic of a
// decoder on malformed input (mochi v2.7.9's SUBSCRIBE decoder reads an
// MQTT 5 options byte past the end) is a malformed packet.
func decode(pk *packets.Packet, body []byte) (err error) {
	defer func() {
		if recover() != nil {
			err = packets.ErrMalformedPacket
		}
	}()
	switch pk.FixedHeader.Type {
	case packets.Connect:
		return pk.ConnectDecode(body)
	case packets.Publish:
		return pk.PublishDecode(body)
	case packets.Puback:
		return pk.PubackDecode(body)
	case packets.Pubrec:
		return pk.PubrecDecode(body)
	case packets.Pubrel:
		return pk.PubrelDecode(body)
	case packets.Pubcomp:
		return pk.PubcompDecode(body)
	case packets.Subscribe:
		return pk.SubscribeDecode(body)
	case packets.Unsubscribe:
		return pk.UnsubscribeDecode(body)
	case packets.Disconnect:
		return pk.DisconnectDecode(body)
	case packets.Auth:
		return pk.AuthDecode(body)
	}
	return nil
}

// malformed reports a decoding error as the MQTT 5 reason code it
// carries (mochi's errors are packets.Code values, some wrapped).
func malformed(err error, what string) *protoErr {
	var code packets.Code
	if errors.As(err, &code) && code.Code >= 0x80 {
		return &protoErr{code: code, what: what}
	}
	return &protoErr{code: packets.ErrMalformedPacket, what: what + ": " + err.Error()}
}

// handle handles one packet after CONNECT.
func (c *conn) handle(first byte, body []byte, owned bool) error {
	pk := packets.Packet{ProtocolVersion: c.version}
	if err := pk.FixedHeader.Decode(first); err != nil {
		return malformed(err, "fixed header")
	}
	pk.FixedHeader.Remaining = len(body)
	switch pk.FixedHeader.Type {
	case packets.Publish:
		if !owned {
			// The message keeps the packet: one allocation, which the
			// body, the topic and the properties all point into.
			body = append([]byte(nil), body...)
		}
		if err := decode(&pk, body); err != nil {
			return malformed(err, "PUBLISH")
		}
		return c.onPublish(&pk)
	case packets.Puback, packets.Pubrec, packets.Pubrel, packets.Pubcomp:
		if err := decode(&pk, body); err != nil {
			return malformed(err, packets.PacketNames[pk.FixedHeader.Type])
		}
		return c.onAck(&pk)
	case packets.Subscribe:
		if err := decode(&pk, body); err != nil {
			return malformed(err, "SUBSCRIBE")
		}
		return c.onSubscribe(&pk)
	case packets.Unsubscribe:
		if err := decode(&pk, body); err != nil {
			return malformed(err, "UNSUBSCRIBE")
		}
		return c.onUnsubscribe(&pk)
	case packets.Pingreq:
		c.out.Push(outItem{kind: itemRaw, b: pingresp})
		return nil
	case packets.Disconnect:
		if err := decode(&pk, body); err != nil {
			return malformed(err, "DISCONNECT")
		}
		return c.onDisconnect(&pk)
	case packets.Connect:
		return protocolError(packets.ErrProtocolViolationSecondConnect, "CONNECT")
	case packets.Auth:
		// No authentication method was agreed (CONNECT with one is
		// refused), so AUTH is a protocol error [MQTT-4.12.0-1].
		return protocolError(packets.ErrProtocolViolation, "AUTH without an authentication method")
	}
	return protocolError(packets.ErrProtocolViolation, "packet type %d from a client", pk.FixedHeader.Type)
}

var pingresp = []byte{packets.Pingresp << 4, 0}

// onDisconnect handles the client's DISCONNECT: no will unless MQTT 5
// reason 0x04 asks for it; a new session expiry interval.
func (c *conn) onDisconnect(pk *packets.Packet) error {
	c.willOK = c.version == 5 && pk.ReasonCode == packets.CodeDisconnectWillMessage.Code
	if c.version == 5 && pk.Properties.SessionExpiryIntervalFlag {
		if c.expiry == 0 && pk.Properties.SessionExpiryInterval > 0 {
			// [MQTT-3.14.2-2]
			return protocolError(packets.ErrProtocolViolationZeroNonZeroExpiry, "DISCONNECT")
		}
		c.setExpiry(pk.Properties.SessionExpiryInterval)
	}
	return errClientDisconnected
}

// setExpiry sets the session expiry interval, capped.
func (c *conn) setExpiry(v uint32) {
	c.expiry = min(v, uint32(c.s.cfg.MaxSessionExpiry/time.Second))
	c.persistent = c.expiry > 0
}

// end closes the connection after the read loop: it says why to an MQTT
// 5 client when the broker ends it, publishes the will unless the client
// said goodbye, and leaves the session to core (a persistent one, to
// resume) or discards it.
func (c *conn) end(err error) {
	graceful := errors.Is(err, errClientDisconnected)
	code, why := c.reason(err)
	if why != "" {
		if e := c.s.log.Debug(); e != nil {
			e.Err(err).Str("client", c.clientID).Str("remote", c.nc.RemoteAddr().String()).Msg(why)
		}
	}
	if c.connected && c.version == 5 && code != 0 {
		dis := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}, ProtocolVersion: 5, ReasonCode: code}
		c.out.Finish(outItem{kind: itemRaw, b: encodePacket(&dis)}, time.Second)
	} else {
		c.out.Close()
	}
	c.nc.Close()
	c.rd.close()
	if !c.claimed {
		return // the handshake failed before the client id was this connection's
	}
	if c.sess == nil {
		c.s.releaseAway(c, nil)
		return
	}
	cause := stopCause(c.cause.Load())
	// The will [MQTT-3.1.2-8]: due unless the client said goodbye (MQTT
	// 5's 0x04 asks for it anyway). At a shutdown it stays in core, and
	// the next start publishes it, as after a crash.
	var pending *will
	if w := c.will; w != nil && (!graceful || c.willOK) && cause != stopShutdown {
		switch {
		case cause == stopTakenOver && w.delay > 0:
			// The session goes on with the new connection before the
			// delay ends: no will [MQTT-3.1.3-9].
		case w.delay > 0 && c.persistent:
			pending = w // published by the away session, if the client is not back
		default:
			c.s.publishWill(w)
		}
		if pending == nil {
			c.willSent = true
		}
	}
	c.s.releaseAway(c, c.leave(cause, pending))
}

// reason is the DISCONNECT reason code (0: none) for an MQTT 5 client
// whose connection ends with err, and a log message for an unexpected
// end.
func (c *conn) reason(err error) (byte, string) {
	switch stopCause(c.cause.Load()) {
	case stopShutdown:
		return packets.ErrServerShuttingDown.Code, ""
	case stopTakenOver:
		return packets.ErrSessionTakenOver.Code, ""
	case stopAdmin:
		return packets.ErrAdministrativeAction.Code, ""
	}
	var pe *protoErr
	var ne net.Error
	switch {
	case err == nil, errors.Is(err, errClientDisconnected):
		return 0, ""
	case errors.As(err, &pe):
		return pe.code.Code, "mqtt connection closed: " + pe.what
	case errors.Is(err, guard.ErrFrameTimeout):
		c.s.b.CountFrameTimeout("mqtt")
		return packets.ErrKeepAliveTimeout.Code, "mqtt connection closed: a packet took too long to arrive"
	case errors.Is(err, errPacketTooLarge):
		return packets.ErrPacketTooLarge.Code, "mqtt connection closed: packet too large"
	case errors.Is(err, errMalformedLength):
		return packets.ErrMalformedPacket.Code, "mqtt connection closed: malformed packet"
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return packets.ErrKeepAliveTimeout.Code, "mqtt connection closed: keep-alive timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), errors.Is(err, outbound.ErrStopped):
		return 0, ""
	}
	return packets.ErrUnspecifiedError.Code, "mqtt connection ended"
}

// failClose closes an MQTT 3.1.1 connection whose publish the broker
// could not take: 3.1.1 has no negative acknowledgement, so the client
// learns by the close, after the answers before it (acks.go).
func (c *conn) failClose() {
	c.out.Push(outItem{kind: itemClose})
}

// refusal maps core's answer to a publish to the MQTT 5 reason code of
// its PUBACK or PUBREC, and says whether an MQTT 3.1.1 connection must
// close instead (fail).
func (c *conn) refusal(err error, qos byte) (code byte, fail bool) {
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, core.ErrUnauthorized):
		code = packets.ErrNotAuthorized.Code // core has logged it
	case errors.Is(err, core.ErrAddressFull), errors.Is(err, core.ErrDiskFull):
		code = packets.ErrQuotaExceeded.Code // core has counted and logged it
	default:
		code = packets.ErrUnspecifiedError.Code
		if !errors.Is(err, core.ErrSessionClosed) {
			c.s.log.Warn().Err(err).Str("client", c.clientID).Msg("mqtt publish not accepted")
		}
	}
	// MQTT 3.1.1 has no negative acknowledgement: close the connection
	// rather than confirm what was not stored [MQTT-4.8.0-1].
	return code, c.version < 5 && qos > 0
}

// connAddr names the client in logs.
func (c *conn) String() string {
	return c.clientID + "@" + c.nc.RemoteAddr().String()
}

// assignID makes a client id for a client that sent none.
func (s *Server) assignID() string {
	return "auto-" + strconv.FormatInt(s.started.UnixNano(), 36) + "-" + strconv.FormatUint(s.nextConn.Add(1), 36)
}

// topicOf returns the topic of a publish, resolving and recording topic
// aliases [MQTT-3.3.2-12].
func (c *conn) topicOf(pk *packets.Packet) (string, error) {
	alias := int(pk.Properties.TopicAlias)
	if !pk.Properties.TopicAliasFlag {
		return pk.TopicName, nil
	}
	if alias == 0 || alias > c.s.cfg.TopicAliasMaximum {
		return "", protocolError(packets.ErrTopicAliasInvalid, "topic alias %d", alias)
	}
	if pk.TopicName != "" {
		if c.aliases == nil {
			c.aliases = make([]string, 0, min(c.s.cfg.TopicAliasMaximum, 8))
		}
		for len(c.aliases) < alias {
			c.aliases = append(c.aliases, "")
		}
		// A copy: the packet's buffer becomes a message body.
		c.aliases[alias-1] = strings.Clone(pk.TopicName)
		return pk.TopicName, nil
	}
	if alias > len(c.aliases) || c.aliases[alias-1] == "" {
		return "", protocolError(packets.ErrTopicAliasInvalid, "topic alias %d not set", alias)
	}
	return c.aliases[alias-1], nil
}

// onPublish handles a client's PUBLISH.
func (c *conn) onPublish(pk *packets.Packet) error {
	qos := pk.FixedHeader.Qos
	if code := pk.PublishValidate(uint16(c.s.cfg.TopicAliasMaximum)); code != packets.CodeSuccess {
		return &protoErr{code: code, what: "PUBLISH"}
	}
	if int(qos) > c.s.cfg.MaxQoS {
		return protocolError(packets.ErrQosNotSupported, "PUBLISH at QoS %d", qos)
	}
	topic, err := c.topicOf(pk)
	if err != nil {
		return err
	}
	if !validTopic(topic) {
		return protocolError(packets.ErrTopicNameInvalid, "PUBLISH to %q", topic)
	}
	if qos == 2 && c.hasQoS2(pk.PacketID) {
		// A resend of a publish already taken: answer again, route
		// nothing [MQTT-4.3.3].
		acks := &c.inb().acks
		acks.complete(acks.reserve(packets.Pubrec, pk.PacketID), 0, false)
		return nil
	}
	if qos > 0 {
		if err := c.inboundRoom(qos); err != nil {
			return err
		}
	}
	f := fieldsOf(pk, topic)
	m := f.message(time.Now())
	if topic[0] == '$' {
		// $SYS and the like are the broker's: no client publishes there.
		return c.answer(pk, fmt.Errorf("%w: %s is the broker's topic", core.ErrUnauthorized, topic))
	}
	if n := c.rd.left; n > 0 {
		// A large payload: to its file as it arrives (stream.go).
		if err := c.sess.ReceiveBody(m, c.rd.payload(), int64(n)); err != nil {
			if c.rd.perr != nil {
				return c.rd.perr // cut off mid-payload: the connection ends
			}
			return c.answer(pk, err) // refused (the rest is read past)
		}
	}
	switch {
	case qos == 0:
		err := c.sess.Send(c.s.sends, m)
		if err == nil && pk.FixedHeader.Retain {
			err = c.s.b.Retain(m)
		}
		c.refusal(err, 0)
		return nil
	case qos == 2:
		return c.qos2(pk, m)
	case pk.FixedHeader.Retain:
		// The retained value is journaled by itself after the send:
		// both before the answer.
		err := c.sess.Send(c.s.sends, m)
		if err == nil {
			err = c.s.b.Retain(m)
		}
		return c.answer(pk, err)
	}
	in := c.inb()
	seq := in.acks.reserve(packets.Puback, pk.PacketID)
	in.qos1.Add(1)
	c.sess.SendAsync(m, func(err error) {
		code, fail := c.refusal(err, 1)
		in.qos1.Add(-1)
		in.acks.complete(seq, code, fail)
	})
	return nil
}

// inboundRoom checks, before a QoS 1 or 2 publish is taken, that the
// client keeps within the broker's Receive Maximum: an MQTT 5 client
// that does not is disconnected (0x93) [MQTT-3.3.4-9]; an MQTT 3.1.1
// client, which was never told, is made to wait.
func (c *conn) inboundRoom(qos byte) error {
	max := c.s.cfg.ReceiveMaximum
	in := c.inb()
	if c.version == 5 {
		in.mu.Lock()
		n := len(in.qos2)
		in.mu.Unlock()
		if int(in.qos1.Load())+n >= max {
			return protocolError(packets.ErrReceiveMaximum, "QoS %d PUBLISH", qos)
		}
		return nil
	}
	in.acks.waitBelow(max)
	if c.closing() {
		return net.ErrClosed
	}
	return nil
}

// answer answers a publish already routed (or refused with err).
func (c *conn) answer(pk *packets.Packet, err error) error {
	qos := pk.FixedHeader.Qos
	if qos == 0 {
		c.refusal(err, 0)
		return nil
	}
	typ := byte(packets.Puback)
	if qos == 2 {
		typ = packets.Pubrec
	}
	code, fail := c.refusal(err, qos)
	acks := &c.inb().acks
	acks.complete(acks.reserve(typ, pk.PacketID), code, fail)
	return nil
}

// qos2 takes a QoS 2 publish (method B of the spec, 4.3.3: routed now,
// its packet id remembered until PUBREL so that a resend is not routed
// again). A persistent session remembers the id in core, in the same
// journal transaction as the message, so that neither a restart nor a
// crash can route it twice.
func (c *conn) qos2(pk *packets.Packet, m *core.Message) error {
	id, retain := pk.PacketID, pk.FixedHeader.Retain
	in := c.inb()
	seq := in.acks.reserve(packets.Pubrec, id)
	in.mu.Lock()
	if in.qos2 == nil {
		in.qos2 = make(map[uint16]bool)
	}
	in.qos2[id] = true
	in.mu.Unlock()
	done := func(err error) {
		if err == nil && retain {
			err = c.s.b.Retain(m)
		}
		if err != nil {
			// A refused publish ends its flow: the client sends no
			// PUBREL, and may use the id again.
			c.forgetQoS2(id)
		}
		code, fail := c.refusal(err, 2)
		in.acks.complete(seq, code, fail)
	}
	switch {
	case c.persistent:
		done(c.sendWithRecord(m, qos2Key(id)))
	case retain:
		done(c.sess.Send(c.s.sends, m))
	default:
		c.sess.SendAsync(m, done)
	}
	return nil
}

// sendWithRecord sends m and sets client record key in one transaction.
// In a cluster whose groups keep the message and the client's records
// apart, a transaction cannot hold both (core.ErrCrossGroupTx): they are
// written one after the other, the message first (a crash between the
// two can then route a QoS 2 message twice, never lose one).
func (c *conn) sendWithRecord(m *core.Message, key string) error {
	tx, err := c.sess.Begin()
	if err != nil {
		return err
	}
	if err := tx.Send(m); err != nil {
		tx.Rollback()
		return err
	}
	tx.SetClientRecord(key, []byte{1})
	err = tx.Commit(c.s.sends)
	if !errors.Is(err, core.ErrCrossGroupTx) {
		return err
	}
	if err := c.sess.Send(c.s.sends, m); err != nil {
		return err
	}
	ch := make(chan error, 1)
	if err := c.sess.SetClientRecord(key, []byte{1}, func(err error) { ch <- err }); err != nil {
		return err
	}
	return <-ch
}

// hasQoS2 reports whether the client's QoS 2 publish id awaits PUBREL.
func (c *conn) hasQoS2(id uint16) bool {
	in := c.in.Load()
	if in == nil {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.qos2[id]
}

// forgetQoS2 forgets the client's QoS 2 publish id, reporting whether it
// was known.
func (c *conn) forgetQoS2(id uint16) bool {
	in := c.in.Load()
	if in == nil {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	had := in.qos2[id]
	delete(in.qos2, id)
	return had
}

func qos2Key(id uint16) string { return "i/" + strconv.Itoa(int(id)) }

// onAck handles PUBACK, PUBREC and PUBCOMP for the broker's deliveries,
// and PUBREL for the client's QoS 2 publishes.
func (c *conn) onAck(pk *packets.Packet) error {
	id := pk.PacketID
	acks := &c.inb().acks
	switch pk.FixedHeader.Type {
	case packets.Pubrel:
		seq := acks.reserve(packets.Pubcomp, id)
		if !c.forgetQoS2(id) {
			// [MQTT-4.3.3-11]: 0x92 packet identifier not found.
			acks.complete(seq, packets.ErrPacketIdentifierNotFound.Code, false)
			return nil
		}
		if !c.persistent {
			acks.complete(seq, 0, false)
			return nil
		}
		// The id is forgotten on disk before PUBCOMP: the client may use
		// it again for a new message once it has PUBCOMP.
		c.sess.SetClientRecord(qos2Key(id), nil, func(err error) {
			if err != nil {
				c.s.log.Warn().Err(err).Str("client", c.clientID).Msg("mqtt: PUBREL not journaled")
			}
			acks.complete(seq, 0, false)
		})
		return nil
	case packets.Puback, packets.Pubcomp:
		c.outMu.Lock()
		e := c.inflight[id]
		ok := e != nil && (pk.FixedHeader.Type == packets.Puback && e.qos == 1 || pk.FixedHeader.Type == packets.Pubcomp && e.rel)
		if ok {
			delete(c.inflight, id)
		}
		c.outMu.Unlock()
		if !ok {
			return nil // an answer to nothing in flight: ignored
		}
		if e.cons != nil {
			e.cons.Ack(e.id)
			e.cons.Flow(1)
		}
		c.out.Kick()
		return nil
	case packets.Pubrec:
		c.outMu.Lock()
		e := c.inflight[id]
		known := e != nil && e.qos == 2
		failed := known && !e.rel && pk.ReasonCode >= 0x80
		switch {
		case failed:
			// The client refused the message: its flow ends here
			// [MQTT-4.3.3-4]; it is done with, as if delivered.
			delete(c.inflight, id)
		case known:
			e.rel = true
		}
		c.outMu.Unlock()
		if failed {
			if e.cons != nil {
				e.cons.Ack(e.id)
				e.cons.Flow(1)
			}
			c.out.Kick()
			return nil
		}
		seq := acks.reserve(packets.Pubrel, id)
		switch {
		case !known:
			code := byte(0)
			if c.version == 5 {
				code = packets.ErrPacketIdentifierNotFound.Code
			}
			acks.complete(seq, code, false)
		case e.mark && e.cons != nil:
			// PUBREL only once core knows the client has the message: a
			// restart then resends PUBREL, not the message.
			if err := e.cons.Mark(e.id, markRel|uint32(id), func(err error) {
				if err != nil {
					c.s.log.Warn().Err(err).Str("client", c.clientID).Msg("mqtt: PUBREC not journaled")
				}
				acks.complete(seq, 0, false)
			}); err != nil {
				acks.complete(seq, 0, false)
			}
		default:
			acks.complete(seq, 0, false)
		}
		return nil
	}
	return nil
}

// markRel, in a delivery's mark, says that the client acknowledged the
// PUBLISH of a QoS 2 delivery with PUBREC (the packet id is in the low
// 16 bits).
const markRel = 1 << 16

package mqtt

import (
	"encoding/binary"
	"errors"
	"strings"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/core/guard"
	"github.com/junctionmq/junction/internal/outbound"
)

// errRefused ends a connection whose CONNECT was answered with a refusal
// (or that was closed without an answer, as the spec has it for what is
// not a valid CONNECT).
var errRefused = errors.New("mqtt: connection refused")

// CONNACK return codes of MQTT 3.1 and 3.1.1.
const (
	connack3BadVersion     = 0x01 // unacceptable protocol level
	connack3BadClientID    = 0x02 // identifier rejected
	connack3Unavailable    = 0x03 // server unavailable
	connack3BadCredentials = 0x04 // bad user name or password
	connack3NotAuthorized  = 0x05 // not authorized
)

// handshake reads the CONNECT, authenticates the client, takes over its
// client id, opens or resumes its session and answers CONNACK. On error
// the connection ends (after a CONNACK with a refusal code where the
// protocol has one for the cause).
func (c *conn) handshake() error {
	s := c.s
	deadline := c.connectBy
	// The CONNECT, read before the client is authenticated: within
	// PreAuthMaxPacketSize, its bytes charged to the broker's
	// pre-authentication budget as they arrive (preauth.go), and read
	// exactly (no read-ahead to charge).
	if err := c.rd.setDeadline(); err != nil {
		return err
	}
	limit := min(s.cfg.MaxPacketSize, s.cfg.PreAuthMaxPacketSize)
	acct := s.b.PreAuth(limit + 5)
	defer acct.Close() // authenticated or refused: the bytes go back
	pkt, err := readConnect(c.nc, limit, acct)
	if err != nil {
		return c.refuseConnect(err)
	}
	first, _, hlen, _, _ := parseHeader(pkt)
	if first != packets.Connect<<4 {
		return errRefused // reserved flags set [MQTT-2.2.2-2]
	}
	body := pkt[hlen:]
	name, level, ok := connectVersion(body)
	if !ok || name != "MQTT" && name != "MQIsdp" {
		return errRefused // [MQTT-3.1.2-1]
	}
	if !(name == "MQTT" && (level == 4 || level == 5)) && !(name == "MQIsdp" && level == 3) {
		// [MQTT-3.1.2-2]: return code 0x01, in the 3.1.1 form every
		// version's client understands, then close.
		return c.refuse(connack3BadVersion, packets.ErrUnsupportedProtocolVersion, 4)
	}
	c.version = level
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect, Remaining: len(body)}, ProtocolVersion: level}
	if err := decode(&pk, body); err != nil {
		if errors.Is(err, packets.ErrClientIdentifierNotValid) {
			return c.refuse(connack3BadClientID, packets.ErrClientIdentifierNotValid, level)
		}
		return c.refuse(0, malformed(err, "CONNECT").code, level)
	}
	if code := pk.ConnectValidate(); code != packets.CodeSuccess {
		return c.refuse(0, code, level)
	}
	if level < 5 && pk.Connect.PasswordFlag && !pk.Connect.UsernameFlag {
		return errRefused // [MQTT-3.1.2-22]
	}
	if level == 5 && pk.Properties.AuthenticationMethod != "" {
		return c.refuse(0, packets.ErrBadAuthenticationMethod, level) // no enhanced authentication
	}
	// The packet is a view of the read buffer: copy what is kept.
	c.clientID = strings.Clone(pk.Connect.ClientIdentifier)
	assigned := false
	if c.clientID == "" {
		if level == 3 || level == 4 && !pk.Connect.Clean {
			// 3.1 needs an id; 3.1.1 assigns one only to a clean session
			// [MQTT-3.1.3-8].
			return c.refuse(connack3BadClientID, packets.ErrClientIdentifierNotValid, level)
		}
		c.clientID, assigned = s.assignID(), true
	}
	login, password := string(pk.Connect.Username), string(pk.Connect.Password)
	c.user, err = s.b.AuthenticateFrom(c.ctx, c.nc.RemoteAddr().String(), login, password)
	if err != nil {
		// Credentials that do not pass are a bad user name or password;
		// no credentials where some are needed, not authorized.
		if pk.Connect.UsernameFlag {
			return c.refuse(connack3BadCredentials, packets.ErrBadUsernameOrPassword, level)
		}
		return c.refuse(connack3NotAuthorized, packets.ErrNotAuthorized, level)
	}
	if pk.Connect.WillFlag {
		if !validTopic(pk.Connect.WillTopic) {
			return c.refuse(0, packets.ErrTopicNameInvalid, level)
		}
		if int(pk.Connect.WillQos) > s.cfg.MaxQoS {
			return c.refuse(0, packets.ErrQosNotSupported, level)
		}
		c.will = willOf(&pk, c.user)
	}
	// The session: expiry, keep-alive, flow.
	requested := pk.Properties.SessionExpiryInterval
	if level < 5 {
		requested = 0
		if !pk.Connect.Clean {
			requested = ^uint32(0) // until the broker's cap
		}
	}
	c.setExpiry(requested)
	c.keepAlive = time.Duration(pk.Connect.Keepalive) * time.Second
	serverKeepAlive := false
	if max := s.cfg.MaxKeepAlive; level == 5 && max > 0 && (c.keepAlive == 0 || c.keepAlive > max) {
		c.keepAlive, serverKeepAlive = max, true
	}
	c.window = s.cfg.ReceiveMaximum
	if rm := int(pk.Properties.ReceiveMaximum); rm > 0 {
		c.window = min(c.window, rm) // [MQTT-3.3.4-9]
	}
	c.maxOut = int(pk.Properties.MaximumPacketSize)

	// The client id: a connection holding it is taken over.
	away, err := s.claim(c)
	if err != nil {
		if errors.Is(err, errServerClosing) {
			return errRefused
		}
		return c.refuse(connack3Unavailable, packets.ErrServerUnavailable, level)
	}
	c.claimed = true
	sess, err := c.openSession(deadline)
	if err != nil {
		s.log.Warn().Err(err).Str("client", c.clientID).Msg("mqtt: no core session")
		return c.refuse(connack3Unavailable, packets.ErrServerUnavailable, level)
	}
	c.sess = sess
	c.live.Store(sess)
	if c.closing() {
		sess.Close() // stopped meanwhile: stop did not see the session
	}
	if c.will != nil && s.b.Authorizing() {
		// A will the user may not send is dropped, as a refused QoS 0
		// publish would be.
		if sess.AuthorizeSend(TopicToAddress(c.will.topic), core.Multicast) != nil {
			c.will = nil
		}
	}
	present, state, err := c.startSession(pk.Connect.Clean, away)
	if err != nil {
		s.log.Warn().Err(err).Str("client", c.clientID).Msg("mqtt: session state not read or not stored")
		return c.refuse(connack3Unavailable, packets.ErrServerUnavailable, level)
	}

	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, ProtocolVersion: level, SessionPresent: present}
	if level == 5 {
		p := &ack.Properties
		if requested > c.expiry {
			p.SessionExpiryInterval, p.SessionExpiryIntervalFlag = c.expiry, true
		}
		p.ReceiveMaximum = uint16(s.cfg.ReceiveMaximum)
		if s.cfg.MaxQoS < 2 {
			p.MaximumQos, p.MaximumQosFlag = byte(s.cfg.MaxQoS), true
		}
		p.RetainAvailable, p.RetainAvailableFlag = 1, true
		p.MaximumPacketSize = uint32(min(s.cfg.MaxPacketSize, maxAdvertisedPacket))
		if sess.StreamThreshold() > 0 {
			p.MaximumPacketSize = uint32(min(max(s.cfg.MaxPacketSize, s.cfg.MaxMessageSize), maxAdvertisedPacket))
		}
		if assigned {
			p.AssignedClientID = c.clientID
		}
		p.TopicAliasMaximum = uint16(s.cfg.TopicAliasMaximum)
		p.WildcardSubAvailable, p.WildcardSubAvailableFlag = 1, true
		p.SubIDAvailable, p.SubIDAvailableFlag = 1, true
		p.SharedSubAvailable, p.SharedSubAvailableFlag = 1, true
		if serverKeepAlive {
			p.ServerKeepAlive, p.ServerKeepAliveFlag = uint16(min(c.keepAlive/time.Second, 65535)), true
		}
	}
	// Written by this worker (Flush) rather than a writer's goroutine
	// started for it; what the resumed session queues starts one, which
	// writes the CONNACK first.
	c.out.PushLater(outItem{kind: itemRaw, b: encodePacket(&ack)})
	c.connected = true
	if present {
		c.resume(state)
	}
	c.out.Flush()
	return nil
}

// connectVersion reads the protocol name and level at the start of a
// CONNECT's body.
func connectVersion(body []byte) (name string, level byte, ok bool) {
	if len(body) < 2 {
		return "", 0, false
	}
	n := int(binary.BigEndian.Uint16(body))
	if len(body) < 2+n+1 {
		return "", 0, false
	}
	return string(body[2 : 2+n]), body[2+n], true
}

// CONNACKs for CONNECTs refused before they are read whole: MQTT 5 with
// a reason code and no properties, MQTT 3.1.1 with a return code.
var (
	connackTooLarge     = []byte{0x20, 0x03, 0x00, packets.ErrPacketTooLarge.Code, 0x00}
	connackBusy         = []byte{0x20, 0x03, 0x00, packets.ErrServerBusy.Code, 0x00}
	connackUnavailable3 = []byte{0x20, 0x02, 0x00, connack3Unavailable}
)

// refuseConnect answers a CONNECT that readConnect refused, in the
// client's version when it is known, and counts the refusal (core's
// pre-authentication statistics); a CONNECT cut short (EOF, the connect
// timeout) gets no answer. MQTT 3.1.1 has no return code for a packet
// too large: the client is just closed.
func (c *conn) refuseConnect(err error) error {
	var r *connectRefusal
	if !errors.As(err, &r) {
		return err
	}
	var answer []byte
	switch {
	case r.TooLarge > 0:
		c.s.b.CountPreAuthRefusal("mqtt", core.PreAuthFrameTooLarge)
		if r.Level == 5 {
			answer = connackTooLarge
		}
	case errors.Is(err, guard.ErrBudget):
		c.s.b.CountPreAuthRefusal("mqtt", core.PreAuthBudget)
		switch r.Level {
		case 5:
			answer = connackBusy
		case 3, 4:
			answer = connackUnavailable3
		}
	}
	c.s.log.Debug().Err(err).Str("remote", c.nc.RemoteAddr().String()).Msg("mqtt CONNECT refused")
	if answer != nil {
		c.out.Finish(outItem{kind: itemRaw, b: answer}, time.Second)
	}
	return errRefused
}

// refuse answers a CONNECT with a refusal and ends the handshake: MQTT 5
// with reason code v5 (when it is a CONNACK reason), 3.1 and 3.1.1 with
// return code v3; with v3 0 an MQTT 3 client is just closed (its
// protocol has no code for the cause). level is the form of the answer.
func (c *conn) refuse(v3 byte, v5 packets.Code, level byte) error {
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, ProtocolVersion: level}
	switch {
	case level == 5:
		ack.ReasonCode = v5.Code
	case v3 != 0:
		ack.ReasonCode = v3
	default:
		return errRefused
	}
	c.out.Finish(outItem{kind: itemRaw, b: encodePacket(&ack)}, time.Second)
	return errRefused
}

// openSession opens the connection's core session, waiting a little for
// the session of the id to be let go of (a previous connection's
// teardown, or its expiry running at this moment).
func (c *conn) openSession(deadline time.Time) (*core.Session, error) {
	opts := core.SessionOptions{
		User: c.user, ClientID: clientIDPrefix + c.clientID,
		Protocol: "mqtt", RemoteAddr: c.nc.RemoteAddr().String(),
		Close: func() { c.stop(stopAdmin) },
		// The cluster's fence: reset the connection (what is queued for
		// the client is dropped), then stop as for an administrator.
		Abort: func() { outbound.Abort(c.nc); c.stop(stopAdmin) },
	}
	for {
		sess, err := c.s.b.NewSession(opts)
		if !errors.Is(err, core.ErrClientIDInUse) || time.Now().After(deadline) {
			return sess, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

package mqtt

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/junctionmq/junction/core"
)

// Sessions. An MQTT session's state lives in core, so that it is exact
// after a restart and a kill -9 [MQTT-3.2.2-2, MQTT-4.4.0-1]:
//
//   - its subscriptions are core consumers: a persistent session's are
//     durable subscriptions of the client id "mqtt/<id>" named by their
//     filter (so their messages are journaled and wait while the client
//     is away); a clean session's are non-durable; $share/GROUP/filter
//     are core shared subscriptions;
//   - its deliveries of QoS 1 and 2 in flight carry their packet id as a
//     core mark (Consumer.Mark), journaled with the message, so that a
//     resumed session sends them again under the same id, and a QoS 2
//     delivery acknowledged by PUBREC sends PUBREL again, not the
//     message;
//   - the rest is in client records (Session.SetClientRecord) of
//     "mqtt/<id>": "s" the session (its expiry interval, when its last
//     connection ended, its user), "w" the will, "f/<filter>" each
//     subscription's options, "i/<id>" each QoS 2 publish of the client
//     received and not yet released (written in the same journal
//     transaction as the message).
//
// A persistent session without a connection is an awaySession: timers
// end it when it expires and publish its will after the will delay.

// Client record keys.
const (
	recSession = "s"
	recWill    = "w"
	recFilter  = "f/" // + filter
	recQoS2    = "i/" // + packet id
)

// sessionRecord is the "s" record.
type sessionRecord struct {
	expiry       uint32    // seconds
	disconnected time.Time // zero while a connection holds it (or held it at a crash)
	user         string
}

func (r sessionRecord) encode() []byte {
	b := []byte{1}
	b = binary.AppendUvarint(b, uint64(r.expiry))
	var at int64
	if !r.disconnected.IsZero() {
		at = r.disconnected.Unix()
	}
	b = binary.AppendVarint(b, at)
	return appendRecStr(b, r.user)
}

func decodeSessionRecord(p []byte) (sessionRecord, bool) {
	d := recDecoder{b: p}
	if d.byte() != 1 {
		return sessionRecord{}, false
	}
	r := sessionRecord{expiry: uint32(d.uvarint())}
	if at := d.varint(); at != 0 {
		r.disconnected = time.Unix(at, 0)
	}
	r.user = d.str()
	return r, d.ok()
}

// deadline is when a session whose last connection ended as r says
// expires; a session held by a connection when the broker stopped is
// counted from start.
func (r sessionRecord) deadline(start time.Time) time.Time {
	from := r.disconnected
	if from.IsZero() {
		from = start
	}
	return from.Add(time.Duration(r.expiry) * time.Second)
}

// will is a client's will message.
type will struct {
	pubFields
	delay uint32 // seconds
	owner string // the client's user, who publishes it
}

func willOf(pk *packets.Packet, owner string) *will {
	wp := &pk.Connect.WillProperties
	w := &will{delay: wp.WillDelayInterval, owner: owner}
	w.pubFields = pubFields{
		topic: strings.Clone(pk.Connect.WillTopic), payload: append([]byte(nil), pk.Connect.WillPayload...),
		qos: pk.Connect.WillQos, retain: pk.Connect.WillRetain,
		format:        wp.PayloadFormatFlag && wp.PayloadFormat == 1,
		expiry:        wp.MessageExpiryInterval,
		contentType:   strings.Clone(wp.ContentType),
		responseTopic: strings.Clone(wp.ResponseTopic),
		correlation:   append([]byte(nil), wp.CorrelationData...),
	}
	for _, u := range wp.User {
		w.pubFields.user = append(w.pubFields.user, packets.UserProperty{Key: strings.Clone(u.Key), Val: strings.Clone(u.Val)})
	}
	return w
}

func (w *will) encode() []byte {
	b := []byte{1, w.qos, boolByte(w.retain), boolByte(w.format)}
	b = binary.AppendUvarint(b, uint64(w.delay))
	b = binary.AppendUvarint(b, uint64(w.expiry))
	b = appendRecStr(b, w.topic)
	b = appendRecStr(b, string(w.payload))
	b = appendRecStr(b, w.contentType)
	b = appendRecStr(b, w.responseTopic)
	b = appendRecStr(b, string(w.correlation))
	b = appendRecStr(b, w.owner)
	b = binary.AppendUvarint(b, uint64(len(w.pubFields.user)))
	for _, u := range w.pubFields.user {
		b = appendRecStr(b, u.Key)
		b = appendRecStr(b, u.Val)
	}
	return b
}

func decodeWill(p []byte) (*will, bool) {
	d := recDecoder{b: p}
	if d.byte() != 1 {
		return nil, false
	}
	w := &will{}
	w.qos, w.retain, w.format = d.byte(), d.byte() == 1, d.byte() == 1
	w.delay, w.expiry = uint32(d.uvarint()), uint32(d.uvarint())
	w.topic = d.str()
	w.payload = []byte(d.str())
	w.contentType, w.responseTopic = d.str(), d.str()
	if c := d.str(); c != "" {
		w.correlation = []byte(c)
	}
	w.owner = d.str()
	for n := d.uvarint(); n > 0 && d.ok(); n-- {
		w.pubFields.user = append(w.pubFields.user, packets.UserProperty{Key: d.str(), Val: d.str()})
	}
	return w, d.ok() && w.qos <= 2
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func appendRecStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// recDecoder reads a client record; the first error sticks.
type recDecoder struct {
	b   []byte
	bad bool
}

func (d *recDecoder) ok() bool { return !d.bad }

func (d *recDecoder) byte() byte {
	if len(d.b) == 0 {
		d.bad = true
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *recDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recDecoder) str() string {
	n := d.uvarint()
	if d.bad || uint64(len(d.b)) < n {
		d.bad = true
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// sessionState is what a session left in core: its records by key.
type sessionState struct {
	session sessionRecord
	has     bool           // an "s" record
	filters []filterRecord // "f/" records
	qos2    []uint16       // "i/" records
	will    *will          // "w"
}

type filterRecord struct {
	filter string
	opts   subOptions
}

func parseState(recs []core.ClientRecord) sessionState {
	var st sessionState
	for _, r := range recs {
		switch {
		case r.Key == recSession:
			st.session, st.has = decodeSessionRecord(r.Value)
		case r.Key == recWill:
			st.will, _ = decodeWill(r.Value)
		case strings.HasPrefix(r.Key, recFilter):
			if o, n := binary.Uvarint(r.Value); n > 0 {
				st.filters = append(st.filters, filterRecord{filter: r.Key[len(recFilter):], opts: subOptions(o)})
			}
		case strings.HasPrefix(r.Key, recQoS2):
			if id, err := strconv.ParseUint(r.Key[len(recQoS2):], 10, 16); err == nil {
				st.qos2 = append(st.qos2, uint16(id))
			}
		}
	}
	return st
}

// startSession sets the session up for this connection: it resumes what
// core holds for the client id unless the client asked for a clean
// start (or it has expired), and stores what a restart must know (the
// session record, the will) before CONNACK. It reports whether a session
// was present [MQTT-3.2.2-2], and its state.
func (c *conn) startSession(clean bool, away *awaySession) (bool, sessionState, error) {
	st := parseState(c.sess.ClientRecords())
	now := time.Now()
	present := st.has && now.Before(st.session.deadline(c.s.started))
	if clean || !present {
		// [MQTT-3.1.2-6] (3.1.1), [MQTT-3.1.2-4] (5): a clean start
		// discards what was there. The previous session ends: a will it
		// was holding back is due.
		if away != nil && away.will != nil {
			c.s.publishWill(away.will)
		}
		for _, info := range c.sess.DurableSubscriptions() {
			c.sess.Unsubscribe(info.Name)
		}
		if len(st.filters) > 0 || st.has || st.will != nil || len(st.qos2) > 0 {
			c.sess.ClearClientRecords("", nil)
		}
		present, st = false, sessionState{}
	}
	// What a restart must find, on disk before CONNACK.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	done := func(err error) {
		if err != nil {
			mu.Lock()
			firstErr = cmpOr(firstErr, err)
			mu.Unlock()
		}
		wg.Done()
	}
	set := func(key string, value []byte) {
		wg.Add(1)
		if err := c.sess.SetClientRecord(key, value, done); err != nil {
			done(err)
		}
	}
	if c.persistent {
		set(recSession, sessionRecord{expiry: c.expiry, user: c.user}.encode())
	} else if st.has {
		set(recSession, nil) // resumed, but it ends with this connection
	}
	if c.will != nil {
		set(recWill, c.will.encode())
	} else if st.will != nil || away != nil && away.will != nil {
		set(recWill, nil)
	}
	wg.Wait()
	if present {
		c.inMu.Lock()
		for _, id := range st.qos2 {
			if c.inQoS2 == nil {
				c.inQoS2 = make(map[uint16]bool)
			}
			c.inQoS2[id] = true
		}
		c.inMu.Unlock()
	}
	return present, st, firstErr
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// resume attaches the subscriptions of a resumed session, with the
// options their records hold. The packet ids core holds marked for its
// messages are reserved first, so that no new delivery takes one of
// them before its message comes back. A durable subscription without a
// record (its SUBSCRIBE was not answered) is dropped.
func (c *conn) resume(st sessionState) {
	infos := c.sess.DurableSubscriptions()
	byName := make(map[string]bool, len(infos))
	c.outMu.Lock()
	for _, info := range infos {
		byName[info.Name] = true
		for _, m := range info.Marks {
			if c.reserved == nil {
				c.reserved = make(map[uint16]bool)
			}
			c.reserved[uint16(m)] = true
		}
	}
	c.outMu.Unlock()
	kept := make(map[string]bool, len(st.filters))
	for _, f := range st.filters {
		if _, _, shared := splitShared(f.filter); shared || !byName[f.filter] {
			c.sess.SetClientRecord(recFilter+f.filter, nil, nil)
			continue
		}
		kept[f.filter] = true
		if _, err := c.subscribeCore(f.filter, f.opts); err != nil {
			c.s.log.Warn().Err(err).Str("client", c.clientID).Str("filter", f.filter).Msg("mqtt: subscription not resumed")
		}
	}
	for _, info := range infos {
		if !kept[info.Name] {
			c.sess.Unsubscribe(info.Name)
		}
	}
}

// leave lets go of the session as the connection ends: a persistent
// session waits in core for the client (its deliveries in flight go back
// to their queues, marked), an ephemeral one is discarded.
func (c *conn) leave() {
	c.outMu.Lock()
	c.inflight, c.reserved = nil, nil
	c.outMu.Unlock()
	s := c.s
	if !c.persistent {
		for _, sub := range c.subs {
			if sub.durable {
				sub.cons.Close()
				c.sess.Unsubscribe(sub.filter)
			}
		}
		// A resumed session that ends now may have left durable
		// subscriptions this connection never attached.
		for _, info := range c.sess.DurableSubscriptions() {
			c.sess.Unsubscribe(info.Name)
		}
		c.sess.ClearClientRecords("", nil)
		c.sess.Close()
		return
	}
	now := time.Now()
	rec := sessionRecord{expiry: c.expiry, disconnected: now, user: c.user}
	c.sess.SetClientRecord(recSession, rec.encode(), nil)
	var pending *will
	if w := c.will; w != nil && !c.willSent {
		pending = w
	}
	c.sess.Close()
	if s.isClosing() {
		return // the next start picks it up from the records
	}
	var willAt time.Time
	if pending != nil {
		willAt = now.Add(time.Duration(pending.delay) * time.Second)
	}
	s.awayFrom(c.clientID, rec.deadline(now), pending, willAt)
}

// publishWill publishes the connection's will as it ends without a
// DISCONNECT (or with MQTT 5's 0x04) [MQTT-3.1.2-8]: now, from the
// client's own session, unless it has a will delay and its session
// lives on (then the away session publishes it when the delay ends, if
// the client is not back), or the connection was taken over by another
// that continues the session.
func (c *conn) publishWill(takenOver bool) {
	w := c.will
	if w == nil {
		return
	}
	if w.delay > 0 && c.persistent {
		return // leave() hands it to the away session
	}
	if takenOver && w.delay > 0 {
		return
	}
	c.willSent = true
	if err := c.sendWill(c.sess, w); err != nil {
		c.s.log.Warn().Err(err).Str("client", c.clientID).Msg("mqtt: will not published")
	}
	c.sess.SetClientRecord(recWill, nil, nil)
}

// sendWill sends w through sess.
func (c *conn) sendWill(sess *core.Session, w *will) error {
	return sendWill(c.s.b, sess, w)
}

func sendWill(b *core.Broker, sess *core.Session, w *will) error {
	m := w.message(time.Now())
	if anycast, _, _ := b.AddressRoutingTypes(m.Address); anycast {
		m.RoutingType = core.Anycast
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sess.Send(ctx, m); err != nil {
		return err
	}
	if w.retain {
		return b.Retain(m)
	}
	return nil
}

// publishWill publishes a will of a session without a connection, as its
// user, from a session of the broker's own.
func (s *Server) publishWill(w *will) {
	sess, err := s.b.NewSession(core.SessionOptions{User: w.owner})
	if err != nil {
		return
	}
	defer sess.Close()
	if err := sendWill(s.b, sess, w); err != nil {
		s.log.Warn().Err(err).Msg("mqtt: will not published")
	}
}

// awaySession is a persistent session without a connection.
type awaySession struct {
	s        *Server
	clientID string
	will     *will // held back by its delay; nil once published

	expiry *time.Timer
	willT  *time.Timer
	busy   sync.WaitGroup // a timer's work in progress
}

// awayFrom registers the session of clientID as away: it ends at
// deadline, and its will (if any) is published at willAt, or as the
// session ends if that comes first.
func (s *Server) awayFrom(clientID string, deadline time.Time, w *will, willAt time.Time) {
	a := &awaySession{s: s, clientID: clientID, will: w}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.byID[clientID] != nil {
		return // back already, or the next start picks it up
	}
	s.away[clientID] = a
	a.expiry = time.AfterFunc(max(0, time.Until(deadline)), func() { a.fire(true) })
	if w != nil && willAt.Before(deadline) {
		a.willT = time.AfterFunc(max(0, time.Until(willAt)), func() { a.fire(false) })
	}
}

// stopTimers stops the timers (the client is back, or the server
// closes).
func (a *awaySession) stopTimers() {
	a.expiry.Stop()
	if a.willT != nil {
		a.willT.Stop()
	}
}

// wait waits for a timer's work in progress.
func (a *awaySession) wait() { a.busy.Wait() }

// fire runs a timer's work: the will's publication (expired false), or
// the end of the session (expired true; the will goes first if it is
// still held back).
func (a *awaySession) fire(expired bool) {
	s := a.s
	s.mu.Lock()
	if s.closing || s.away[a.clientID] != a {
		s.mu.Unlock()
		return
	}
	a.busy.Add(1)
	if expired {
		delete(s.away, a.clientID)
	}
	s.wg.Add(1)
	w := a.will
	a.will = nil
	s.mu.Unlock()
	defer s.wg.Done()
	defer a.busy.Done()
	if w != nil {
		s.publishWill(w)
		s.setRecord(a.clientID, recWill, nil)
	}
	if expired {
		s.endSession(a.clientID)
	}
}

// setRecord sets a client record of an MQTT client id that no
// connection holds.
func (s *Server) setRecord(clientID, key string, value []byte) {
	sess, err := s.b.NewSession(core.SessionOptions{ClientID: clientIDPrefix + clientID})
	if err != nil {
		return // connected again meanwhile: it keeps its own records
	}
	defer sess.Close()
	sess.SetClientRecord(key, value, nil)
}

// endSession discards the session of an MQTT client id that no
// connection holds: its durable subscriptions (and their messages) and
// its records.
func (s *Server) endSession(clientID string) {
	sess, err := s.b.NewSession(core.SessionOptions{ClientID: clientIDPrefix + clientID})
	if err != nil {
		return // connected again meanwhile
	}
	defer sess.Close()
	for _, info := range sess.DurableSubscriptions() {
		sess.Unsubscribe(info.Name)
	}
	sess.ClearClientRecords("", nil)
	s.log.Debug().Str("client", clientID).Msg("mqtt: expired session ended")
}

// restore picks up, at start, the sessions a previous run left in core:
// each persistent one waits for its client until it expires (counted
// from when its last connection ended, or from now if one held it when
// the broker stopped); wills not yet published are published after
// their delay, counted the same way (the connection that set them is
// gone). Durable subscriptions of MQTT client ids without records (left
// by an older version) expire after MaxSessionExpiry.
func (s *Server) restore() error {
	now := time.Now()
	seen := make(map[string]bool)
	for _, holder := range s.b.ClientRecordHolders() {
		id, ok := strings.CutPrefix(holder, clientIDPrefix)
		if !ok {
			continue
		}
		seen[holder] = true
		st, err := s.stateOf(id)
		if err != nil {
			return err
		}
		if !st.has {
			// A clean session's will, left by a crash: its session ended
			// with the connection.
			if st.will != nil {
				s.publishWill(st.will)
			}
			s.endSession(id)
			continue
		}
		var willAt time.Time
		if w := st.will; w != nil {
			from := st.session.disconnected
			if from.IsZero() {
				from = now
			}
			willAt = from.Add(time.Duration(w.delay) * time.Second)
		}
		s.awayFrom(id, st.session.deadline(now), st.will, willAt)
	}
	for _, holder := range s.b.DurableClientIDs() {
		if id, ok := strings.CutPrefix(holder, clientIDPrefix); ok && !seen[holder] {
			s.awayFrom(id, now.Add(s.cfg.MaxSessionExpiry), nil, time.Time{})
		}
	}
	return nil
}

// stateOf reads the records of an MQTT client id no connection holds.
func (s *Server) stateOf(clientID string) (sessionState, error) {
	sess, err := s.b.NewSession(core.SessionOptions{ClientID: clientIDPrefix + clientID})
	if err != nil {
		if errors.Is(err, core.ErrClientIDInUse) {
			return sessionState{}, nil
		}
		return sessionState{}, err
	}
	defer sess.Close()
	return parseState(sess.ClientRecords()), nil
}

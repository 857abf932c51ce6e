package mqtt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
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
// errSessionUnknown: the session's state could not be read (a cluster
// group without a leader); the client is refused with "server
// unavailable" and tries again.
var errSessionUnknown = errors.New("mqtt: session state unknown")

type sessionState struct {
	session sessionRecord
	has     bool           // an "s" record
	filters []filterRecord // "f/" records
	qos2    []uint16       // "i/" records
	will    *will          // "w"
	// subs are the client id's durable subscriptions, read with the
	// records when the session is resumed.
	subs []core.SubscriptionInfo
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
//
// A session whose state cannot be read (on a cluster node, a group
// without a leader for the moment) is an error, so that the client is
// refused and tries again: taking unknown state for none would discard
// the session, its subscriptions and their messages.
func (c *conn) startSession(clean bool, away *awaySession) (bool, sessionState, error) {
	recs, err := c.sess.ClientRecords()
	if err != nil {
		return false, sessionState{}, fmt.Errorf("%w: %w", errSessionUnknown, err)
	}
	st := parseState(recs)
	now := time.Now()
	// A session whose last connection is still recorded as holding it
	// was taken over just now (a crash's are counted from the start, by
	// their away session, which ends them in time).
	present := st.has && (st.session.disconnected.IsZero() || now.Before(st.session.deadline(now)))
	subs, err := c.sess.DurableSubscriptions()
	if err != nil {
		return false, sessionState{}, fmt.Errorf("%w: %w", errSessionUnknown, err)
	}
	if clean || !present {
		// [MQTT-3.1.2-6] (3.1.1), [MQTT-3.1.2-4] (5): a clean start
		// discards what was there. The previous session ends: a will it
		// was holding back is due.
		if away != nil && away.will != nil {
			c.s.publishWill(away.will)
		}
		for _, info := range subs {
			c.sess.Unsubscribe(info.Name)
		}
		if len(st.filters) > 0 || st.has || st.will != nil || len(st.qos2) > 0 {
			c.sess.ClearClientRecords("", nil)
		}
		present, st = false, sessionState{}
	} else {
		st.subs = subs
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
	c.stateKept = c.persistent || c.will != nil || present
	if present && len(st.qos2) > 0 {
		in := c.inb()
		in.mu.Lock()
		in.qos2 = make(map[uint16]bool, len(st.qos2))
		for _, id := range st.qos2 {
			in.qos2[id] = true
		}
		in.mu.Unlock()
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
	infos := st.subs
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
// to their queues, marked), an ephemeral one is discarded. It returns the
// away session a persistent one becomes (nil otherwise), with the will
// still due after its delay (pending).
func (c *conn) leave(cause stopCause, pending *will) *awaySession {
	c.outMu.Lock()
	c.inflight, c.reserved = nil, nil
	c.outMu.Unlock()
	// Closing the session detaches the consumers. The records are then
	// written through a session of the broker's own with the client id:
	// stop may have closed the connection's already.
	c.sess.Close()
	keepWill := c.will != nil && !c.willSent
	if !c.persistent {
		if !c.stateKept && !keepWill {
			return nil // nothing in core to clean up
		}
		c.s.withClientID(c.clientID, func(sess *core.Session) {
			// A resumed session that ends now leaves durable
			// subscriptions and records.
			subs, err := sess.DurableSubscriptions()
			if err != nil {
				c.s.log.Warn().Err(err).Str("client", c.clientID).Msg("mqtt: the ended session's subscriptions are unknown: left for the session's expiry")
				return
			}
			for _, info := range subs {
				sess.Unsubscribe(info.Name)
			}
			if !keepWill {
				sess.ClearClientRecords("", nil)
				return
			}
			// A will kept for the next start (a shutdown), and nothing else.
			recs, err := sess.ClientRecords()
			if err != nil {
				c.s.log.Warn().Err(err).Str("client", c.clientID).Msg("mqtt: the ended session's records are unknown: left in place")
				return
			}
			for _, r := range recs {
				if r.Key != recWill {
					sess.SetClientRecord(r.Key, nil, nil)
				}
			}
		})
		return nil
	}
	now := time.Now()
	rec := sessionRecord{expiry: c.expiry, disconnected: now, user: c.user}
	c.s.withClientID(c.clientID, func(sess *core.Session) {
		sess.SetClientRecord(recSession, rec.encode(), nil)
		if c.will != nil && !keepWill {
			sess.SetClientRecord(recWill, nil, nil)
		}
	})
	a := &awaySession{s: c.s, clientID: c.clientID, will: pending, deadline: rec.deadline(now)}
	if pending != nil {
		a.willAt = now.Add(time.Duration(pending.delay) * time.Second)
	}
	return a
}

// withClientID runs f with a session of the broker's own holding the
// MQTT client id (for its durable subscriptions and records), unless
// another session holds it.
func (s *Server) withClientID(clientID string, f func(*core.Session)) {
	sess, err := s.b.NewSession(core.SessionOptions{ClientID: clientIDPrefix + clientID})
	if err != nil {
		return
	}
	defer sess.Close()
	f(sess)
}

func sendWill(b *core.Broker, sess *core.Session, w *will) error {
	m := w.message(time.Now())
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

// publishWill publishes a will, as its client's user (whose permission
// to send it was checked at CONNECT), from a session of the broker's
// own: the client's connection is gone, or going.
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
	deadline time.Time // when it expires
	will     *will     // held back by its delay; nil once published
	willAt   time.Time

	expiry *time.Timer
	willT  *time.Timer
	busy   sync.WaitGroup // a timer's work in progress
}

// releaseAway forgets c as its client id's connection, once it has let
// go of its core session, wakes a connection waiting to take over, and
// registers a (the session c leaves, if persistent) as away, unless that
// connection continues it.
func (s *Server) releaseAway(c *conn, a *awaySession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID[c.clientID] == c {
		delete(s.byID, c.clientID)
	}
	if c.gone != nil {
		close(c.gone)
	} else if a != nil && !s.closing {
		s.awayLocked(a)
	}
}

// awayFrom registers the session of clientID, which no connection holds,
// as away: it ends at deadline, and its will (if any) is published at
// willAt, or as the session ends if that comes first.
func (s *Server) awayFrom(clientID string, deadline time.Time, w *will, willAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closing && s.byID[clientID] == nil {
		s.awayLocked(&awaySession{s: s, clientID: clientID, deadline: deadline, will: w, willAt: willAt})
	}
}

func (s *Server) awayLocked(a *awaySession) {
	s.away[a.clientID] = a
	a.expiry = time.AfterFunc(max(0, time.Until(a.deadline)), func() { a.fire(true) })
	if a.will != nil && a.willAt.Before(a.deadline) {
		a.willT = time.AfterFunc(max(0, time.Until(a.willAt)), func() { a.fire(false) })
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
	subs, err := sess.DurableSubscriptions()
	if err != nil {
		// Its records stay, so the next start (or connection) sees it.
		s.log.Warn().Err(err).Str("client", clientID).Msg("mqtt: an expired session's subscriptions are unknown: not ended now")
		return
	}
	for _, info := range subs {
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
		if errors.Is(err, errSessionUnknown) {
			// A cluster group without a leader now: the session is left
			// as it is (its client finds it), not ended on a guess.
			s.log.Warn().Err(err).Str("client", id).Msg("mqtt: session not restored")
			continue
		}
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
	recs, err := sess.ClientRecords()
	if err != nil {
		return sessionState{}, fmt.Errorf("%w: %w", errSessionUnknown, err)
	}
	return parseState(recs), nil
}

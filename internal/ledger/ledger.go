// Package ledger is the account the crash, shared-store and cluster tests
// keep of every durable message, and the checker that reads it: every
// message sent, confirmed by the broker, delivered to a consumer, and
// whether a delivery after the first carried the redelivered flag.
//
// Bodies are made by Payload (variable length, so records cross file
// boundaries, and checkable byte for byte) and Body (a Payload with the
// protocol in front, so each protocol's messages can be told apart). The
// checker counts:
//
//	lost            confirmed, never delivered
//	unexpected      delivered but never sent (invented)
//	corrupt         delivered with a body that is not what was sent
//	unflagged       delivered again without the redelivered flag
//	not redelivered confirmed and held unacknowledged by a consumer
//	                whose connection then ended, never delivered again
//	reordered       delivered for the first time to a consumer (one
//	                connection) after a later confirmed message of the
//	                same producer: order per producer is lost
//
// All must be zero. A broker may deliver a durable message before the
// confirmation; one that dies in between neither confirms nor keeps it,
// so only confirmed messages count as lost.
//
// The package also holds load clients of each protocol (load.go) that
// record into a Ledger and fail over between brokers.
package ledger

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Payload is what producer p sends as message seq: variable length, so
// records cross file boundaries, and checkable byte for byte.
func Payload(p, seq int) string {
	key := fmt.Sprintf("%d-%d-", p, seq)
	n := 64 + (p*7919+seq*104729)%3000
	return key + strings.Repeat(strconv.Itoa(seq%10), n)
}

// PayloadKey is the key of a Payload ("3-41"), its producer and sequence
// number.
func PayloadKey(body []byte) (key string, p, seq int, ok bool) {
	parts := strings.SplitN(string(body), "-", 3)
	if len(parts) < 3 {
		return "", 0, 0, false
	}
	p, err1 := strconv.Atoi(parts[0])
	s, err2 := strconv.Atoi(parts[1])
	return parts[0] + "-" + parts[1], p, s, err1 == nil && err2 == nil
}

// Body is a Payload with the protocol in the key, so that a ledger can
// tell each protocol's confirmations apart: key "stomp:3-41".
func Body(proto string, id, seq int) (key, body string) {
	body = proto + ":" + Payload(id, seq)
	key, _, _ = Key([]byte(body))
	return key, body
}

// Key is the key of a Body ("stomp:3-41") and its sequence number.
func Key(body []byte) (key string, seq int, ok bool) {
	proto, rest, found := strings.Cut(string(body), ":")
	if !found {
		return "", 0, false
	}
	k, _, seq, ok := PayloadKey([]byte(rest))
	return proto + ":" + k, seq, ok
}

// Ledger is one run's account of every message. Its methods are safe
// for concurrent use.
type Ledger struct {
	mu          sync.Mutex
	sent        map[string]string // key → body
	confirmed   map[string]string // key → the broker address that confirmed it
	confirmedAt map[string]time.Time
	sentAt      map[string]time.Time
	deliveries  map[string][]string
	held        map[string]bool // left unacknowledged by a consumer
	lastDeliver time.Time

	mark       func(addr string) bool // counts confirmations after Mark by these brokers
	after      map[string]int         // confirmations after the mark, by protocol
	firstAfter time.Time              // first confirmation after the mark

	unexpected, corrupt, unflagged []string
	order                          []delivery // every delivery, in order
}

// delivery is one entry of the ledger's delivery log.
type delivery struct {
	via, key    string
	seq         int
	redelivered bool
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{sent: map[string]string{}, confirmed: map[string]string{}, confirmedAt: map[string]time.Time{}, sentAt: map[string]time.Time{}, after: map[string]int{},
		deliveries: map[string][]string{}, held: map[string]bool{}}
}

// Send records a message about to be sent.
func (l *Ledger) Send(key, body string) {
	l.mu.Lock()
	l.sent[key] = body
	l.sentAt[key] = time.Now()
	l.mu.Unlock()
}

// Confirm records the confirmation of a message by the broker at addr.
func (l *Ledger) Confirm(key, proto, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.confirmed[key] = addr
	l.confirmedAt[key] = time.Now()
	if l.mark != nil && l.mark(addr) {
		if l.firstAfter.IsZero() {
			l.firstAfter = time.Now()
		}
		l.after[proto]++
	}
}

// Mark starts counting the confirmations by the brokers for which by
// returns true (Confirmations' after, FirstAfter).
func (l *Ledger) Mark(by func(addr string) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mark = by
	l.after = map[string]int{}
	l.firstAfter = time.Time{}
}

// FirstAfter is the time of the first confirmation after Mark (zero if
// none yet).
func (l *Ledger) FirstAfter() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstAfter
}

// After returns the confirmations since Mark, by protocol.
func (l *Ledger) After() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]int, len(l.after))
	for k, v := range l.after {
		m[k] = v
	}
	return m
}

// FirstConfirmedSince returns the time of the first confirmation of a
// message sent at or after since whose key match accepts (zero if none).
func (l *Ledger) FirstConfirmedSince(since time.Time, match func(key string) bool) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for k, at := range l.confirmedAt {
		if !l.sentAt[k].Before(since) && (first.IsZero() || at.Before(first)) && match(k) {
			first = at
		}
	}
	return first
}

// Confirmations counts the protocol's confirmed messages, in all and
// since Mark.
func (l *Ledger) Confirmations(proto string) (total, after int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.confirmed {
		if strings.HasPrefix(k, proto+":") {
			total++
		}
	}
	return total, l.after[proto]
}

// Deliver records a delivery of body (via names the consumer: one name
// per connection, for the order check and the report) and checks it; it
// returns the body's key and sequence number.
func (l *Ledger) Deliver(body []byte, redelivered bool, via string) (key string, seq int) {
	key, seq, ok := Key(body)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastDeliver = time.Now()
	want, wasSent := l.sent[key]
	switch {
	case !ok || !wasSent:
		l.unexpected = append(l.unexpected, fmt.Sprintf("%.40q via %s", body, via))
		return key, seq
	case string(body) != want:
		l.corrupt = append(l.corrupt, key+" via "+via)
	}
	if len(l.deliveries[key]) > 0 && !redelivered {
		l.unflagged = append(l.unflagged, key+" via "+via+" at "+time.Now().Format("15:04:05.000")+" (before: "+strings.Join(l.deliveries[key], ", ")+")")
	}
	l.order = append(l.order, delivery{via, key, seq, redelivered})
	flag := ""
	if redelivered {
		flag = " redelivered"
	}
	l.deliveries[key] = append(l.deliveries[key], time.Now().Format("15:04:05.000")+" "+via+flag)
	return key, seq
}

// Hold records that a consumer keeps this delivery unacknowledged.
func (l *Ledger) Hold(key string) {
	l.mu.Lock()
	l.held[key] = true
	l.mu.Unlock()
}

// HeldConfirmed reports whether a confirmed message is held.
func (l *Ledger) HeldConfirmed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.held {
		if _, ok := l.confirmed[k]; ok {
			return true
		}
	}
	return false
}

// Drained reports whether every confirmed message was delivered, every
// held one again, and nothing was delivered for quiet.
func (l *Ledger) Drained(quiet time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.confirmed {
		if len(l.deliveries[k]) == 0 {
			return false
		}
	}
	for k := range l.held {
		if _, ok := l.confirmed[k]; ok && len(l.deliveries[k]) < 2 {
			return false
		}
	}
	return time.Since(l.lastDeliver) > quiet
}

// Counts is what Check finds. The slices hold the offending keys (at
// most 20 of each, sorted), with the broker that confirmed them and
// their deliveries.
type Counts struct {
	Sent, Confirmed, Deliveries, Held int

	Lost, Unexpected, Corrupt, Unflagged, NotRedelivered, Reordered int

	LostKeys, UnexpectedKeys, CorruptKeys, UnflaggedKeys, NotRedeliveredKeys, ReorderedKeys []string
	// LostByProducer sums up the lost messages of each producer: how
	// many, their sequence numbers, and who confirmed them.
	LostByProducer []string
}

// Bad is the sum of the counts that must be zero.
func (c Counts) Bad() int {
	return c.Lost + c.Unexpected + c.Corrupt + c.Unflagged + c.NotRedelivered + c.Reordered
}

func (c Counts) String() string {
	return fmt.Sprintf("sent=%d confirmed=%d deliveries=%d held=%d: lost=%d unexpected=%d corrupt=%d unflagged=%d not-redelivered=%d reordered=%d",
		c.Sent, c.Confirmed, c.Deliveries, c.Held, c.Lost, c.Unexpected, c.Corrupt, c.Unflagged, c.NotRedelivered, c.Reordered)
}

// Details lists the offending keys, one line each.
func (c Counts) Details() string {
	var b strings.Builder
	for _, s := range []struct {
		name string
		keys []string
	}{{"lost by producer", c.LostByProducer}, {"lost", c.LostKeys}, {"unexpected", c.UnexpectedKeys}, {"corrupt", c.CorruptKeys},
		{"unflagged duplicate", c.UnflaggedKeys}, {"not redelivered", c.NotRedeliveredKeys}, {"reordered", c.ReorderedKeys}} {
		for _, k := range s.keys {
			fmt.Fprintf(&b, "  %s: %s\n", s.name, k)
		}
	}
	return b.String()
}

// Check counts what went wrong, and the totals.
func (l *Ledger) Check() Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := Counts{Sent: len(l.sent), Confirmed: len(l.confirmed)}
	type span struct {
		n, lo, hi int
		by        map[string]bool
	}
	lost := map[string]*span{}
	for k, by := range l.confirmed {
		if len(l.deliveries[k]) == 0 {
			c.Lost++
			c.LostKeys = append(c.LostKeys, k+" confirmed by "+by+" at "+l.confirmedAt[k].Format("15:04:05.000"))
			p, _, _ := strings.Cut(k, "-")
			_, seq, _ := Key([]byte(l.sent[k]))
			sp := lost[p]
			if sp == nil {
				sp = &span{lo: seq, hi: seq, by: map[string]bool{}}
				lost[p] = sp
			}
			sp.n++
			sp.lo, sp.hi = min(sp.lo, seq), max(sp.hi, seq)
			sp.by[by] = true
		}
	}
	for p, sp := range lost {
		var by []string
		for b := range sp.by {
			by = append(by, b)
		}
		sort.Strings(by)
		c.LostByProducer = append(c.LostByProducer, fmt.Sprintf("%s: %d lost, seq %d..%d, confirmed by %v", p, sp.n, sp.lo, sp.hi, by))
	}
	sort.Strings(c.LostByProducer)
	for k := range l.held {
		if _, ok := l.confirmed[k]; !ok {
			continue
		}
		c.Held++
		if len(l.deliveries[k]) < 2 {
			c.NotRedelivered++
			c.NotRedeliveredKeys = append(c.NotRedeliveredKeys, k+" delivered "+strings.Join(l.deliveries[k], ", "))
		}
	}
	for _, d := range l.deliveries {
		c.Deliveries += len(d)
	}
	// Order: per consumer connection and producer, the confirmed messages
	// delivered for the first time (and not flagged) come in the order
	// sent. (A duplicate without the flag is counted as unflagged.)
	last := map[[2]string]delivery{}
	seen := map[string]bool{}
	for _, d := range l.order {
		first := !seen[d.key]
		seen[d.key] = true
		if _, ok := l.confirmed[d.key]; !ok || d.redelivered || !first {
			continue
		}
		p, _, _ := strings.Cut(d.key, "-")
		k := [2]string{d.via, p}
		if prev, ok := last[k]; ok && d.seq < prev.seq {
			c.Reordered++
			c.ReorderedKeys = append(c.ReorderedKeys, fmt.Sprintf("%s after %s via %s", d.key, prev.key, d.via))
		}
		if prev, ok := last[k]; !ok || d.seq > prev.seq {
			last[k] = d
		}
	}
	c.ReorderedKeys = first20(c.ReorderedKeys)
	c.Unexpected, c.Corrupt, c.Unflagged = len(l.unexpected), len(l.corrupt), len(l.unflagged)
	c.UnexpectedKeys = first20(append([]string(nil), l.unexpected...))
	c.CorruptKeys = first20(append([]string(nil), l.corrupt...))
	c.UnflaggedKeys = first20(append([]string(nil), l.unflagged...))
	c.LostKeys = first20(c.LostKeys)
	c.NotRedeliveredKeys = first20(c.NotRedeliveredKeys)
	return c
}

func first20(s []string) []string {
	sort.Strings(s)
	if len(s) > 20 {
		s = append(s[:20], fmt.Sprintf("… and %d more", len(s)-20))
	}
	return s
}

// Stopped reports whether stop is closed.
func Stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// WaitUntil polls cond every 20 ms until it holds or d passes.
func WaitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

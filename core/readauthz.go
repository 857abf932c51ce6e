package core

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/junctionmq/junction/core/wildcard"
)

// Wildcard subscriptions and read permissions
//
// Subscribe checks consume on what the consumer names: an address, or a
// wildcard pattern looked up as if it were one. A pattern is not an
// address, though: security settings narrower than the pattern (consume
// on "devices.#" but not on "devices.secret.#") are never consulted for
// it. So a message reaches a subscription bound to a pattern only if its
// reader may consume from the message's concrete address, and a
// consumer of such a subscription is handed a message only if its own
// user may. Two places decide:
//
//   - Routing (Queue.admits, on the sender's goroutine, no lock held):
//     the subscription admits a message when one of its readers may
//     consume from its address. The readers are the subscription's
//     subscriber, the user whose session created it (recorded in a
//     durable subscription's binding, so it holds after a restart), or,
//     for a shared subscription, the users of its attached consumers.
//     What no reader may read never enters the queue: it is not held,
//     journaled or paged.
//   - Dispatch (Consumer.accepts, under the queue's lock): a consumer of
//     a checked session takes only what its user may consume. What is
//     already queued is thus checked again as it is delivered: after a
//     reload of the permissions, for a consumer of a user other than
//     the subscriber (a shared subscription's other members, a queue
//     read by name), and for messages recovered from the journal. A
//     message that no consumer takes and that no reader may read any
//     more is removed (as Mosquitto drops a message a subscriber may no
//     longer read), so it cannot wait in the queue forever; one that a
//     reader may read waits for a consumer that may, as a message that
//     no consumer's selector selects does.
//
// Decisions are cached per subscription, user and address (readAuthz),
// so a send to a wildcard subscription costs a map lookup, and the
// Authorizer is asked once per new address. Broker.PermissionsChanged
// (which cmd calls when it reloads the users file) drops every cached
// decision and has each wildcard subscription look at what it holds
// again.
//
// Subscriptions bound to an address are not checked per message: the
// consume checked at Subscribe was on their only address. Neither are
// sessions core does not check (Session.trusted). Refusals are counted
// as authorization denials, under the protocol of the subscription's
// first reader, and logged once per subscription and address.

// readCacheMax bounds a subscription's cached decisions; a subscription
// reading more addresses starts its cache over.
const readCacheMax = 4096

// subscriber is an identity a subscription reads with.
type subscriber struct {
	user  string
	proto string // SessionOptions.Protocol; "" for a front-end's internal session, which is not checked
}

func (s subscriber) checked() bool { return s.proto != "" }

// same reports whether two identities have the same rights: the same
// user, both checked or both not.
func (s subscriber) same(o subscriber) bool {
	return s.user == o.user && s.checked() == o.checked()
}

// identity is who the session's subscriptions read for.
func (s *Session) identity() subscriber {
	return subscriber{user: s.opts.User, proto: s.opts.Protocol}
}

// readerSet is what routing checks a pattern subscription's messages
// against. It is immutable; readAuthz.readers is swapped whole.
type readerSet struct {
	users []subscriber // checked readers, distinct by user
	// anyone: an unchecked reader (a front-end's internal session), or
	// no known subscriber (a durable subscription recovered from a
	// binding that did not record one, until a session attaches): every
	// message is admitted, and consumers are still checked.
	anyone bool
}

func readersOf(s subscriber, known bool) *readerSet {
	if !known || !s.checked() {
		return &readerSet{anyone: true}
	}
	return &readerSet{users: []subscriber{s}}
}

// readAuthz is the read-permission state of a subscription bound to a
// wildcard pattern on a broker with an Authorizer (Queue.rd). Its mutex
// is a leaf: taken alone on the routing path and under Queue.mu at
// dispatch, and never held while calling the Authorizer.
type readAuthz struct {
	readers atomic.Pointer[readerSet]

	mu     sync.Mutex
	gen    uint64              // guarded by mu: Broker.permGen the decisions were made under
	dec    map[readKey]bool    // guarded by mu
	logged map[string]struct{} // guarded by mu: addresses whose refusal was logged
	capped bool                // guarded by mu: logged reached authzLogMax
}

type readKey struct{ user, address string }

// watchReadsLocked gives a multicast queue bound to a pattern its read
// checks, before the queue is bound (b.mu held). Without an Authorizer,
// or for a subscription bound to an address, nothing is checked.
func (b *Broker) watchReadsLocked(q *Queue) {
	if b.authz == nil || q.routing != Multicast || !wildcard.IsPattern(q.address) {
		return
	}
	q.rd = &readAuthz{}
	q.rd.readers.Store(readersOf(q.subscriber, q.subKnown))
}

// may reports whether user may consume from address, from the cache or
// else from the Authorizer. It may be called with Queue.mu held (see
// Authorizer).
func (z *readAuthz) may(b *Broker, user, address string) bool {
	k := readKey{user, address}
	gen := b.permGen.Load()
	z.mu.Lock()
	if z.gen < gen {
		clear(z.dec)
		z.gen = gen
	}
	ok, hit := z.dec[k] // made under gen, or a later one
	z.mu.Unlock()
	if hit {
		return ok
	}
	ok = b.authz.Authorize(user, PermConsume, address)
	z.mu.Lock()
	if z.gen == gen { // else permissions changed meanwhile: do not keep it
		if z.dec == nil || len(z.dec) >= readCacheMax {
			z.dec = make(map[readKey]bool)
		}
		z.dec[k] = ok
	}
	z.mu.Unlock()
	return ok
}

// readable reports whether one of the subscription's readers may
// consume from address.
func (z *readAuthz) readable(b *Broker, address string) bool {
	rs := z.readers.Load()
	if rs.anyone {
		return true
	}
	for _, u := range rs.users {
		if z.may(b, u.user, address) {
			return true
		}
	}
	return false
}

// firstReader is the reader a refusal is counted and logged against.
func (z *readAuthz) firstReader() subscriber {
	if rs := z.readers.Load(); len(rs.users) > 0 {
		return rs.users[0]
	}
	return subscriber{}
}

// setReadersLocked makes a shared subscription's readers the users of
// its attached consumers (q.mu held). With none attached the queue is
// about to go: the readers stay.
func (q *Queue) setReadersLocked() {
	if q.rd == nil || !q.shared || len(q.consumers) == 0 {
		return
	}
	rs := &readerSet{}
	for _, c := range q.consumers {
		id := c.s.identity()
		if c.rd == nil {
			rs.anyone = true
			continue
		}
		dup := false
		for _, u := range rs.users {
			dup = dup || u.user == id.user
		}
		if !dup {
			rs.users = append(rs.users, id)
		}
	}
	q.rd.readers.Store(rs)
}

// admitsReader is the routing check of a pattern subscription: one of
// its readers may consume from m's address. A refusal is counted and
// logged when note is set (the send itself; a transaction's look-ahead
// is not counted).
func (q *Queue) admitsReader(m *Message, note bool) bool {
	ok := q.rd.readable(q.b, m.Address)
	if !ok && note {
		q.b.readRefused(q, q.rd.firstReader(), m.Address)
	}
	return ok
}

// unreadableLocked reports whether r, which no consumer took, is one
// that none of q's readers may read any more: it is then removed rather
// than left waiting for a consumer that may never come (q.mu held).
func (q *Queue) unreadableLocked(r *ref) bool {
	if q.rd == nil {
		return false
	}
	return !q.rd.readable(q.b, r.msg.Address)
}

// readRefused counts a message withheld from subscription q because its
// reader who may not consume from address, and logs it once per
// subscription and address.
func (b *Broker) readRefused(q *Queue, who subscriber, address string) {
	b.denials.add(who.proto)
	z := q.rd
	z.mu.Lock()
	_, seen := z.logged[address]
	capped := false
	if !seen {
		switch {
		case len(z.logged) < authzLogMax:
			if z.logged == nil {
				z.logged = make(map[string]struct{})
			}
			z.logged[address] = struct{}{}
		case !z.capped:
			z.capped, capped = true, true
		default:
			seen = true
		}
	}
	z.mu.Unlock()
	if seen {
		return
	}
	ev := b.log.Warn().Str("user", who.user).Str("permission", string(PermConsume)).Str("address", address).
		Str("subscription", q.name).Str("pattern", q.address).Str("protocol", who.proto)
	if capped {
		ev.Msg("not authorized: message withheld from a wildcard subscription (further refusals on this subscription are not logged)")
	} else {
		ev.Msg("not authorized: message withheld from a wildcard subscription (logged once per subscription and address)")
	}
}

// withdrawUnreadable settles a ref removed by dispatch because no reader
// may read it any more (moveUnreadable), outside the queue's lock.
func (b *Broker) withdrawUnreadable(r *ref) {
	q := r.q
	q.gone(r)
	b.readRefused(q, q.rd.firstReader(), r.msg.Address)
	b.persistSettled(r)
}

// PermissionsChanged tells the broker that its Authorizer's answers may
// have changed (the users file was reloaded, and with it users' roles).
// Cached decisions are dropped (the sessions' send and consume caches
// and every wildcard subscription's), and each wildcard subscription
// looks at what it holds again: a message its consumers may now read is
// delivered, one no reader may read any more is removed as dispatch
// reaches it. A front-end that serves some subscriptions itself checks
// their deliveries through Session.Authorize, whose cache this drops
// too.
func (b *Broker) PermissionsChanged() {
	if b.cluster != nil {
		b.cluster.PermissionsChanged()
	}
	b.permGen.Add(1)
	if b.authz == nil {
		return
	}
	b.mu.RLock()
	qs := make([]*Queue, 0, len(b.wildSubs))
	for _, q := range b.wildSubs {
		if q.rd != nil {
			qs = append(qs, q)
		}
	}
	b.mu.RUnlock()
	for _, q := range qs {
		var moves []move
		q.mu.Lock()
		if !q.deleted && len(q.consumers) > 0 {
			// What consumers looked past may be theirs now.
			q.dirtyLocked()
			for _, c := range q.consumers {
				c.seen = [MaxPriority + 1]uint64{}
			}
			moves = q.dispatchLocked(time.Now(), moves)
		}
		q.mu.Unlock()
		b.carryOut(moves)
	}
}

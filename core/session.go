package core

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/junctionmq/junction/core/selector"
	"github.com/junctionmq/junction/core/wildcard"
)

// ErrClientIDInUse is returned by NewSession when another session holds
// the client id.
var ErrClientIDInUse = errors.New("core: client id already connected")

// SessionOptions describe a connection's identity.
type SessionOptions struct {
	// User is the authenticated user; it is stamped on every message sent.
	User string
	// ClientID names the client for durable subscriptions. At most one
	// session holds a client id at a time; empty means none.
	ClientID string
	// Protocol names the front-end ("stomp", "mqtt", "amqp") of a
	// client's session. Sessions with a Protocol are the broker's
	// connections ([Broker.Connections], [Broker.ProtocolStats]), and
	// the only ones the Authorizer checks (authz.go); a front-end's
	// internal sessions leave it empty.
	Protocol string
	// RemoteAddr is the client's network address, for display.
	RemoteAddr string
	// Close closes the client's connection, for an administrator
	// ([Broker.CloseConnection]); nil if it cannot be closed that way. It
	// must not block for long and must not be called with a core lock
	// held: the broker calls it holding none. The front-end closes the
	// session as the connection ends, as usual.
	Close func()
	// Abort closes the client's connection abortively: what is still
	// queued for the client, in the front-end and in the kernel's send
	// queue, is dropped, never delivered (a TCP reset); for the
	// cluster's fence ([Broker.FenceDoubtful]). nil if the front-end
	// cannot. As for Close: it must not block for long, the broker calls
	// it holding no core lock, and the front-end closes the session as
	// the connection ends.
	Abort func()
	// NoWait: the front-end flow-controls its producers itself (AMQP
	// withholds link credit while Broker.Blocked), so a send to a BLOCK
	// address over its limit is taken rather than waited on: waiting
	// would stop the connection's reader, and with it the acks that make
	// room. On an access broker (a cluster) such a send is held on this
	// node, unconfirmed, until its group has room (holdClusterSend).
	NoWait bool
}

// Session groups a connection's consumers and transactions. Closing it
// closes them: unacked deliveries return to their queues and open
// transactions roll back.
type Session struct {
	b    *Broker
	opts SessionOptions
	id   uint64 // unique in the broker's run: messages' origin, temporary queue names

	tempSeq atomic.Uint64 // numbers the session's temporary queues
	opened  time.Time
	proto   *protoCounters // nil for internal sessions (no Protocol)

	// Traffic, for Connections: messages (and their body bytes) sent by
	// the session and delivered to its consumers. Atomic, so the send and
	// delivery paths take no lock for them.
	msgsIn, bytesIn, msgsOut, bytesOut atomic.Uint64
	// Messages of the session that a queue dropped, and sends refused.
	dropped, refused atomic.Uint64
	// fenced is set once FenceDoubtful has aborted the connection.
	fenced atomic.Bool

	mu        sync.Mutex
	consumers map[*Consumer]struct{} // guarded by mu
	txs       map[*Tx]struct{}       // guarded by mu
	temps     map[*Queue]struct{}    // guarded by mu: temporary queues to delete on Close
	closed    bool                   // guarded by mu
	closing   chan struct{}          // guarded by mu: made by closingChan, closed by Close: ends waits for room

	az sessionAuthz // authorization cache and logged refusals (authz.go)

	// remote carries the session's operations to the cluster's groups
	// when the broker is an access broker (cluster.go); nil otherwise.
	remote RemoteSession

	// held are a NoWait session's cluster sends waiting for room, in
	// order (holdClusterSend).
	heldMu sync.Mutex
	held   []heldSend // guarded by heldMu
}

// NewSession opens a session. One with a Protocol is registered as a
// connection until it closes.
func (b *Broker) NewSession(opts SessionOptions) (*Session, error) {
	// The maps are made on first use: most connections never have a
	// transaction or a temporary queue, and an idle one no consumer.
	s := &Session{b: b, opts: opts, id: b.sessionID.Add(1), opened: time.Now()}
	if b.cluster != nil {
		s.remote = b.cluster.Open(s) // plain memory until used
	}
	b.sessMu.Lock()
	defer b.sessMu.Unlock()
	if b.shut.Load() {
		return nil, ErrClosed
	}
	if opts.ClientID != "" {
		if _, taken := b.clientIDs[opts.ClientID]; taken {
			return nil, fmt.Errorf("%w: %q", ErrClientIDInUse, opts.ClientID)
		}
		b.clientIDs[opts.ClientID] = s
	}
	if opts.Protocol != "" {
		s.proto = b.protoLocked(opts.Protocol)
		s.proto.opened.Add(1)
		b.sessions[s.id] = s
		b.emitSession(EventConnectionCreated, s)
	}
	return s, nil
}

// Options returns what the session was opened with.
func (s *Session) Options() SessionOptions { return s.opts }

// ID returns the session's number, unique in the broker's run (the
// connection id of [Broker.Connections]).
func (s *Session) ID() uint64 { return s.id }

// countIn counts n messages of nbytes body bytes sent by the session.
func (s *Session) countIn(n, nbytes int) {
	s.msgsIn.Add(uint64(n))
	s.bytesIn.Add(uint64(nbytes))
}

// User returns the session's user.
func (s *Session) User() string { return s.opts.User }

// ClientID returns the session's client id.
func (s *Session) ClientID() string { return s.opts.ClientID }

// Send routes m to the queues of its address (auto-creating it when the
// address settings allow) and returns once it is on every queue and, if
// it is durable and reaches a durable queue, synced to the journal: a nil
// error is the producer's confirmation. m must not be changed afterwards.
// If ctx ends first, Send returns its error; the message may still be
// confirmed later.
func (s *Session) Send(ctx context.Context, m *Message) error {
	if !m.Durable || (s.b.msgs == nil && s.b.cluster == nil) {
		// Nothing to wait for: no allocation on this path.
		return s.send(ctx, m, nil)
	}
	ch := make(chan error, 1)
	if err := s.send(ctx, m, func(err error) { ch <- err }); err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SendAsync is Send for producers that pipeline: it routes m and calls
// done with the confirmation, at once (on this goroutine) when nothing is
// journaled, or from the journal's goroutine after the sync. done must
// not block. Like Send, it waits while a BLOCK address is over its
// limit (unless the session is NoWait), until the session closes.
func (s *Session) SendAsync(m *Message, done func(error)) {
	if err := s.send(context.Background(), m, done); err != nil {
		done(err)
	}
}

// send routes m; done, if not nil, gets the confirmation (at once when
// nothing waits for the journal). An error means done is not called.
// While a queue with address-full-policy BLOCK is over its limit, send
// waits for room (checking again at least every roomWaitMax) until ctx
// ends or the session closes; front-ends that call it from their reading
// goroutine thereby stop reading the producer's connection.
func (s *Session) send(ctx context.Context, m *Message, done func(error)) error {
	if err := s.check(); err != nil {
		return err
	}
	if parts, ok := parseComposite(m.Address); ok {
		return s.sendComposite(ctx, m, parts, done)
	}
	if s.remote != nil {
		switch {
		case s.opts.NoWait:
			if s.holdClusterSend(m, done) {
				return nil
			}
		case m.Durable:
			if err := s.waitClusterRoom(ctx, m.Address); err != nil {
				return err
			}
		}
		return s.clusterSend(m, done)
	}
	now := time.Now()
	m.origin = s.id
	if err := s.b.prepare(m, s.opts.User, now); err != nil {
		return err
	}
	if err := s.authorizeSend(m.Address, now); err != nil {
		return err
	}
	if len(m.Properties) > 0 {
		// Scheduling properties (schedule.go): a later delivery time, or
		// a repeating message the scheduler keeps.
		spec, err := applySchedule(m, now)
		if err != nil {
			return err
		}
		if spec != nil {
			// The address is checked (and auto-created) now, as for
			// any send: a job for an address that cannot take it is
			// refused to its producer.
			if _, err := s.b.resolve(m, s); err != nil {
				return err
			}
			if err := s.b.addJob(m, spec, done); err != nil {
				return err
			}
			s.countIn(1, len(m.Body))
			return nil
		}
	}
	o := sendOpts{done: done, s: s, wait: !s.opts.NoWait}
	pending, err := s.b.routeWith(m, now, o)
	for errors.Is(err, errBlocked) {
		s.b.waitRoom(s.closingChan(), ctx.Done())
		if err := s.check(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		pending, err = s.b.routeWith(m, time.Now(), o)
	}
	if err != nil {
		return err
	}
	s.countIn(1, int(m.Size()))
	if !pending && done != nil {
		done(nil)
	}
	return nil
}

// closingChan returns a channel closed when the session closes, made on
// first use: only a send waiting for room needs one.
func (s *Session) closingChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing == nil {
		s.closing = make(chan struct{})
		if s.closed {
			close(s.closing)
		}
	}
	return s.closing
}

func (s *Session) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrSessionClosed
	}
	return nil
}

// ConsumerOptions say what a consumer reads and how.
type ConsumerOptions struct {
	// Address to consume from. For Anycast it names the address whose
	// queue is read; for Multicast it may be a wildcard pattern.
	Address string
	// RoutingType: Anycast reads the address's queue (competing
	// consumers); Multicast creates or attaches a subscription.
	// RoutingDefault follows the address settings.
	RoutingType RoutingType
	// SubscriptionName makes a multicast subscription durable: its queue,
	// named ClientID.SubscriptionName, keeps messages while no consumer is
	// attached, until [Session.Unsubscribe]. Needs a session ClientID.
	SubscriptionName string
	// SharedSubscriptionName makes a multicast subscription shared: every
	// consumer subscribing to the same address or pattern under the same
	// name, from any session and any protocol (MQTT 5 $share/NAME/filter,
	// STOMP's shared-subscription-name header), competes for the messages
	// of one queue, which is deleted when its last consumer leaves.
	SharedSubscriptionName string
	// Queue, when set, reads that existing queue directly (for example
	// DLQ or a durable subscription) and Address is ignored.
	Queue string
	// Credit is the initial credit (prefetch window); 0 means none until
	// Flow is called.
	Credit int
	// Exclusive asks for all messages of the queue while this consumer is
	// attached; other consumers stand by.
	Exclusive bool
	// Selector, when not blank, is a JMS message selector (package
	// core/selector): the consumer receives only the messages it selects.
	// An identifier names a message property or, failing that, one of
	// these header fields:
	//
	//	JMSMessageID       "ID:" + the message id in decimal ("ID:42"),
	//	                   the form JMS requires of provider ids
	//	JMSPriority        Priority (int64)
	//	JMSTimestamp       Timestamp, ms since the epoch (int64)
	//	JMSCorrelationID   CorrelationID; NULL when empty
	//	JMSDeliveryMode    'PERSISTENT' when Durable, else 'NON_PERSISTENT'
	//	JMSExpiration      Expiration, ms since the epoch; 0 when none
	//	JMSType            no field of its own: the property JMSType
	//	JMSXGroupID        GroupID; NULL when empty
	//	JMSXUserID         UserID; NULL when empty
	//	JMSXDeliveryCount  this delivery attempt: failed attempts + 1
	//
	// Properties come first, so a front-end that carries a header as a
	// property (as AMQP carries JMSType) is taken at its word.
	//
	// On a queue (anycast, or Queue) the messages a consumer does not
	// select stay for the others. The cost: a consumer passes each
	// message it does not select once, and the queue looks at every
	// waiting message again when a consumer leaves, so with a selective
	// consumer on a deep queue of messages it does not want those events
	// cost a pass over the queue; a send's cost does not grow with the
	// queue.
	//
	// A multicast subscription applies its selector as messages are
	// routed and holds only what it selects, as JMS specifies for durable
	// subscriptions, which keep their selector across restarts.
	// Subscribing again to a durable subscription with another selector
	// replaces it (its messages are dropped); a shared subscription
	// refuses a consumer whose selector differs from its own.
	//
	// An invalid selector fails Subscribe with an error wrapping
	// ErrInvalidSelector and the *selector.SyntaxError.
	Selector string
	// NoLocal keeps a non-shared multicast subscription from receiving
	// the messages sent through this Session (JMS no-local, AMQP's
	// no-local filter), while its consumer is attached. Ignored for
	// queues (anycast, or Queue) and shared subscriptions. Messages
	// recovered after a restart have no sender and are delivered.
	NoLocal bool
	// MaxBytes bounds the body bytes of the subscription queue this
	// consumer creates (a front-end's per-session budget, such as MQTT's);
	// overflow follows the address's full policy, except that where PAGE
	// cannot page (no persistence) it drops rather than blocking every
	// producer for one client. 0 uses the address settings'
	// max-size-bytes.
	MaxBytes int64
	// Handler receives deliveries; required.
	Handler Handler
}

// Subscribe attaches a consumer.
func (s *Session) Subscribe(o ConsumerOptions) (*Consumer, error) {
	if o.Handler == nil {
		return nil, errors.New("core: consumer needs a handler")
	}
	if IsComposite(o.Address) {
		return nil, fmt.Errorf("%w: %q is a composite destination: consumers read one address", ErrInvalidAddress, o.Address)
	}
	sel, err := parseSelector(o.Selector)
	if err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	var q *Queue
	if s.remote != nil {
		// The group broker applies everything the options say;
		// the mirror only passes messages on.
		q, err = s.mirrorOf(o)
	} else {
		q, err = s.queueFor(o, sel, false)
	}
	if err != nil {
		return nil, err
	}
	c := &Consumer{q: q, s: s, handler: o.Handler, exclusive: o.Exclusive}
	if q.up != nil {
		c.ev = mirrorEventOf(o, s.opts.ClientID)
	}
	if q.rd != nil && !s.trusted() {
		c.rd = q.rd // a wildcard subscription: each message is checked for c's user
	}
	// A subscription reached by address filters as messages are routed
	// (queueFor gave it sel); a queue filters as it dispatches.
	subscription := o.Queue == "" && q.routing == Multicast
	if !subscription && q.up == nil {
		c.sel = sel
	}
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrQueueNotFound, q.name)
	}
	if !q.shared && (q.temporary || q.clientID != "") {
		// A subscription has one consumer at a time, unless shared.
		if len(q.consumers) > 0 {
			q.mu.Unlock()
			return nil, inUsef("subscription %q has a consumer already (one at a time unless shared)", q.name)
		}
	}
	if subscription && !q.shared && q.up == nil {
		c.noLocal = o.NoLocal
		if o.NoLocal {
			q.noLocal.Store(s.id)
		} else {
			q.noLocal.Store(0)
		}
	}
	q.consumers = append(q.consumers, c)
	q.stats.consumers.Add(1)
	q.setReadersLocked()
	if o.Exclusive && q.exclusive == nil {
		q.exclusive = c
	}
	q.mu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.close(false)
		return nil, ErrSessionClosed
	}
	if s.consumers == nil {
		s.consumers = make(map[*Consumer]struct{})
	}
	s.consumers[c] = struct{}{}
	s.mu.Unlock()
	s.b.emitConsumer(EventConsumerCreated, c, q)
	if o.Credit > 0 {
		c.Flow(o.Credit)
	}
	return c, nil
}

// queueFor finds or creates the queue a consumer reads. A subscription
// it creates gets sel as its filter, and the session as its no-local
// origin if asked, before it is bound: no message routed to it escapes
// them. With dry it only checks permissions (AuthorizeSubscribe): it
// creates nothing and returns a nil queue.
//
// The permissions needed depend on what exists, which is known under
// b.mu, but the Authorizer is not called with a lock held: a pass that
// finds a permission not yet granted returns it, queueFor asks the
// Authorizer outside the lock and tries again (a pass adds a
// permission, so this ends).
func (s *Session) queueFor(o ConsumerOptions, sel *selector.Selector, dry bool) (*Queue, error) {
	g := grants{all: s.trusted()}
	for {
		q, need, err := s.queueForPass(o, sel, &g, dry)
		if errors.Is(err, errAutoCreate) {
			if _, err := s.b.autoCreateAnycast(o.Address, s); err != nil {
				return nil, err
			}
			continue
		}
		if errors.Is(err, errLookAgain) {
			continue
		}
		if need == nil || err != nil {
			return q, err
		}
		if err := s.authorize(need.perm, need.address); err != nil {
			return nil, err
		}
		g.have = append(g.have, *need)
	}
}

// queueForPass is one pass of queueFor with the permissions g.
func (s *Session) queueForPass(o ConsumerOptions, sel *selector.Selector, g *grants, dry bool) (*Queue, *authzNeed, error) {
	b := s.b
	if o.Queue != "" {
		q := b.Queue(o.Queue)
		if q == nil {
			return nil, nil, fmt.Errorf("%w: %q", ErrQueueNotFound, o.Queue)
		}
		if n := g.missing(q.address, PermConsume); n != nil {
			return nil, n, nil
		}
		if dry {
			return nil, nil, nil
		}
		return q, nil, nil
	}
	if o.Address == "" {
		// Empty words are allowed: MQTT's empty levels ("/a" is ".a").
		return nil, nil, fmt.Errorf("%w: empty address", ErrInvalidAddress)
	}
	if n := g.missing(o.Address, PermConsume); n != nil {
		return nil, n, nil
	}
	rt := o.RoutingType
	if rt == RoutingDefault {
		rt = b.settings.resolve(o.Address).DefaultRoutingType
	}
	pattern := wildcard.IsPattern(o.Address)
	settings := b.settings.resolve(o.Address)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, nil, ErrClosed
	}
	if rt == Anycast {
		if pattern {
			return nil, nil, fmt.Errorf("%w: wildcards are for multicast subscriptions, not queues: %q", ErrInvalidAddress, o.Address)
		}
		a := b.addresses[o.Address]
		if a == nil || a.anycast == nil {
			if !settings.AutoCreate || isTemporaryName(o.Address) {
				return nil, nil, fmt.Errorf("%w: %q", ErrQueueNotFound, o.Address)
			}
			if n := g.missing(o.Address, PermCreateAddress, PermCreateDurableQueue); n != nil {
				return nil, n, nil
			}
			if dry {
				return nil, nil, nil
			}
			return nil, nil, errAutoCreate // by queueFor, outside this pass
		}
		if dry {
			return nil, nil, nil
		}
		return a.anycast, nil, nil
	}
	if !pattern {
		a := b.addresses[o.Address]
		if a == nil || !a.isMulti {
			if !settings.AutoCreate || isTemporaryName(o.Address) {
				return nil, nil, fmt.Errorf("%w: %q", ErrAddressNotFound, o.Address)
			}
			if n := g.missing(o.Address, PermCreateAddress); n != nil {
				return nil, n, nil
			}
		}
	}
	if o.SharedSubscriptionName != "" {
		name := sharedName(o.SharedSubscriptionName, o.Address)
		if q := b.queues[name]; q != nil {
			// JMS 2.0: a shared subscription's consumers share its selector.
			if q.filter.String() != sel.String() {
				return nil, nil, inUsef("shared subscription %q has selector %q, not %q (its consumers share one)", name, q.filter.String(), sel.String())
			}
			if dry {
				return nil, nil, nil
			}
			return q, nil, nil
		}
		if n := g.missing(o.Address, PermCreateNonDurableQueue); n != nil {
			return nil, n, nil
		}
		if dry {
			return nil, nil, nil
		}
		q := b.newQueueLocked(name, o.Address, Multicast, false, true, "")
		q.shared = true
		q.filter = sel
		q.limit(o.MaxBytes)
		s.subscribeLocked(q)
		return q, nil, nil
	}
	if o.SubscriptionName == "" {
		if n := g.missing(o.Address, PermCreateNonDurableQueue); n != nil {
			return nil, n, nil
		}
		if dry {
			return nil, nil, nil
		}
		q := b.newQueueLocked(b.tempQueueName(o.Address), o.Address, Multicast, false, true, "")
		q.filter = sel
		if o.NoLocal {
			q.noLocal.Store(s.id)
		}
		q.limit(o.MaxBytes)
		s.subscribeLocked(q)
		return q, nil, nil
	}
	if s.opts.ClientID == "" {
		return nil, nil, ErrClientIDRequired
	}
	name := durableName(s.opts.ClientID, o.SubscriptionName)
	if q := b.queues[name]; q != nil {
		if q.address == o.Address && q.filter.String() == sel.String() && !s.otherReaderLocked(q) {
			if dry {
				return nil, nil, nil
			}
			q.limit(o.MaxBytes) // a restored subscription gets its budget back
			if q.rd != nil && !q.subKnown {
				// Recovered from a binding without its subscriber: it
				// reads for whoever attaches first (not journaled; the
				// next restart asks again).
				q.subscriber, q.subKnown = s.identity(), true
				q.rd.readers.Store(readersOf(q.subscriber, true))
			}
			return q, nil, nil
		}
		// Subscribing again under the same name to another topic, or with
		// another selector, or, to a wildcard pattern, as a user with
		// other rights than the subscriber's (whose rights decided what
		// the subscription holds), replaces the subscription, as JMS
		// specifies for the first two.
		if q.stats.consumers.Load() > 0 {
			return nil, nil, inUsef("durable subscription %q has an active consumer: it cannot be replaced until that consumer closes", name)
		}
		if n := g.missing(q.address, PermDeleteDurableQueue); n != nil {
			return nil, n, nil
		}
		if n := g.missing(o.Address, PermCreateDurableQueue); n != nil {
			return nil, n, nil
		}
		if dry {
			return nil, nil, nil
		}
		b.unbindLocked(q)
		b.bumpLocked()
		// Outside b.mu: dropping journals settled messages.
		defer b.dropQueue(q)
	}
	if n := g.missing(o.Address, PermCreateDurableQueue); n != nil {
		return nil, n, nil
	}
	if dry {
		return nil, nil, nil
	}
	if !b.reserveLocked(name) {
		return nil, nil, errLookAgain // created or failed meanwhile
	}
	q := b.unregisteredQueue(name, o.Address, Multicast, true, false, s.opts.ClientID)
	q.filter = sel
	if o.NoLocal {
		q.noLocal.Store(s.id)
	}
	q.limit(o.MaxBytes)
	q.subscriber, q.subKnown = s.identity(), true // before its binding is written: the binding records it
	if err := b.persistReservedLocked(q); err != nil {
		return nil, nil, err
	}
	if b.queues[name] != nil {
		// Another session of the client id made it while the binding
		// was written (a takeover): drop ours.
		b.unpersistQueue(q)
		return nil, nil, errLookAgain
	}
	b.queues[name] = q
	b.emitQueue(EventBindingAdded, q, "")
	s.subscribeLocked(q)
	return q, nil, nil
}

// errLookAgain: a pass waited for, or lost, a creation under way; the
// next pass looks again.
var errLookAgain = errors.New("core: look again")

// subscribeLocked records s as subscriber of a subscription it creates,
// gives a wildcard one its read checks, and binds it (b.mu held).
func (s *Session) subscribeLocked(q *Queue) {
	q.subscriber, q.subKnown = s.identity(), true
	s.b.watchReadsLocked(q)
	s.b.bindSubscriptionLocked(q)
}

// otherReaderLocked reports whether s would read durable subscription q
// with other rights than its subscriber: q is bound to a wildcard
// pattern on a broker that checks s, and was made by another user
// (b.mu held).
func (s *Session) otherReaderLocked(q *Queue) bool {
	return q.rd != nil && q.subKnown && !s.trusted() && !q.subscriber.same(s.identity())
}

func durableName(clientID, sub string) string { return clientID + "." + sub }

// sharedName names a shared subscription's queue: the same name on the
// same address or pattern is the same queue.
func sharedName(name, address string) string { return "$share/" + name + "/" + address }

// Unsubscribe deletes the session's durable subscription name and its
// messages.
func (s *Session) Unsubscribe(name string) error {
	if s.opts.ClientID == "" {
		return ErrClientIDRequired
	}
	if s.remote != nil {
		return s.remote.Unsubscribe(name)
	}
	qname := durableName(s.opts.ClientID, name)
	q := s.b.Queue(qname)
	if q == nil || q.routing != Multicast {
		// Only a subscription goes: an anycast queue that happens to be
		// named <client id>.<name> is not the client's to delete by
		// unsubscribing.
		return fmt.Errorf("%w: no durable subscription %q", ErrQueueNotFound, qname)
	}
	if !s.trusted() {
		if err := s.authorize(PermDeleteDurableQueue, q.address); err != nil {
			return err
		}
	}
	err := s.b.DeleteQueue(qname)
	if errors.Is(err, ErrSubscriptionInUse) {
		return inUsef("durable subscription %q has an active consumer", qname)
	}
	return err
}

// TemporaryQueuePrefix begins the name of every temporary queue (see
// [Session.CreateTemporaryQueue]). Sends and consumers never auto-create
// an address with this prefix, so a reply sent to a temporary queue that
// is gone fails with ErrAddressNotFound instead of filling a queue that
// nobody will read.
const TemporaryQueuePrefix = "temp-queue."

func isTemporaryName(addr string) bool { return strings.HasPrefix(addr, TemporaryQueuePrefix) }

// CreateTemporaryQueue creates a non-durable anycast address and its
// queue for replies (JMS TemporaryQueue, AMQP dynamic nodes) and returns
// its name,
//
//	temp-queue.<tag><broker run>-<session>.<n>
//
// (<tag> is Config.TemporaryQueueTag, usually empty)
// where <broker run> is random per broker start, <session> the session's
// number in this run and <n> counts the session's temporary queues: no
// name is ever reused, even after a restart, so a stale reply-to cannot
// reach a newer queue. Anyone may send to it and consumers of any
// session may read it. It is deleted, with its messages, when the
// session closes or by [Broker.DeleteQueue].
func (s *Session) CreateTemporaryQueue() (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	if s.remote != nil {
		return s.remote.CreateTemporaryQueue()
	}
	b := s.b
	next := func() string {
		return TemporaryQueuePrefix + b.cfg.TemporaryQueueTag + b.run + "-" + strconv.FormatUint(s.id, 10) + "." + strconv.FormatUint(s.tempSeq.Add(1), 10)
	}
	name := next()
	if err := s.authorize(PermCreateNonDurableQueue, name); err != nil {
		return "", err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return "", ErrClosed
	}
	for b.addresses[name] != nil || b.queues[name] != nil {
		name = next() // taken only if someone created such an address by hand
	}
	a := b.addressLocked(name, false)
	q := b.newQueueLocked(name, name, Anycast, false, false, "")
	q.owner = s
	a.anycast = q
	b.bumpLocked()
	b.mu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		b.deleteQueue(q)
		return "", ErrSessionClosed
	}
	if s.temps == nil {
		s.temps = make(map[*Queue]struct{})
	}
	s.temps[q] = struct{}{}
	s.mu.Unlock()
	return name, nil
}

// forgetTemp drops a deleted temporary queue from the session's list.
func (s *Session) forgetTemp(q *Queue) {
	s.mu.Lock()
	delete(s.temps, q)
	s.mu.Unlock()
}

func (s *Session) forget(c *Consumer) {
	s.mu.Lock()
	delete(s.consumers, c)
	s.mu.Unlock()
}

// Close closes the session's consumers (their unacked messages return
// to their queues), rolls back its open transactions and deletes its
// temporary queues. Idempotent.
func (s *Session) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	if s.closing != nil {
		close(s.closing)
	}
	txs := s.txs
	cs := s.consumers
	temps := s.temps
	s.txs, s.consumers, s.temps = nil, nil, nil
	s.mu.Unlock()
	for tx := range txs {
		tx.rollback()
	}
	for c := range cs {
		c.close(true)
	}
	for q := range temps {
		// Consumers of other sessions may still be attached: JMS deletes
		// a temporary queue with its connection regardless.
		s.b.deleteQueue(q)
	}
	if s.remote != nil {
		s.remote.Close()
	}
	if s.opts.ClientID != "" || s.proto != nil {
		s.b.sessMu.Lock()
		if s.opts.ClientID != "" && s.b.clientIDs[s.opts.ClientID] == s {
			delete(s.b.clientIDs, s.opts.ClientID)
		}
		if s.proto != nil {
			// Its consumers are closed: nothing more is delivered to it.
			// Its traffic joins the protocol's totals as it leaves the
			// registry, under b.mu, so that ProtocolStats counts it once.
			delete(s.b.sessions, s.id)
			s.proto.fold(s)
			s.b.emitSession(EventConnectionDestroyed, s)
		}
		s.b.sessMu.Unlock()
	}
}

// Tx is a local transaction: sends and acks that take effect together on
// Commit or not at all on Rollback. A Tx is used by one goroutine.
type Tx struct {
	s       *Session
	sends   []*Message
	acks    []*ref
	records []recordOp // client records (records.go)
	dups    []txDup    // duplicate ids written with the records (schedule.go)
	// committed, if set, is called once the transaction is committed
	// (journaled) and, on a single broker, before its messages are
	// routed: what it records in memory is in place before a consumer
	// can receive them (schedule.go). It is called with no core lock
	// held.
	committed func()
	done      bool
}

// Begin starts a transaction.
func (s *Session) Begin() (*Tx, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSessionClosed
	}
	tx := &Tx{s: s}
	if s.txs == nil {
		s.txs = make(map[*Tx]struct{})
	}
	s.txs[tx] = struct{}{}
	return tx, nil
}

// Send adds m to the transaction; it is routed on Commit.
func (t *Tx) Send(m *Message) error {
	if t.done {
		return ErrTxClosed
	}
	if err := ValidateProperties(m.Properties); err != nil {
		return err
	}
	addrs := []string{m.Address}
	if parts, ok := parseComposite(m.Address); ok {
		addrs = addrs[:0]
		for _, p := range parts {
			addrs = append(addrs, p.addr)
		}
	}
	for _, a := range addrs {
		if err := validAddress(a); err != nil {
			return err
		}
		if err := t.s.authorizeSend(a, time.Now()); err != nil {
			return err
		}
	}
	t.sends = append(t.sends, t.expand(m)...)
	return nil
}

// Ack acks delivery id of c within the transaction. The delivery leaves
// the consumer's in-flight list now; it is consumed on Commit and
// redelivered on Rollback.
func (t *Tx) Ack(c *Consumer, id uint64) error {
	if t.done {
		return ErrTxClosed
	}
	q := c.q
	q.mu.Lock()
	r := c.takeLocked(id)
	q.mu.Unlock()
	if r == nil {
		return ErrUnknownDelivery
	}
	t.acks = append(t.acks, r)
	return nil
}

// AckUpTo acks, within the transaction, every in-flight delivery of c up
// to and including id, and returns how many.
func (t *Tx) AckUpTo(c *Consumer, id uint64) (int, error) {
	if t.done {
		return 0, ErrTxClosed
	}
	q := c.q
	q.mu.Lock()
	refs := c.takeUpToLocked(id)
	q.mu.Unlock()
	if len(refs) == 0 {
		return 0, ErrUnknownDelivery
	}
	t.acks = append(t.acks, refs...)
	return len(refs), nil
}

// Commit routes the transaction's messages and consumes its acked ones.
// Every message is checked and its address resolved first; if any fails
// nothing is sent, the acks are rolled back and the error returned. The
// durable part (messages for durable queues, acks of journaled messages)
// is written as one journal transaction and synced before anything takes
// effect.
func (t *Tx) Commit(ctx context.Context) error {
	if t.done {
		return ErrTxClosed
	}
	t.end()
	if t.s.remote != nil {
		return t.clusterCommit(ctx)
	}
	b := t.s.b
	now := time.Now()
	addrs := make([]*address, len(t.sends))
	for i, m := range t.sends {
		m.origin = t.s.id
		err := b.prepare(m, t.s.opts.User, now)
		if err == nil {
			var spec *jobSpec
			if spec, err = applySchedule(m, now); err == nil && spec != nil {
				err = fmt.Errorf("%w: a repeating message (%s, %s) cannot be sent in a transaction", ErrInvalidMessage, PropScheduledRepeat, PropScheduledCron)
			}
		}
		if err == nil {
			addrs[i], err = b.resolve(m, t.s)
		}
		if err != nil {
			t.rollback()
			return fmt.Errorf("core: transaction rolled back: %w", err)
		}
	}
	for i, m := range t.sends {
		for _, q := range b.targetsOf(addrs[i], m, nil, false) {
			if q.full(m) && q.settings().FullPolicy == FullFail {
				t.rollback()
				return fmt.Errorf("core: transaction rolled back: %w: %q", ErrAddressFull, q.name)
			}
		}
	}
	// Duplicate ids: a transaction is all or nothing, so one duplicate
	// fails it (dedup.go).
	dupIDs, err := t.claimDups(addrs)
	if err != nil {
		t.rollback()
		return fmt.Errorf("core: transaction rolled back: %w", err)
	}
	ids, olds, err := t.journal(addrs, dupIDs)
	for i, e := range dupIDs {
		if e != nil {
			b.settleDup(addrs[i].name, e, err)
		}
	}
	if err != nil {
		t.rollback()
		return fmt.Errorf("core: transaction rolled back: %w", err)
	}
	t.applyRecords(ids, olds)
	if t.committed != nil {
		t.committed()
	}
	for i, m := range t.sends {
		if _, err := b.deliver(addrs[i], m, now, sendOpts{s: t.s, journaled: true}); err != nil {
			// A queue filled up since the check above; the message is
			// journaled but not on that queue.
			b.log.Warn().Err(err).Uint64("message", m.ID).Msg("transaction send refused by a full queue")
		}
	}
	for _, r := range t.acks {
		q := r.q
		q.mu.Lock()
		q.ackedLocked(r, nil) // journaled with the transaction
		q.mu.Unlock()
	}
	n, nbytes := len(t.sends), 0
	for _, m := range t.sends {
		nbytes += int(m.Size())
	}
	t.s.countIn(n, nbytes)
	t.sends, t.acks = nil, nil
	return nil
}

// claimDups claims the duplicate ids of the transaction's messages
// (ids[i] for t.sends[i], nil when it has none); on a duplicate it
// forgets those it claimed and fails.
func (t *Tx) claimDups(addrs []*address) ([]*dupEntry, error) {
	b := t.s.b
	var ids []*dupEntry
	for i, m := range t.sends {
		key := dupKey(m, b.dupFromMessageID(addrs[i]))
		if key == "" {
			continue
		}
		if ids == nil {
			ids = make([]*dupEntry, len(t.sends))
		}
		e, dup := b.claimDup(addrs[i].name, key)
		if dup {
			b.countDup(addrs[i].name)
			for j, x := range ids[:i] {
				if x != nil {
					b.settleDup(addrs[j].name, x, ErrDuplicateID)
				}
			}
			return nil, fmt.Errorf("%w: %q on %q", ErrDuplicateID, key[strings.IndexByte(key, 0)+1:], addrs[i].name)
		}
		ids[i] = e
	}
	return ids, nil
}

// journal writes the durable part of the transaction as one unit, with
// the duplicate ids of its durable messages and its client records. It
// returns the journal ids of the client records written (see
// applyRecords).
func (t *Tx) journal(addrs []*address, dupIDs []*dupEntry) (recIDs []uint64, recOlds map[string]uint64, err error) {
	b := t.s.b
	if b.msgs == nil {
		return nil, nil, nil
	}
	txID := b.txID.Add(1)
	n := 0
	if len(t.records) > 0 {
		recIDs, recOlds = t.journalRecordsTx(txID)
		n += len(t.records)
	}
	for i, m := range t.sends {
		if !m.Durable {
			continue
		}
		var ids []uint64
		for _, q := range b.targetsOf(addrs[i], m, nil, false) {
			if q.durable {
				ids = append(ids, q.id)
			}
		}
		if len(ids) == 0 {
			continue
		}
		rec, err := b.messageRecord(m, ids)
		if err != nil {
			b.msgs.Rollback(txID, nil)
			return nil, nil, err
		}
		b.msgs.AppendTx(txID, m.ID, recMessage, rec)
		if dupIDs != nil && dupIDs[i] != nil {
			e := dupIDs[i]
			record := b.msgID.Add(1)
			b.dup.mu.Lock()
			e.record = record
			b.dup.mu.Unlock()
			b.msgs.AppendTx(txID, record, recDuplicateID, dupRecord(addrs[i].name, e.key))
		}
		n++
	}
	var largeGone []uint64
	for _, r := range t.acks {
		if !r.durable {
			continue
		}
		if r.msg.durableRefs.Add(-1) <= 0 {
			b.msgs.DeleteTx(txID, r.msg.ID)
			if r.msg.lb != nil {
				largeGone = append(largeGone, r.msg.ID)
			}
		} else {
			b.msgs.UpdateTx(txID, r.msg.ID, recAckRef, binary.AppendUvarint(nil, r.q.id))
		}
		n++
	}
	for _, d := range t.dups {
		record := b.msgID.Add(1)
		b.dup.mu.Lock()
		d.e.record = record
		b.dup.mu.Unlock()
		b.msgs.AppendTx(txID, record, recDuplicateID, dupRecord(d.address, d.e.key))
		n++
	}
	if n == 0 {
		return nil, nil, nil
	}
	// No ctx escape here: once submitted the commit may succeed, and
	// memory must agree with the journal. The journal completes it.
	ch := make(chan error, 1)
	b.msgs.Commit(txID, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		// Undo the reference counts taken above.
		for _, r := range t.acks {
			if r.durable {
				r.msg.durableRefs.Add(1)
			}
		}
		return nil, nil, fmt.Errorf("%w: %w", ErrPersistence, err)
	}
	for _, id := range largeGone {
		b.logStoreErr(b.large.Remove(id))
	}
	return recIDs, recOlds, nil
}

// Rollback drops the transaction's messages and returns its acked ones
// to their queues as failed deliveries, to be redelivered.
func (t *Tx) Rollback() error {
	if t.done {
		return ErrTxClosed
	}
	t.end()
	t.rollback()
	return nil
}

func (t *Tx) end() {
	t.done = true
	t.s.mu.Lock()
	delete(t.s.txs, t)
	t.s.mu.Unlock()
}

func (t *Tx) rollback() {
	now := time.Now()
	for _, r := range t.acks {
		q := r.q
		var moves []move
		q.mu.Lock()
		moves = q.returnLocked(r, true, now, moves)
		moves = q.dispatchFreshLocked(now, moves)
		q.mu.Unlock()
		q.b.carryOut(moves)
	}
	t.sends, t.acks, t.records = nil, nil, nil
}

// SubscriptionInfo describes a durable subscription.
type SubscriptionInfo struct {
	Name     string // the subscription name given at Subscribe
	Address  string // the address or wildcard pattern it is bound to
	Selector string // its selector as given at Subscribe; "" for none
	// Marks are the marks (Consumer.Mark) of the messages it holds, in no
	// order: the ids a front-end must not hand out again before those
	// messages come back to it.
	Marks []uint32
}

// DurableSubscriptions lists the durable subscriptions of the session's
// client id, so that a front-end can resume them (MQTT persistent
// sessions) or drop them (MQTT clean start). On a cluster node it fails
// (ErrUnavailable) when a group cannot be asked: the front-end must not
// take the subscriptions for gone.
func (s *Session) DurableSubscriptions() ([]SubscriptionInfo, error) {
	if s.opts.ClientID == "" {
		return nil, nil
	}
	if s.b.cluster != nil {
		return s.b.cluster.DurableSubscriptions(s.opts.ClientID)
	}
	return s.b.DurableSubscriptionsOf(s.opts.ClientID), nil
}

// DurableSubscriptionsOf lists the durable subscriptions of a client id.
func (b *Broker) DurableSubscriptionsOf(clientID string) []SubscriptionInfo {
	prefix := clientID + "."
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []SubscriptionInfo
	for name, q := range b.queues {
		if q.clientID == clientID && strings.HasPrefix(name, prefix) {
			out = append(out, SubscriptionInfo{Name: name[len(prefix):], Address: q.address, Selector: q.filter.String(), Marks: q.marks()})
		}
	}
	return out
}

// DurableClientIDs lists the client ids that hold durable subscriptions,
// so that a front-end can expire sessions it restored after a restart.
func (b *Broker) DurableClientIDs() []string {
	if b.cluster != nil {
		return b.cluster.DurableClientIDs()
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	seen := make(map[string]bool)
	var out []string
	for _, q := range b.queues {
		if q.clientID != "" && !seen[q.clientID] {
			seen[q.clientID] = true
			out = append(out, q.clientID)
		}
	}
	return out
}

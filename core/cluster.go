package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Cluster mode
//
// In a cluster the state of every address (its queues, subscriptions,
// messages and retained message) lives in a replicated group, served by
// a broker on the node that leads the group: a group broker, a plain
// Broker whose journal is the group's replicated log. The broker that
// the protocol front-ends of a node use is then an access broker
// (Config.Cluster set): it keeps no queues of its own. It authenticates
// clients, checks their permissions, forwards every send to the group of
// its address through the Cluster port, and feeds each consumer from a
// mirror queue: a private, in-memory queue that the cluster fills with
// what the group broker delivers to an upstream consumer with the same
// options. The client's acks, releases and rejects of a mirror's
// deliveries are forwarded upstream (Upstream.Settle), where the real
// queue applies them, and the consumer's credit is passed on
// (Upstream.Flow), so a slow client holds back its group broker exactly
// as it holds back a local queue.
//
// Front-ends do not see the difference: they get a Session and
// Consumers as on a single broker. What differs: messages are moved to
// dead-letter and expiry addresses by the group broker; a consumer whose
// upstream is lost (its group's leader changed) keeps its connection,
// its unsettled deliveries come again flagged redelivered from the new
// leader; and transactions are forwarded whole to one group (a
// transaction that spans groups fails, see RemoteSession.Commit).
//
// Locks: the cluster may call Feed.Deliver from a group broker's
// delivery handler, so a group broker's Queue.mu may be held when a
// mirror's Queue.mu is taken (never the reverse: a mirror calls its
// Upstream with no lock held, and Feed.Deliver calls no Upstream).

// Cluster is the port through which an access broker reaches the groups
// that hold its addresses. Package cluster implements it.
type Cluster interface {
	// Open returns the remote side of a client session, which carries
	// its sends, consumers and transactions to the groups. It is called
	// once per Session, from NewSession, and must not block.
	Open(s *Session) RemoteSession
	// Retain keeps m as the retained message of its address (an empty
	// body clears it), durably in the address's group.
	Retain(m *Message) error
	// PermissionsChanged tells the group brokers of this node that users
	// or security settings changed (see Broker.PermissionsChanged).
	PermissionsChanged()
	// Catalog answers questions about what the groups hold.
	Catalog
}

// Catalog is what an access broker asks the cluster about the state it
// does not keep.
type Catalog interface {
	// AddressRoutingTypes is Broker.AddressRoutingTypes for the address's group.
	AddressRoutingTypes(name string) (anycast, multicast, exists bool)
	// DurableSubscriptions lists the durable subscriptions of a client
	// id, or fails (ErrUnavailable) if a group that may hold some cannot
	// be asked: a partial list would read as subscriptions gone.
	DurableSubscriptions(clientID string) ([]SubscriptionInfo, error)
	// DurableClientIDs lists the client ids holding durable subscriptions.
	DurableClientIDs() []string
	// Retained returns every retained message, ordered by address.
	Retained() []*Message
}

// RemoteSession carries one client session's operations to the groups.
// Its methods may be called from any goroutine; Send and Attach keep the
// order in which one goroutine calls them.
type RemoteSession interface {
	// Send forwards m (stamped and authorized by the access broker) to
	// its address's group. done, if not nil, gets the group broker's
	// confirmation (for a durable message: committed on a majority of
	// the group's nodes). done must not block.
	Send(m *Message, done func(error))
	// Attach opens the upstream consumer that feeds a mirror queue with
	// what o names (o.Handler is ignored: deliveries go to sink, which
	// is the mirror's *Feed). It returns once the consumer exists in
	// every group it reads.
	Attach(o ConsumerOptions, sink Sink) (Upstream, error)
	// Commit applies a transaction: sends routed and acks consumed
	// together, or nothing. Every message and ack must belong to one
	// group; otherwise Commit fails with ErrCrossGroupTx and does
	// nothing.
	Commit(ctx context.Context, sends []*Message, acks []TxAck) error
	// Unsubscribe deletes the session's durable subscription name.
	Unsubscribe(name string) error
	// CreateTemporaryQueue is Session.CreateTemporaryQueue in the group
	// of the new queue's name.
	CreateTemporaryQueue() (string, error)
	// Close ends the session upstream: its upstream consumers close
	// (what they held is redelivered) and its temporary queues go.
	Close()
}

// Client records and marks in a cluster. The ports below are optional
// parts of the Cluster port, which a Cluster implements to keep client
// records (records.go) and delivery marks (Consumer.Mark) in its groups.
// Without them an access broker keeps client records in its own memory
// (they are lost when it stops and do not follow a client to another
// node), and a mark stays with the mirror's copy of a delivery (it is
// lost when the consumer closes or its group fails over).

// RecordsCatalog is implemented by a Cluster that keeps client records
// in its groups; its RemoteSessions then implement RecordsSession.
type RecordsCatalog interface {
	// ClientRecords is Broker.ClientRecordsOf in the group of clientID,
	// or fails (ErrUnavailable) if that group cannot be asked.
	ClientRecords(clientID string) ([]ClientRecord, error)
	// ClientRecordHolders is Broker.ClientRecordHolders across the
	// groups.
	ClientRecordHolders() []string
}

// RecordsSession is implemented by the RemoteSessions of a Cluster that
// implements RecordsCatalog: the session's client records, as
// Session.SetClientRecord and Session.ClearClientRecords (done is never
// nil).
type RecordsSession interface {
	SetClientRecord(key string, value []byte, done func(error))
	ClearClientRecords(prefix string, done func(error))
	// CommitRecords is Commit with client records of the session's
	// client id (an empty Value deletes one) written in the same
	// transaction; records live in the group of the client id, so a
	// transaction with records may touch that group only
	// (ErrCrossGroupTx otherwise).
	CommitRecords(ctx context.Context, sends []*Message, acks []TxAck, records []ClientRecord) error
}

// MarkingUpstream is implemented by an Upstream that keeps a mirror's
// marks (Consumer.Mark) with the upstream delivery, where the group
// broker keeps (and journals) them; its deliveries then come with their
// marks through MarkSink.
type MarkingUpstream interface {
	// Mark marks the upstream delivery tagged tag; done (never nil) gets
	// the outcome once it is as durable as the group's messages.
	Mark(tag uint64, mark uint32, done func(error))
}

// MarkSink is implemented by a Sink that takes the mark of a delivery
// (Feed does): a group broker's delivery of a marked message goes
// through DeliverMarked.
type MarkSink interface {
	DeliverMarked(tag uint64, m *Message, deliveryCount uint32, redelivered bool, mark uint32)
}

// DoubtingUpstream is implemented by an Upstream that can tell when a
// delivery it fed the mirror may meanwhile have gone to another
// consumer: its source (a group's leader) may no longer be the one
// serving the group, because it has not heard from a majority, or this
// node has not heard from it, for long enough that another may have
// been elected. The mirror hands such a delivery out flagged
// redelivered, since it may be a duplicate. Doubtful is called with the
// mirror's lock held: it must be cheap and take no core lock.
type DoubtingUpstream interface {
	Doubtful(tag uint64) bool
}

// Upstream is the consumer that feeds a mirror queue. Its methods may be
// called from any goroutine, never with a core lock held.
type Upstream interface {
	// Flow asks for n more messages (n > 0).
	Flow(n int)
	// Drain asks for no more messages until the next Flow.
	Drain()
	// Settle settles the delivery tagged tag (see Feed.Deliver). A tag
	// from before the upstream was re-attached is ignored: that message
	// is redelivered by the new upstream.
	Settle(tag uint64, o Outcome)
	// Close detaches the upstream consumer; what it delivered and was
	// not settled goes back to its queue, counted as a failed attempt.
	Close()
}

// Outcome is how a mirror's delivery was settled.
type Outcome uint8

// Outcomes of a mirror's deliveries, as Consumer's methods name them.
const (
	OutcomeAccepted Outcome = iota + 1 // Ack
	OutcomeReleased                    // Release(failed=false): back to the queue, not counted
	OutcomeFailed                      // Release(failed=true): back to the queue, counted
	OutcomeRejected                    // Reject: to the dead-letter address
)

func (o Outcome) String() string {
	switch o {
	case OutcomeAccepted:
		return "accepted"
	case OutcomeReleased:
		return "released"
	case OutcomeFailed:
		return "failed"
	case OutcomeRejected:
		return "rejected"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// TxAck is a mirror delivery acked in a transaction.
type TxAck struct {
	Upstream Upstream
	Tag      uint64
}

// ErrCrossGroupTx fails a cluster transaction whose messages and acks
// belong to more than one group: each group commits alone, so such a
// transaction could not be atomic.
var ErrCrossGroupTx = errors.New("core: a transaction in a cluster may touch the addresses of one group only")

// ErrNotInCluster refuses, on a cluster node's access broker, what a
// cluster does not do (yet). Diverts and virtual topics are refused
// rather than ignored: they act where a send is routed, which in a
// cluster is the group broker of the source address, and their copies
// would have to be forwarded to the groups of their target addresses
// (divert.go).
var ErrNotInCluster = errors.New("core: not available on a cluster node")

// ErrUnavailable is returned when a cluster group cannot be reached: it
// has no leader (an election is under way, or the group has lost its
// majority) or its leader did not answer in time. A send that fails with
// it may or may not have been stored.
var ErrUnavailable = errors.New("core: cluster group unavailable")

// Sink receives what an upstream consumer delivers: deliveryCount and
// redelivered are the upstream delivery's, tag identifies it for
// Upstream.Settle. Deliver must not block; it is called with the group
// broker's queue lock held.
type Sink interface {
	Deliver(tag uint64, m *Message, deliveryCount uint32, redelivered bool)
}

// Feed is how the cluster hands a mirror queue what its upstream
// delivers.
type Feed struct{ q *Queue }

// Deliver adds m, delivered upstream with delivery tag tag, to the
// mirror queue. deliveryCount and redelivered are the upstream
// delivery's. The mirror keeps its own shallow copy of m (body and
// properties shared, read-only), so m may be the group broker's own.
// Deliver never blocks and calls no Upstream method, so the cluster may
// call it from a group broker's delivery handler.
func (f *Feed) Deliver(tag uint64, m *Message, deliveryCount uint32, redelivered bool) {
	f.DeliverMarked(tag, m, deliveryCount, redelivered, 0)
}

// DeliverMarked is Deliver for a delivery marked upstream with mark
// (MarkSink).
func (f *Feed) DeliverMarked(tag uint64, m *Message, deliveryCount uint32, redelivered bool, mark uint32) {
	q := f.q
	now := time.Now()
	r := &ref{msg: m.shallowCopy(), q: q, failures: deliveryCount, recovered: redelivered, tag: tag, mark: mark}
	var moves []move
	q.mu.Lock()
	if q.upWant > 0 {
		q.upWant--
	}
	if q.addLocked(r, now) {
		moves = q.dispatchFreshLocked(now, moves)
	}
	q.mu.Unlock()
	if len(moves) > 0 {
		// Only effects of dispatch, which a mirror never has (it does
		// not expire messages: its group broker does).
		panic("core: mirror dispatch produced effects")
	}
}

// Lost tells the mirror that part of its upstream was lost and is being
// re-attached: the messages it holds that were not delivered yet and
// whose tags stale selects go (the new upstream delivers them again).
// It returns the credit the consumer wants from the new upstream: its
// credit less what the mirror still holds. Deliveries in flight stay;
// their settlements are ignored upstream (see Upstream.Settle).
func (f *Feed) Lost(stale func(tag uint64) bool) (credit int) {
	q := f.q
	q.mu.Lock()
	defer q.mu.Unlock()
	for p := range q.ready {
		d := &q.ready[p]
		for i := 0; i < d.len(); {
			if r := d.at(i); stale(r.tag) {
				d.removeAt(i)
				q.nready--
				q.gone(r)
				continue
			}
			i++
		}
	}
	q.dirtyLocked()
	credit = -q.nready
	for _, c := range q.consumers {
		credit += c.credit
	}
	return max(credit, 0)
}

// mirrorOf creates the mirror queue that feeds a consumer of an access
// broker, and attaches its upstream.
func (s *Session) mirrorOf(o ConsumerOptions) (*Queue, error) {
	b := s.b
	name := "mirror/" + strconv.FormatUint(s.id, 10) + "/" + strconv.FormatUint(b.tmpID.Add(1), 10)
	addr := o.Address
	if o.Queue != "" {
		addr = o.Queue
	}
	q := &Queue{b: b, name: name, address: addr, routing: o.RoutingType, temporary: true}
	st := b.settings.resolve(addr)
	q.st.Store(&st)
	up, err := s.remote.Attach(o, &Feed{q: q})
	if err != nil {
		return nil, err
	}
	q.up = up
	q.doubt, _ = up.(DoubtingUpstream)
	return q, nil
}

// upCreditLocked says what the mirror's upstream must be told after its
// consumer's credit changed: to send flow more, or to drain. The
// upstream is asked for the consumer's credit less what the mirror
// already holds for it.
func (q *Queue) upCreditLocked() (flow int, drain bool) {
	want := -q.nready
	for _, c := range q.consumers {
		want += c.credit
	}
	want = max(want, 0)
	switch {
	case want > q.upWant:
		flow = want - q.upWant
		q.upWant = want
	case want == 0 && q.upWant > 0:
		drain = true
		q.upWant = 0
	}
	return flow, drain
}

// tellUpstream passes on what upCreditLocked decided; no lock held.
func (q *Queue) tellUpstream(flow int, drain bool) {
	switch {
	case flow > 0:
		q.up.Flow(flow)
	case drain:
		q.up.Drain()
	}
}

// settleUpstream carries a mirror's settlement upstream (see carryOut).
func (b *Broker) settleUpstream(mv move) bool {
	var o Outcome
	switch mv.reason {
	case upAccepted:
		o = OutcomeAccepted
	case upReleased:
		o = OutcomeReleased
	case upFailed:
		o = OutcomeFailed
	case moveRejected:
		o = OutcomeRejected
		mv.r.q.gone(mv.r)
	default:
		return false
	}
	mv.r.q.up.Settle(mv.r.tag, o)
	return true
}

// clusterSend forwards a client's message in cluster mode. done follows
// Session.send's contract; a message nobody waits for is forwarded
// without a confirmation.
func (s *Session) clusterSend(m *Message, done func(error)) error {
	now := time.Now()
	if err := validAddress(m.Address); err != nil {
		return err
	}
	if m.Priority > MaxPriority {
		return fmt.Errorf("%w: priority %d above %d", ErrInvalidMessage, m.Priority, MaxPriority)
	}
	if err := ValidateProperties(m.Properties); err != nil {
		return err
	}
	if m.Timestamp.IsZero() {
		m.Timestamp = now
	}
	m.UserID = s.opts.User
	if err := s.authorizeSend(m.Address, now); err != nil {
		return err
	}
	s.countIn(1, len(m.Body))
	if dt := s.b.diverts.Load(); dt != nil {
		if copies, exclusive := dt.divert(s.b, m); len(copies) > 0 || exclusive {
			return s.clusterSendDiverted(m, copies, exclusive, done)
		}
	}
	s.clusterForward(m, done)
	return nil
}

// clusterForward hands a checked message to its group.
func (s *Session) clusterForward(m *Message, done func(error)) {
	if !m.Durable && done != nil {
		// As on a single broker, a message nothing journals is confirmed
		// at once; it follows the session's earlier sends upstream.
		s.remote.Send(m, nil)
		done(nil)
		return
	}
	s.remote.Send(m, done)
}

// clusterSendDiverted forwards m (unless an exclusive divert took it)
// and its diverted copies, each to the group of its address, and
// confirms once all are confirmed. A cluster applies diverts where a
// send enters it, on the access broker, from the node's configuration:
// the group of the source address could not store copies for the groups
// of their targets. As on a single broker the copies are the broker's
// own sends (not authorized as the producer's) and are not diverted
// again, and the whole is not atomic (divert.go): a part's failure
// fails the send while the parts already forwarded stay.
func (s *Session) clusterSendDiverted(m *Message, copies []*Message, exclusive bool, done func(error)) error {
	f := &fan{done: done}
	if !exclusive {
		s.clusterForward(m, f.part())
	}
	for _, c := range copies {
		if err := validAddress(c.Address); err != nil {
			f.abort()
			return fmt.Errorf("diverting to %q: %w", c.Address, err)
		}
		c.UserID = m.UserID
		s.clusterForward(c, f.part())
	}
	if !f.seal() && done != nil {
		done(nil)
	}
	return nil
}

// clusterCommit commits a transaction through the cluster. The acked
// mirror deliveries leave their mirrors once the group has committed;
// on failure they go back upstream as failed deliveries.
func (t *Tx) clusterCommit(ctx context.Context) error {
	acks := make([]TxAck, 0, len(t.acks))
	for _, r := range t.acks {
		acks = append(acks, TxAck{Upstream: r.q.up, Tag: r.tag})
	}
	now := time.Now()
	for _, m := range t.sends {
		if m.Timestamp.IsZero() {
			m.Timestamp = now
		}
		m.UserID = t.s.opts.User
	}
	var err error
	switch rs := t.s.recordsRemote(); {
	case len(t.records) > 0 && rs != nil:
		t.records = t.lastRecords()
		recs := make([]ClientRecord, len(t.records))
		for i, op := range t.records {
			recs[i] = ClientRecord{Key: op.key, Value: op.value}
		}
		err = rs.CommitRecords(ctx, t.sends, acks, recs)
		t.records = nil
	default:
		// Records an access broker keeps itself (see RecordsCatalog)
		// take effect with the group's commit.
		err = t.s.remote.Commit(ctx, t.sends, acks)
		if err == nil {
			t.applyRecords(nil, nil)
		}
	}
	if err != nil {
		t.rollback()
		return fmt.Errorf("core: transaction rolled back: %w", err)
	}
	if t.committed != nil {
		t.committed() // the group has routed the messages already
	}
	for _, r := range t.acks {
		q := r.q
		q.mu.Lock()
		r.consumer = nil
		q.stats.inflight.Add(-1)
		q.gone(r)
		q.stats.acked.Add(1)
		q.mu.Unlock()
	}
	n, nbytes := len(t.sends), 0
	for _, m := range t.sends {
		nbytes += len(m.Body)
	}
	t.s.countIn(n, nbytes)
	t.sends, t.acks = nil, nil
	return nil
}

// EncodeMessage encodes m for another node of a cluster (the journal's
// record format, without queues). The body of a large message must be in
// m.Body.
func EncodeMessage(m *Message) []byte {
	if m.lb != nil {
		c := m.shallowCopy()
		return encodeMessage(c, nil)
	}
	return encodeMessage(m, nil)
}

// DecodeMessage decodes what EncodeMessage wrote; the message owns its
// memory.
func DecodeMessage(p []byte) (*Message, error) {
	m, qs, err := decodeMessage(p)
	if err == nil && (len(qs) != 0 || m.lb != nil) {
		err = fmt.Errorf("%w: not an encoded message", ErrInvalidMessage)
	}
	return m, err
}

// ClusterAdmin is what a Cluster implements to serve an access broker's
// administrative operations (the console, the API, the admin CLI) from
// the groups: each is Broker's method of the same name, applied where
// the queue or address lives (in every group, for a queue or address
// several groups hold a part of, with the counts summed).
type ClusterAdmin interface {
	QueueStats() []QueueStats
	Addresses() []AddressInfo
	AddressStats() []AddressStats
	CreateQueue(name string, rt RoutingType) error
	CreateAddress(name string, rt RoutingType) error
	DeleteQueue(name string) error
	DeleteAddress(name string) error
	PurgeQueue(name string) (int, error)
	MoveMessages(from, to string, max int) (int, error)
	Browse(name string, offset, limit int) ([]BrowsedMessage, int, error)
}

// clusterAdmin returns the cluster's admin side, nil for a single broker.
func (b *Broker) clusterAdmin() ClusterAdmin {
	a, _ := b.cluster.(ClusterAdmin)
	return a
}

// QueueStat returns one queue's statistics.
func (b *Broker) QueueStat(name string) (QueueStats, error) {
	if a := b.clusterAdmin(); a != nil {
		for _, st := range a.QueueStats() {
			if st.Name == name {
				return st, nil
			}
		}
		return QueueStats{}, fmt.Errorf("%w: %q", ErrQueueNotFound, name)
	}
	q := b.Queue(name)
	if q == nil {
		return QueueStats{}, fmt.Errorf("%w: %q", ErrQueueNotFound, name)
	}
	return q.Stats(), nil
}

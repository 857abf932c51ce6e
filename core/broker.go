package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core/guard"
	"github.com/junctionmq/junction/core/wildcard"
)

// Config configures a Broker. The zero value is a working broker with
// DefaultSettings for every address.
type Config struct {
	// AddressSettings override DefaultSettings by address pattern.
	AddressSettings []AddressSettings
	// Authenticator checks clients' credentials; nil accepts everyone.
	Authenticator Authenticator
	// Authorizer grants permissions per address; nil allows everything.
	Authorizer Authorizer
	// ExpiryScanInterval is how often queues are scanned for expired
	// messages that no consumer is trying to receive. Zero means 1s;
	// negative disables the scan.
	ExpiryScanInterval time.Duration
	// Logger for broker events (dead-lettered messages dropped and the
	// like). The zero value logs nothing.
	Logger zerolog.Logger
	// Messages journals durable messages; nil keeps everything in memory.
	Messages MessageJournal
	// Bindings journals durable queues and subscriptions; nil keeps them
	// in memory. Needed with Messages, or restored messages have no queue.
	Bindings Journal
	// Large stores durable bodies above LargeMessageThreshold (zero means
	// DefaultLargeMessageThreshold) in files of their own; nil keeps them
	// in the journal.
	Large                 LargeStore
	LargeMessageThreshold int
	// Pager keeps the page stores of queues whose address-full-policy is
	// PAGE once they are over their limit; nil means such queues block
	// durable producers instead. Needs Messages.
	Pager Pager
	// MaxMemory is the budget for messages held in memory, in bytes; 0 =
	// unlimited. Over it every address applies its full policy.
	MaxMemory int64
	// Disk bounds the space durable messages take; the zero value (no
	// Usage) sets no bound.
	Disk DiskLimits
	// MaxAutoCreatedQueuesPerUser bounds the anycast queues one user's
	// sends and consumers auto-create (limits.go); past it they fail with
	// ErrQuotaExceeded. 0 means no limit.
	MaxAutoCreatedQueuesPerUser int
	// TemporaryQueueTag is put in the names of the temporary queues the
	// broker creates, after TemporaryQueuePrefix: a cluster's group
	// broker names its group there, so that any node can tell where a
	// temporary queue lives from its name.
	TemporaryQueueTag string
	// Cluster makes this an access broker (cluster.go): every address
	// lives in a replicated group reached through it, and the broker
	// keeps no queues or journals of its own (Messages, Bindings, Large
	// and Pager must be nil).
	Cluster Cluster
	// VisibleWhenStored holds a durable message back from its queues
	// until it is stored, instead of making it visible at once: a
	// cluster's group broker, whose store is a replicated log, must not
	// hand out a message that a change of leader could leave uncommitted
	// (its producer, told the outcome is unknown, would send it again,
	// and a consumer would get it twice, the second time unflagged). The
	// completions of the store must then come in the order of the writes
	// to keep each producer's order.
	VisibleWhenStored bool
	// PreAuthBudget bounds the bytes held for connections that have not
	// authenticated yet, all together (preauth.go); 0 means no bound
	// (the bytes are still counted).
	PreAuthBudget int64
	// Events publishes broker events as messages (events.go).
	Events EventsConfig
	// EventsTo, when set with Events.Enabled, takes this broker's events
	// instead of a publisher of its own: a cluster's group broker hands
	// them to its node's access broker (Broker.ForwardEvent), which
	// publishes them. It is called with core locks held and must not
	// block.
	EventsTo func(Event)
	// Diverts copy or move what reaches an address to others, and
	// VirtualTopics turns on ActiveMQ's virtual topics (divert.go).
	Diverts       []Divert
	VirtualTopics bool

	// schedClock is the scheduler's clock (schedule.go); nil: the real
	// one. Tests set a fake one.
	schedClock schedClock
}

// Broker routes messages from producers to queues and from queues to
// consumers. It is the only entry point of package core; front-ends reach
// it through Sessions.
type Broker struct {
	cfg      Config
	auth     Authenticator
	authz    Authorizer
	settings *settingsTable
	log      zerolog.Logger

	mu        sync.RWMutex
	addresses map[string]*address // guarded by mu
	queues    map[string]*Queue   // guarded by mu
	wildSubs  []*Queue            // guarded by mu: multicast queues bound to patterns
	gen       uint64              // guarded by mu: bumps on every binding change
	closed    bool                // guarded by mu
	autoq     autoQueues          // guarded by mu: queues auto-created per user (limits.go)

	// sessMu guards the registry of client sessions, which every
	// connection's open and close changes. It is not mu: routing holds
	// mu for reading, and a wave of thousands of closes at once queued
	// on its write lock, each holding what its connection had not yet
	// given back. sessMu is taken alone, with no other lock held.
	sessMu    sync.Mutex
	clientIDs map[string]*Session       // guarded by sessMu
	sessions  map[uint64]*Session       // guarded by sessMu: open sessions with a Protocol
	protos    map[string]*protoCounters // guarded by sessMu: per protocol, never removed
	shut      atomic.Bool               // set with closed: NewSession refuses
	creating  map[string]chan struct{}  // guarded by mu: durable queues whose binding is being written (create.go)
	started   time.Time

	retained retainedStore
	records  clientRecords // guarded by mu (records.go)
	// staleRecords are superseded retained messages and client records
	// found during recovery, deleted once the replay is over (the
	// journal is not written while it replays).
	staleRecords   []uint64
	msgs           MessageJournal
	bindings       Journal
	large          LargeStore
	largeThreshold int
	largeInFlight  atomic.Int64 // bytes announced by the large bodies being received (ReceiveBody)
	disk           DiskLimits
	pager          Pager
	cluster        Cluster // nil unless this is an access broker
	pageGen        atomic.Uint64
	mem            memory
	drops          dropCounters
	diskFull       atomic.Pointer[string] // why durable sends are refused; nil = room
	recovered      RecoveryStats
	denials        denialCounts // authorization refusals (authz.go)
	dup            dups         // duplicate ids per address (dedup.go)
	sched          scheduler    // repeating messages (schedule.go)
	dupCount       dupCounts
	guards         guardCounts                 // pre-authentication budget and refusals, frame timeouts (preauth.go)
	ev             atomic.Pointer[events]      // broker events (events.go); nil when off
	diverts        atomic.Pointer[divertTable] // diverts and virtual topics (divert.go); nil when none
	divMu          sync.Mutex                  // serializes changes of diverts
	apiDiverts     []Divert                    // the API's diverts recovered from the bindings journal, until New installs them
	groupsVT       bool                        // an access broker's Config.VirtualTopics: its groups apply them (divert.go)

	msgID     atomic.Uint64
	tmpID     atomic.Uint64
	sessionID atomic.Uint64
	run       string // random per start, in temporary queue names
	queueID   atomic.Uint64
	txID      atomic.Uint64
	routeGen  atomic.Uint64 // mirrors gen for lock-free cache checks
	permGen   atomic.Uint64 // bumped by PermissionsChanged: cached authorization decisions are stale

	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// address is a named destination with the queues bound to it.
type address struct {
	name      string
	settings  Settings    // guarded by Broker.mu (a reload replaces it)
	dupFromID atomic.Bool // settings.DuplicateIDFromMessageID, for sends
	auto      bool        // created on first use

	// Guarded by Broker.mu:
	anycast   *Queue   // the queue of an anycast address (named as the address)
	multicast []*Queue // subscriptions bound to exactly this address
	isMulti   bool     // the address accepts multicast sends

	routes atomic.Pointer[routeSet] // multicast routes incl. wildcard subscriptions

	routed, unrouted atomic.Uint64
}

type routeSet struct {
	gen    uint64
	queues []*Queue
}

// New returns a running broker. With journals configured it first
// restores the durable queues and messages they hold.
func New(cfg Config) (*Broker, error) {
	st, err := newSettingsTable(cfg.AddressSettings)
	if err != nil {
		return nil, err
	}
	for i := range cfg.Diverts {
		if err := cfg.Diverts[i].Validate(); err != nil {
			return nil, err
		}
	}
	b := &Broker{
		cfg:       cfg,
		auth:      cfg.Authenticator,
		authz:     cfg.Authorizer,
		settings:  st,
		log:       cfg.Logger,
		addresses: make(map[string]*address),
		queues:    make(map[string]*Queue),
		clientIDs: make(map[string]*Session),
		sessions:  make(map[uint64]*Session),
		protos:    make(map[string]*protoCounters),
		started:   time.Now(),
		done:      make(chan struct{}),
		retained:  retainedStore{byAddr: make(map[string]*Message), ids: make(map[string]uint64)},
		records:   clientRecords{byClient: make(map[string]map[string]clientRecord)},
		run:       strconv.FormatUint(uint64(rand.Uint32()), 36),
		msgs:      cfg.Messages,
		bindings:  cfg.Bindings,
		large:     cfg.Large,
		disk:      cfg.Disk,
		pager:     cfg.Pager,
		cluster:   cfg.Cluster,
		mem:       memory{max: cfg.MaxMemory},
		guards:    guardCounts{budget: guard.NewBudget(cfg.PreAuthBudget)},
	}
	b.largeThreshold = cfg.LargeMessageThreshold
	if b.largeThreshold <= 0 {
		b.largeThreshold = DefaultLargeMessageThreshold
	}
	if b.auth == nil {
		b.auth = AllowAll{}
	}
	if b.msgs != nil && b.bindings == nil {
		return nil, errors.New("core: a message journal needs a bindings journal")
	}
	if b.cluster != nil && (b.msgs != nil || b.bindings != nil || b.large != nil || b.pager != nil) {
		return nil, errors.New("core: an access broker (Config.Cluster) keeps no journals or page stores: its groups do")
	}
	if b.cluster != nil {
		b.groupsVT = cfg.VirtualTopics
	}
	rs, err := b.recover()
	if err != nil {
		return nil, err
	}
	b.recovered = rs
	b.startEvents(cfg.Events)
	if len(cfg.Diverts) > 0 || cfg.VirtualTopics || len(b.apiDiverts) > 0 {
		if err := b.installDiverts(slices.Clone(cfg.Diverts), cfg.VirtualTopics); err != nil {
			return nil, err
		}
	}
	// After the diverts: a repeating message's copies go through them.
	if err := b.startScheduler(cfg.schedClock); err != nil {
		return nil, err
	}
	if cfg.Disk.Usage != nil {
		b.checkDisk(cfg.Disk)
		b.wg.Add(1)
		go b.diskLoop(cfg.Disk)
	}
	if iv := cfg.ExpiryScanInterval; iv >= 0 {
		if iv == 0 {
			iv = time.Second
		}
		b.wg.Add(1)
		go b.expiryLoop(iv)
	}
	if fc, ok := cfg.Cluster.(FencingCluster); ok {
		fc.FenceBroker(b)
	}
	return b, nil
}

// Close stops the broker's background work. Sessions should be closed
// first; Close is idempotent.
func (b *Broker) Close() error {
	b.once.Do(func() {
		b.stopScheduler()
		b.mu.Lock()
		b.closed = true
		b.shut.Store(true)
		for _, q := range b.queues {
			q.mu.Lock()
			if q.timer != nil {
				q.timer.Stop()
			}
			q.mu.Unlock()
		}
		b.mu.Unlock()
		close(b.done)
	})
	b.wg.Wait()
	return nil
}

// Recovered reports what New restored from the journals.
func (b *Broker) Recovered() RecoveryStats { return b.recovered }

// Authenticate checks credentials with the configured Authenticator.
func (b *Broker) Authenticate(ctx context.Context, login, passcode string) (string, error) {
	return b.auth.Authenticate(ctx, login, passcode)
}

// SettingsFor returns the effective settings for an address.
func (b *Broker) SettingsFor(addr string) Settings { return b.settings.resolve(addr) }

func (b *Broker) expiryLoop(iv time.Duration) {
	defer b.wg.Done()
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-b.done:
			return
		case now := <-t.C:
			b.mu.RLock()
			qs := make([]*Queue, 0, len(b.queues))
			for _, q := range b.queues {
				qs = append(qs, q)
			}
			b.mu.RUnlock()
			for _, q := range qs {
				q.expireScan(now)
			}
		}
	}
}

// validAddress rejects empty names and wildcard patterns where a single
// address is needed.
func validAddress(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty address", ErrInvalidAddress)
	}
	if wildcard.IsPattern(name) {
		return fmt.Errorf("%w: %q is a wildcard pattern", ErrInvalidAddress, name)
	}
	if IsComposite(name) {
		return fmt.Errorf("%w: %q is a composite destination (divert.go)", ErrInvalidAddress, name)
	}
	return nil
}

// lockToCreate checks a name and routing type an administrator creates
// and takes b.mu for the creation; on error b.mu is not held.
func (b *Broker) lockToCreate(name string, rt RoutingType) error {
	if err := validAddress(name); err != nil {
		return err
	}
	if rt != Anycast && rt != Multicast {
		return fmt.Errorf("%w: routing type %v", ErrInvalidAddress, rt)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// CreateAddress creates an address accepting rt (Anycast creates its
// queue too). Creating an existing address adds rt to it.
func (b *Broker) CreateAddress(name string, rt RoutingType) error {
	if a := b.clusterAdmin(); a != nil {
		return a.CreateAddress(name, rt)
	}
	if err := b.lockToCreate(name, rt); err != nil {
		return err
	}
	defer b.mu.Unlock()
	a := b.addressLocked(name, false)
	return b.addRoutingLocked(a, rt)
}

// DeleteAddress deletes an address and its queues. It fails with
// ErrSubscriptionInUse while any of them has consumers.
func (b *Broker) DeleteAddress(name string) error {
	if a := b.clusterAdmin(); a != nil {
		return a.DeleteAddress(name)
	}
	b.mu.Lock()
	a := b.addresses[name]
	if a == nil {
		b.mu.Unlock()
		return ErrAddressNotFound
	}
	qs := append([]*Queue(nil), a.multicast...)
	if a.anycast != nil {
		qs = append(qs, a.anycast)
	}
	for _, q := range qs {
		if q.stats.consumers.Load() > 0 {
			b.mu.Unlock()
			return inUsef("address %q: queue %q has consumers", name, q.name)
		}
	}
	for _, q := range qs {
		b.unbindLocked(q)
	}
	delete(b.addresses, name)
	b.bumpLocked()
	b.mu.Unlock()
	b.emit(Event{Type: EventAddressRemoved, Address: name})
	for _, q := range qs {
		if q.owner != nil {
			q.owner.forgetTemp(q)
		}
		b.dropQueue(q)
	}
	return nil
}

// DeleteQueue deletes a queue and its messages. It fails with
// ErrSubscriptionInUse while the queue has consumers.
func (b *Broker) DeleteQueue(name string) error {
	if a := b.clusterAdmin(); a != nil {
		return a.DeleteQueue(name)
	}
	b.mu.RLock()
	q := b.queues[name]
	b.mu.RUnlock()
	if q == nil {
		return ErrQueueNotFound
	}
	if q.stats.consumers.Load() > 0 {
		return inUsef("queue %q has consumers", name)
	}
	b.deleteQueue(q)
	return nil
}

func (b *Broker) deleteQueue(q *Queue) {
	b.mu.Lock()
	if b.queues[q.name] == q {
		b.unbindLocked(q)
		if a := b.addresses[q.address]; q.owner != nil && a != nil && a.anycast == nil && !a.isMulti && len(a.multicast) == 0 {
			// A temporary queue's address goes with it: a client that
			// makes one per request must not leave addresses behind.
			delete(b.addresses, q.address)
			b.emit(Event{Type: EventAddressRemoved, Address: q.address})
		}
		b.bumpLocked()
	}
	b.mu.Unlock()
	if q.owner != nil {
		q.owner.forgetTemp(q)
	}
	b.dropQueue(q)
}

// dropQueue empties an unbound queue and forgets it in the journals.
func (b *Broker) dropQueue(q *Queue) {
	q.mu.Lock()
	moves := q.deleteLocked(nil)
	q.mu.Unlock()
	b.carryOut(moves)
	b.unpersistQueue(q)
	b.emitQueue(EventBindingRemoved, q, "")
}

// Queue returns the queue with the given name, or nil.
func (b *Broker) Queue(name string) *Queue {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.queues[name]
}

// QueueStats returns a snapshot of every queue's counters.
func (b *Broker) QueueStats() []QueueStats {
	if a := b.clusterAdmin(); a != nil {
		return a.QueueStats()
	}
	b.mu.RLock()
	qs := make([]*Queue, 0, len(b.queues))
	for _, q := range b.queues {
		qs = append(qs, q)
	}
	b.mu.RUnlock()
	// Outside b.mu: Stats takes each queue's lock (for OldestMessage).
	out := make([]QueueStats, 0, len(qs))
	for _, q := range qs {
		out = append(out, q.Stats())
	}
	return out
}

// AddressRoutingTypes reports whether the address name exists and which
// routing types it accepts as it stands: anycast when it has its queue,
// multicast when it takes multicast sends. It creates nothing. A
// front-end uses it to give a bare address, one whose protocol names no
// routing type (an AMQP link address), the routing type the address
// already has, and anycast when it has none or does not exist. A
// wildcard pattern is never an address.
func (b *Broker) AddressRoutingTypes(name string) (anycast, multicast, exists bool) {
	if b.cluster != nil {
		return b.cluster.AddressRoutingTypes(name)
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	a := b.addresses[name]
	if a == nil {
		return false, false, false
	}
	return a.anycast != nil, a.isMulti, true
}

// AddressStats is a snapshot of an address's counters.
type AddressStats struct {
	Name      string
	Anycast   bool   // has an anycast queue
	Multicast bool   // accepts multicast sends
	Queues    int    // queues bound to it (anycast queue and subscriptions)
	Routed    uint64 // messages sent to it that reached at least one queue
	Unrouted  uint64 // messages sent to it that reached no queue
}

// AddressStats returns a snapshot of every address's counters.
func (b *Broker) AddressStats() []AddressStats {
	if a := b.clusterAdmin(); a != nil {
		return a.AddressStats()
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]AddressStats, 0, len(b.addresses))
	for _, a := range b.addresses {
		n := len(a.multicast)
		if a.anycast != nil {
			n++
		}
		out = append(out, AddressStats{
			Name: a.name, Anycast: a.anycast != nil, Multicast: a.isMulti,
			Queues: n, Routed: a.routed.Load(), Unrouted: a.unrouted.Load(),
		})
	}
	return out
}

func (b *Broker) bumpLocked() {
	b.gen++
	b.routeGen.Store(b.gen)
}

// addressLocked returns the address, creating it (with no routing type)
// if needed.
func (b *Broker) addressLocked(name string, auto bool) *address {
	a := b.addresses[name]
	if a == nil {
		a = &address{name: name, settings: b.settings.resolve(name), auto: auto}
		a.dupFromID.Store(a.settings.DuplicateIDFromMessageID)
		b.addresses[name] = a
		b.bumpLocked()
		b.emit(Event{Type: EventAddressAdded, Address: name})
	}
	return a
}

// addRoutingLocked makes address a take sends of rt: an anycast queue
// (created as anycastLocked does, b.mu released while its binding is
// written), or multicast.
func (b *Broker) addRoutingLocked(a *address, rt RoutingType) error {
	switch rt {
	case Anycast:
		_, err := b.anycastLocked(a.name, a.auto)
		return err
	case Multicast:
		if !a.isMulti {
			a.isMulti = true
			b.bumpLocked()
		}
	}
	return nil
}

func (b *Broker) newQueueLocked(name, addr string, rt RoutingType, durable, temporary bool, clientID string) *Queue {
	q := b.unregisteredQueue(name, addr, rt, durable, temporary, clientID)
	b.queues[name] = q
	b.emitQueue(EventBindingAdded, q, "")
	return q
}

// bindSubscriptionLocked binds a multicast queue to its address or pattern.
func (b *Broker) bindSubscriptionLocked(q *Queue) {
	if wildcard.IsPattern(q.address) {
		b.wildSubs = append(b.wildSubs, q)
	} else {
		a := b.addressLocked(q.address, true)
		b.addRoutingLocked(a, Multicast)
		a.multicast = append(a.multicast, q)
	}
	b.bumpLocked()
}

func (b *Broker) unbindLocked(q *Queue) {
	delete(b.queues, q.name)
	b.unchargeAutoQueueLocked(q)
	if q.routing == Anycast {
		if a := b.addresses[q.address]; a != nil && a.anycast == q {
			a.anycast = nil
		}
		return
	}
	if wildcard.IsPattern(q.address) {
		b.wildSubs = removeQueue(b.wildSubs, q)
	} else if a := b.addresses[q.address]; a != nil {
		a.multicast = removeQueue(a.multicast, q)
	}
}

func removeQueue(qs []*Queue, q *Queue) []*Queue {
	for i, x := range qs {
		if x == q {
			return append(qs[:i:i], qs[i+1:]...)
		}
	}
	return qs
}

// subscriptionMatch reports whether a subscription bound to pattern
// receives the messages of address. An address whose first word begins
// with '$' (MQTT's $SYS topics) is a system address: a pattern whose
// first word is a wildcard does not reach it, so "#" is not everything
// the broker publishes about itself (MQTT-4.7.2-1); a pattern that names
// the word ("$SYS.#") does.
func subscriptionMatch(pattern, address string) bool {
	if address != "" && address[0] == '$' {
		first, _, _ := strings.Cut(pattern, ".")
		if first == "*" || first == "#" || first == ">" {
			return false
		}
	}
	return wildcard.Match(pattern, address)
}

// multicastRoutes returns the subscriptions a multicast send to a
// reaches, from a cache rebuilt when bindings change.
func (b *Broker) multicastRoutes(a *address) []*Queue {
	gen := b.routeGen.Load()
	if rs := a.routes.Load(); rs != nil && rs.gen == gen {
		return rs.queues
	}
	b.mu.RLock()
	qs := append([]*Queue(nil), a.multicast...)
	for _, q := range b.wildSubs {
		if subscriptionMatch(q.address, a.name) {
			qs = append(qs, q)
		}
	}
	gen = b.gen
	b.mu.RUnlock()
	a.routes.Store(&routeSet{gen: gen, queues: qs})
	return qs
}

// resolve finds (or auto-creates) the address a message goes to and the
// routing type it uses. Auto-creating needs the permissions of sender
// (nil for the broker's own sends).
func (b *Broker) resolve(m *Message, sender *Session) (*address, error) {
	b.mu.RLock()
	a := b.addresses[m.Address]
	closed := b.closed
	b.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if m.RoutingType == QueueElseTopic {
		m.RoutingType = Multicast
		if a != nil && b.supports(a, Anycast) {
			m.RoutingType = Anycast
		}
	}
	if a != nil && b.supports(a, m.RoutingType) {
		if m.RoutingType == RoutingDefault {
			m.RoutingType = b.defaultRouting(a)
		}
		return a, nil
	}
	s := b.settings.resolve(m.Address)
	if !s.AutoCreate || isTemporaryName(m.Address) {
		if a == nil {
			return nil, fmt.Errorf("%w: %q", ErrAddressNotFound, m.Address)
		}
		return nil, fmt.Errorf("%w: %q does not accept %v", ErrRoutingMismatch, m.Address, m.RoutingType)
	}
	if m.RoutingType == RoutingDefault {
		m.RoutingType = s.DefaultRoutingType
	}
	if m.RoutingType == Anycast {
		return b.autoCreateAnycast(m.Address, sender)
	}
	if err := sender.authorizeCreate(m.Address, m.RoutingType); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	a = b.addressLocked(m.Address, true)
	if err := b.addRoutingLocked(a, m.RoutingType); err != nil {
		return nil, err
	}
	return a, nil
}

// supports reports whether a takes sends of rt without creating anything.
func (b *Broker) supports(a *address, rt RoutingType) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	switch rt {
	case Anycast:
		return a.anycast != nil
	case Multicast:
		return a.isMulti
	}
	return a.anycast != nil || a.isMulti
}

func (b *Broker) defaultRouting(a *address) RoutingType {
	b.mu.RLock()
	defer b.mu.RUnlock()
	switch {
	case a.anycast != nil && a.isMulti:
		return a.settings.DefaultRoutingType
	case a.anycast != nil:
		return Anycast
	}
	return Multicast
}

// prepare validates m and fills in what the broker owns.
func (b *Broker) prepare(m *Message, user string, now time.Time) error {
	if err := validAddress(m.Address); err != nil {
		return err
	}
	if m.Priority > MaxPriority {
		return fmt.Errorf("%w: priority %d above %d", ErrInvalidMessage, m.Priority, MaxPriority)
	}
	if err := ValidateProperties(m.Properties); err != nil {
		return err
	}
	if m.lb == nil || m.lb.id != m.ID || m.ID == 0 {
		// A streamed body's message has the id its file was written
		// under (ReceiveBody).
		m.ID = b.msgID.Add(1)
	}
	if m.Timestamp.IsZero() {
		m.Timestamp = now
	}
	m.UserID = user
	// A copy of a streamed message gets a file of its own.
	return b.ownBody(m)
}

// sendOpts says who sends a message and how a full queue may answer.
type sendOpts struct {
	// done gets the confirmation when the message must be journaled or
	// paged (see route); nil for messages nobody waits for.
	done func(error)
	// s is the producing session, for attribution; nil for the broker's
	// own moves (dead-lettering, expiry, admin moves).
	s *Session
	// wait lets a BLOCK queue over its limit refuse with errBlocked, for
	// the session to wait and retry; otherwise the message is taken over
	// the limit (AMQP bounds that by withholding credit).
	wait bool
	// journaled: a committed transaction's message, already in the
	// journal for every durable queue: it is held in memory whatever the
	// policies say (the commit checked FAIL; the overshoot is bounded by
	// the transaction).
	journaled bool
	// diverted: the message is a divert's copy, or was diverted
	// already (divert.go): no divert applies to it again.
	diverted bool
	// mustRoute: a message no queue takes fails with ErrUnroutable
	// instead of being dropped (an administrator's move: the original
	// must stay).
	mustRoute bool
}

// route hands a prepared message to the queues of its address. When the
// message must be journaled it returns pending: done is then called once
// the journal has synced it (or failed). Otherwise done is not called.
func (b *Broker) route(m *Message, now time.Time, done func(error)) (pending bool, err error) {
	return b.routeWith(m, now, sendOpts{done: done})
}

func (b *Broker) routeWith(m *Message, now time.Time, o sendOpts) (pending bool, err error) {
	if !o.diverted {
		if dt := b.diverts.Load(); dt != nil {
			if copies, exclusive := dt.divert(b, m); len(copies) > 0 || exclusive {
				return b.routeDiverted(m, copies, exclusive, now, o)
			}
		}
	}
	a, err := b.resolve(m, o.s)
	if err != nil {
		return false, err
	}
	return b.deliver(a, m, now, o)
}

// verdict is what a queue does with a new message.
type verdict uint8

const (
	keep      verdict = iota // hold it in memory
	toPage                   // append it to the page store
	dropIt                   // drop it for this queue (DROP)
	dropVital                // drop it: non-durable over the limit of a PAGE queue
	refuse                   // refuse the send (FAIL)
	block                    // the producer waits for room (BLOCK)
)

// verdict applies q's full policy to m. A queue that pages keeps paging
// until its store is drained, so that messages stay in order.
func (q *Queue) verdict(m *Message, wait bool) verdict {
	over := q.full(m) || q.b.overBudget(m)
	paging := q.paging.Load()
	if !over && !paging {
		return keep
	}
	switch q.settings().FullPolicy {
	case FullPage:
		switch {
		case q.canPage(m):
			return toPage
		case !over:
			return keep
		case m.Durable && q.durable && !q.capped.Load():
			// No page store: a durable message is never dropped...
			return blockOr(wait)
		case m.Durable && q.durable:
			// ...unless the queue is one client's, capped by its
			// front-end (an MQTT persistent session): blocking every
			// publisher for one offline device would be worse.
			return dropIt
		}
		return dropVital
	case FullBlock:
		if !over {
			return keep
		}
		return blockOr(wait)
	case FullFail:
		if !over {
			return keep
		}
		return refuse
	}
	if !over {
		return keep
	}
	return dropIt
}

func blockOr(wait bool) verdict {
	if wait {
		return block
	}
	return keep
}

// ErrDiskFull refuses a durable send while the store is over its disk
// limits (Config.MaxDiskUsage, MinFreeDisk).
var ErrDiskFull = errors.New("core: disk limit reached: durable sends are refused until consumers free space")

// deliver journals or pages m where it must (see route) and enqueues it
// on the queues of a resolved address that hold it in memory. A durable
// message becomes visible to consumers at once (unless
// Config.VisibleWhenStored); only its producer's confirmation waits for
// the sync.
func (b *Broker) deliver(a *address, m *Message, now time.Time, o sendOpts) (pending bool, err error) {
	// A duplicate id (dedup.go) is claimed first: a duplicate goes no
	// further, and an id whose send fails is forgotten, so that the
	// producer's next try is taken.
	var de *dupEntry
	if key := dupKey(m, b.dupFromMessageID(a)); key != "" && !o.journaled {
		var dup bool
		if de, dup = b.claimDup(a.name, key); dup {
			b.countDup(a.name)
			if o.done == nil {
				return false, nil
			}
			b.waitDup(de, o.done)
			return true, nil
		}
		if de != nil {
			defer func() {
				if err != nil {
					b.settleDup(a.name, de, err)
				}
			}()
		}
	}
	var one [1]*Queue
	qs := b.targetsOf(a, m, one[:0], true)
	if len(qs) == 0 {
		if o.mustRoute {
			if de != nil {
				b.settleDup(a.name, de, ErrUnroutable) // forgotten: not stored
			}
			return false, fmt.Errorf("%w: %q", ErrUnroutable, a.name)
		}
		a.unrouted.Add(1)
		if de != nil {
			b.settleDup(a.name, de, nil)
		}
		return false, nil
	}
	// First every queue's verdict: a refusal (FAIL, BLOCK) refuses the
	// whole send before anything is enqueued or counted; DROP and PAGE
	// take the queue out of those holding m in memory.
	var vbuf [4]verdict
	vs := vbuf[:0]
	for _, q := range qs {
		v := keep
		if !o.journaled {
			v = q.verdict(m, o.wait)
		}
		switch v {
		case refuse:
			b.dropped(q, m, o.s, RefusedFull)
			return false, fmt.Errorf("%w: %q holds %d of %d bytes", ErrAddressFull, q.name, q.bytes.Load(), q.maxBytes.Load())
		case block:
			b.emitDrop(q, m, o.s, true, "blocked")
			return false, errBlocked
		}
		vs = append(vs, v)
	}
	var mem, paged []*Queue
	split := false
	for i, q := range qs {
		v := vs[i]
		if v == keep {
			if split {
				mem = append(mem, q)
			}
			continue
		}
		if !split {
			mem = append(make([]*Queue, 0, len(qs)), qs[:i]...)
			split = true
		}
		switch v {
		case dropIt:
			b.dropped(q, m, o.s, DropFull)
		case dropVital:
			b.dropped(q, m, o.s, DropNonDurable)
		case toPage:
			paged = append(paged, q)
		}
	}
	if split {
		qs = mem
	}
	persist := o.done != nil && b.persisted(m, qs)
	if why := b.diskFull.Load(); why != nil && (persist || len(paged) > 0) {
		target := qs
		if len(paged) > 0 {
			target = paged
		}
		b.dropped(target[0], m, o.s, RefusedDisk)
		return false, fmt.Errorf("%w (%s)", ErrDiskFull, *why)
	}
	if len(qs) == 0 && len(paged) == 0 {
		if de != nil {
			b.settleDup(a.name, de, nil)
		}
		return false, nil
	}
	a.routed.Add(1)
	// Page first: a page store that fails refuses the send before any
	// queue holds the message (a copy already paged for another
	// subscription stays: at least once).
	var stores []PageStore
	for _, q := range paged {
		st, err := q.page(m)
		if err != nil {
			return false, err
		}
		if st != nil {
			stores = append(stores, st)
		}
	}
	done := o.done
	held := persist && b.cfg.VisibleWhenStored
	if held {
		stored, queues := done, slices.Clone(qs)
		done = func(err error) {
			if err == nil {
				for _, q := range queues {
					q.enqueue(m, now)
				}
			}
			stored(err)
		}
	}
	if n := len(stores) + btoi(persist); n > 0 {
		if done == nil {
			done = b.logStoreErr
		}
		if de != nil {
			stored := done
			done = func(err error) {
				b.settleDup(a.name, de, err)
				stored(err)
			}
		}
		if n > 1 {
			done = joinDone(n, done)
		}
	} else if de != nil {
		// Nothing to store: the id is kept in memory only.
		b.settleDup(a.name, de, nil)
	}
	if persist {
		if de != nil {
			b.journalWithDup(m, qs, a.name, de, done)
		} else {
			b.journalMessage(m, qs, done)
		}
		pending = true
	}
	for _, st := range stores {
		st.Sync(done)
		pending = true
	}
	if !held {
		for _, q := range qs {
			q.enqueue(m, now)
		}
	}
	return pending && o.done != nil, nil
}

// dupFromMessageID is the address's duplicate-id-from-message-id
// setting, read without b.mu (under which a reload replaces settings):
// a send may be routed with b.mu held.
func (b *Broker) dupFromMessageID(a *address) bool { return a.dupFromID.Load() }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// joinDone returns a callback to be called n times that calls done once,
// after the last call, with the first error.
func joinDone(n int, done func(error)) func(error) {
	var mu sync.Mutex
	var first error
	return func(err error) {
		mu.Lock()
		n--
		if err != nil && first == nil {
			first = err
		}
		last, e := n == 0, first
		mu.Unlock()
		if last {
			done(e)
		}
	}
}

// carryOut does what queue changes left to do outside the queue lock:
// journal settled messages and delivery counts, and move messages to the
// expiry or dead-letter address of their queue.
func (b *Broker) carryOut(moves []move) {
	for _, mv := range moves {
		if mv.r.q.up != nil && b.settleUpstream(mv) {
			continue
		}
		switch mv.reason {
		case settled:
			b.persistSettled(mv.r)
			continue
		case counted:
			b.persistCount(mv.r)
			continue
		case moveUnreadable:
			b.withdrawUnreadable(mv.r)
			continue
		}
		q := mv.r.q
		target := q.settings().DeadLetterAddress
		counter := &q.stats.deadLettered
		if mv.reason == moveExpired {
			target = q.settings().ExpiryAddress
			counter = &q.stats.expired
		}
		counter.Add(1)
		q.gone(mv.r)
		m := mv.r.msg
		if b.ev.Load() != nil {
			typ := EventMessageDeadLettered
			if mv.reason == moveExpired {
				typ = EventMessageExpired
			}
			b.emit(Event{Type: typ, Address: m.Address, Queue: q.name, Reason: mv.reason.String(), Multicast: q.routing == Multicast})
		}
		if target == "" || target == q.address {
			b.log.Warn().Str("queue", q.name).Uint64("message", m.ID).Str("reason", mv.reason.String()).
				Msg("message dropped: no dead-letter or expiry address to move it to")
			b.persistSettled(mv.r)
			continue
		}
		c := m.copyFor(target, map[string]any{
			PropOriginalAddress: m.Address,
			PropOriginalQueue:   q.name,
			PropOriginalID:      int64(m.ID),
			PropReason:          mv.reason.String(),
		})
		now := time.Now()
		err := b.prepare(c, m.UserID, now)
		if err == nil {
			// The copy is journaled before the original is settled, so a
			// crash loses neither (at worst both survive).
			_, err = b.route(c, now, b.logStoreErr)
		}
		if err != nil {
			b.log.Warn().Err(err).Str("queue", q.name).Str("target", target).Uint64("message", m.ID).
				Msg("message dropped: moving it failed")
		}
		b.persistSettled(mv.r)
	}
}

// tempQueueName names a non-durable subscription's queue.
func (b *Broker) tempQueueName(addr string) string {
	return addr + "/" + strconv.FormatUint(b.tmpID.Add(1), 10)
}

// targetsOf returns the queues a message to a resolved address reaches;
// an anycast queue is appended to buf (which the caller may keep on its
// stack), multicast routes come from the shared cache and must not be
// changed. Subscriptions whose selector or no-local refuse m, and
// wildcard subscriptions whose readers may not consume from its address,
// are left out (Queue.admits); note counts and logs the latter refusals
// (the send itself, not a transaction's look-ahead).
func (b *Broker) targetsOf(a *address, m *Message, buf []*Queue, note bool) []*Queue {
	if m.RoutingType == Anycast {
		b.mu.RLock()
		defer b.mu.RUnlock()
		if a.anycast == nil {
			return buf
		}
		return append(buf, a.anycast)
	}
	return admitted(b.multicastRoutes(a), m, note)
}

package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/junctionmq/junction/core"
)

// access is the access side of forwarding: the core.Cluster port of this
// node's access broker. A client session's operations on an address go
// to the node leading the address's group: here (a local link: direct
// calls into server) or another node (frames).
type access struct {
	n       *Node
	run     uint64        // random per start, in forwarding ids
	nextID  atomic.Uint64 // session, consumer and request ids
	mu      sync.Mutex
	pending map[uint64]*call         // rid → waiting request
	parts   map[uint64]*part         // cid → upstream part
	links   map[linkKey]*sessionLink // (sid, group) → where the session is open
	full    fullAddresses            // addresses over their limits (full.go)
}

type linkKey struct{ sid, group uint64 }

// call is a request waiting for its kResult.
type call struct {
	leader uint64
	link   *sessionLink // the session link it went through (nil: none)
	at     time.Time
	done   func(err error, str string, payload []byte)
}

// sessionLink is a client session's presence on a group's leader.
type sessionLink struct {
	s      *remoteSession
	group  uint64
	leader uint64
	lost   bool
	parts  map[*part]struct{}
}

func newAccess(n *Node) *access {
	a := &access{n: n, pending: make(map[uint64]*call), parts: make(map[uint64]*part), links: make(map[linkKey]*sessionLink),
		run: rand.Uint64()}
	a.nextID.Store(uint64(time.Now().UnixNano()))
	return a
}

// Open implements core.Cluster.
func (a *access) Open(s *core.Session) core.RemoteSession {
	return &remoteSession{a: a, sid: a.nextID.Add(1), opts: s.Options()}
}

// remoteSession is one client session's side of the cluster.
type remoteSession struct {
	a       *access
	sid     uint64
	opts    core.SessionOptions
	mu      sync.Mutex
	closed  bool
	lanes   map[uint64]*sendLane // guarded by mu: unconfirmed sends per group
	records recordLane           // client record writes, in order (records.go)
	order   sync.Mutex           // keeps one session's requests in call order across link set-up
}

// link returns the session's link to group's leader, opening the session
// there first. It waits up to the node's leader wait for a leader.
func (s *remoteSession) link(ctx context.Context, group uint64) (*sessionLink, error) {
	a := s.a
	leader, err := a.n.waitLeader(ctx, group)
	if err != nil {
		return nil, err
	}
	k := linkKey{s.sid, group}
	a.mu.Lock()
	if s.isClosed() {
		a.mu.Unlock()
		return nil, core.ErrSessionClosed
	}
	l := a.links[k]
	if l != nil && !l.lost && l.leader == leader {
		a.mu.Unlock()
		return l, nil
	}
	if l != nil {
		a.loseLinkLocked(l, "leader changed")
	}
	l = &sessionLink{s: s, group: group, leader: leader, parts: make(map[*part]struct{})}
	a.links[k] = l
	a.mu.Unlock()
	a.to(leader, &rpcMsg{kind: kOpen, group: group, sid: s.sid, open: s.opts})
	return l, nil
}

func (s *remoteSession) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// to sends a request to node leader: a direct call when it is this node.
func (a *access) to(leader uint64, m *rpcMsg) error {
	if leader == a.n.cfg.NodeID {
		a.n.handleLocal(m)
		return nil
	}
	return a.n.links.send(leader, m)
}

// request sends m expecting a kResult, and waits for it (bounded by the
// node's request timeout).
func (a *access) request(ctx context.Context, l *sessionLink, leader uint64, m *rpcMsg) (string, []byte, error) {
	type res struct {
		err     error
		str     string
		payload []byte
	}
	ch := make(chan res, 1)
	a.async(l, leader, m, func(err error, str string, p []byte) { ch <- res{err, str, p} })
	t := time.NewTimer(a.n.cfg.RequestTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.str, r.payload, r.err
	case <-ctx.Done():
		a.forget(m.rid, ctx.Err())
		return "", nil, ctx.Err()
	case <-t.C:
		a.forget(m.rid, nil)
		return "", nil, fmt.Errorf("%w: no answer from node %d within %v", core.ErrUnavailable, leader, a.n.cfg.RequestTimeout)
	}
}

// async sends m with a fresh request id; done gets the result (or the
// loss of the link) once.
func (a *access) async(l *sessionLink, leader uint64, m *rpcMsg, done func(error, string, []byte)) {
	m.rid = a.nextID.Add(1)
	c := &call{leader: leader, done: done, at: time.Now()}
	if l != nil {
		c.link = l
	}
	a.mu.Lock()
	if l != nil && l.lost {
		a.mu.Unlock()
		done(fmt.Errorf("%w: group %d's leader changed", core.ErrUnavailable, l.group), "", nil)
		return
	}
	a.pending[m.rid] = c
	a.mu.Unlock()
	if err := a.to(leader, m); err != nil {
		a.mu.Lock()
		_, mine := a.pending[m.rid]
		delete(a.pending, m.rid)
		a.mu.Unlock()
		if mine { // not failed meanwhile by a reset of the link
			done(err, "", nil)
		}
	}
}

// expireCalls fails the requests that have waited longer than the
// node's request timeout with core.ErrUnavailable, until stop: a lost
// link fails its calls at once, but an answer can also be lost with a
// link that stays up (a group broker closed between taking a request
// and answering it), and a send waiting for it would then never be sent
// again nor answered. A send retried this way carries its forwarding
// id, so its group stores it once.
func (a *access) expireCalls(stop <-chan struct{}) {
	timeout := a.n.cfg.RequestTimeout
	t := time.NewTicker(max(timeout/4, 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		var late []*call
		a.mu.Lock()
		for rid, c := range a.pending {
			if time.Since(c.at) > timeout {
				late = append(late, c)
				delete(a.pending, rid)
				if c.link != nil {
					a.loseLinkLocked(c.link, "no answer in time")
				}
			}
		}
		a.mu.Unlock()
		for _, c := range late {
			c.done(fmt.Errorf("%w: no answer from node %d within %v", core.ErrUnavailable, c.leader, timeout), "", nil)
		}
	}
}

func (a *access) forget(rid uint64, err error) {
	a.mu.Lock()
	delete(a.pending, rid)
	a.mu.Unlock()
}

// result completes a request (from a kResult).
func (a *access) result(rid uint64, err error, str string, payload []byte) {
	a.mu.Lock()
	c := a.pending[rid]
	delete(a.pending, rid)
	if c != nil && c.link != nil && errors.Is(err, core.ErrUnavailable) {
		// The leader no longer serves the session this link opened (it
		// lost the group, or forgot the session with a reset of the
		// link between the nodes): the next request opens it again
		// rather than failing the same way until it gives up.
		a.loseLinkLocked(c.link, "the session is not served there")
	}
	a.mu.Unlock()
	if c != nil {
		c.done(err, str, payload)
	}
}

// Send implements core.RemoteSession. A send nobody waits for goes
// once. One that is waited for is kept until confirmed: if its group's
// leader changes or its link is reset before the answer, it is sent
// again to the new leader, in order with the session's other unconfirmed
// sends to that group, carrying a forwarding id (core.PropForwardID)
// with which the group broker drops it if the first try was stored
// after all. So a client of a surviving node keeps its connection
// through a failover, and its messages are stored once.
func (s *remoteSession) Send(m *core.Message, done func(error)) {
	g := s.a.n.groupOf(m.Address)
	if done == nil {
		s.order.Lock()
		defer s.order.Unlock()
		l, err := s.link(context.Background(), g)
		if err == nil {
			s.a.to(l.leader, &rpcMsg{kind: kSend, group: g, sid: s.sid, msg: m})
		}
		return
	}
	props := make(map[string]any, len(m.Properties)+1)
	for k, v := range m.Properties {
		props[k] = v
	}
	props[core.PropForwardID] = s.a.forwardID(s.sid)
	m.Properties = props
	ps := &pendingSend{m: m, done: done, deadline: time.Now().Add(s.a.n.cfg.RequestTimeout + s.a.n.cfg.LeaderWait)}
	ln := s.lane(g)
	ln.mu.Lock()
	ln.q = append(ln.q, ps)
	retrying := ln.retrying
	ln.mu.Unlock()
	if retrying {
		return // the retrier sends it after the older ones
	}
	s.order.Lock()
	defer s.order.Unlock()
	s.transmit(g, ln, ps)
}

// pendingSend is a send waiting for its group's confirmation.
type pendingSend struct {
	m        *core.Message
	done     func(error)
	deadline time.Time
	finished bool // guarded by its lane's mu
}

// sendLane is a session's unconfirmed sends to one group, in order.
type sendLane struct {
	mu       sync.Mutex
	q        []*pendingSend
	retrying bool
}

func (s *remoteSession) lane(g uint64) *sendLane {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lanes == nil {
		s.lanes = make(map[uint64]*sendLane)
	}
	ln := s.lanes[g]
	if ln == nil {
		ln = &sendLane{}
		s.lanes[g] = ln
	}
	return ln
}

// transmit sends ps on the session's current link to group g.
func (s *remoteSession) transmit(g uint64, ln *sendLane, ps *pendingSend) {
	l, err := s.link(context.Background(), g)
	if err != nil {
		s.sent(g, ln, ps, err)
		return
	}
	addr := ps.m.Address
	s.a.async(l, l.leader, &rpcMsg{kind: kSend, group: g, sid: s.sid, msg: ps.m}, func(err error, str string, _ []byte) {
		if err == nil {
			s.a.full.note(addr, str == replyFull)
		}
		s.sent(g, ln, ps, err)
	})
}

// sent takes the answer to one try of ps: a link lost before the answer
// sends again (see Send), anything else is ps's outcome.
func (s *remoteSession) sent(g uint64, ln *sendLane, ps *pendingSend, err error) {
	retry := errors.Is(err, core.ErrUnavailable) && !isOutOfCluster(err) && time.Now().Before(ps.deadline) && !s.isClosed()
	ln.mu.Lock()
	if ps.finished {
		ln.mu.Unlock()
		return
	}
	if retry {
		start := !ln.retrying
		ln.retrying = true
		ln.mu.Unlock()
		if start {
			s.a.n.goWork(func(stop <-chan struct{}) { s.resend(stop, g, ln) })
		}
		return
	}
	ps.finished = true
	for i, x := range ln.q {
		if x == ps {
			ln.q = append(ln.q[:i:i], ln.q[i+1:]...)
			break
		}
	}
	ln.mu.Unlock()
	if errors.Is(err, core.ErrUnavailable) && !time.Now().Before(ps.deadline) {
		// The last try's error says what that try waited ("waited
		// 3s"); the client waited for all of them.
		start := ps.deadline.Add(-(s.a.n.cfg.RequestTimeout + s.a.n.cfg.LeaderWait))
		err = fmt.Errorf("%w; gave up after %v of tries", err, time.Since(start).Round(100*time.Millisecond))
	}
	ps.done(err)
}

// resend sends a lane's unconfirmed sends again, in order, once its
// group has a leader; sends made meanwhile follow them.
func (s *remoteSession) resend(stop <-chan struct{}, g uint64, ln *sendLane) {
	delay := 20 * time.Millisecond
	for {
		select {
		case <-stop:
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, 500*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), s.a.n.cfg.LeaderWait)
		_, err := s.link(ctx, g)
		cancel()
		ln.mu.Lock()
		q := slices.Clone(ln.q)
		if err == nil || len(q) == 0 {
			ln.retrying = false
		}
		ln.mu.Unlock()
		if err != nil && len(q) > 0 && !s.isClosed() {
			for _, ps := range q {
				if time.Now().After(ps.deadline) {
					s.sent(g, ln, ps, err)
				}
			}
			continue
		}
		s.order.Lock()
		for _, ps := range q {
			s.transmit(g, ln, ps)
		}
		s.order.Unlock()
		return
	}
}

// forwardID names a send uniquely in the cluster and over time: this
// node, its run, the session, a sequence number.
func (a *access) forwardID(sid uint64) string {
	return strconv.FormatUint(a.n.cfg.NodeID, 10) + "." + strconv.FormatUint(a.run, 36) + "." +
		strconv.FormatUint(sid, 36) + "." + strconv.FormatUint(a.nextID.Add(1), 36)
}

// Attach implements core.RemoteSession: one upstream part per group the
// consumer reads.
func (s *remoteSession) Attach(o core.ConsumerOptions, sink core.Sink) (core.Upstream, error) {
	feed, ok := sink.(*core.Feed)
	if !ok {
		return nil, errors.New("cluster: attach needs the mirror's feed")
	}
	o.Handler = nil
	groups := s.a.n.groupsFor(o)
	u := &upstream{s: s, o: o, feed: feed}
	for i, g := range groups {
		p := &part{u: u, idx: uint8(i), group: g}
		u.parts = append(u.parts, p)
	}
	if len(u.parts) == 1 {
		if err := u.parts[0].attachRetrying(); err != nil {
			u.Close()
			return nil, err
		}
		return u, nil
	}
	// A consumer of several groups (a wildcard subscription) is not
	// refused because one of them is between leaders: the parts that
	// cannot attach now do so in the background, as after a failover,
	// and get the credit asked for meanwhile once they are attached.
	for _, p := range u.parts {
		ctx, cancel := context.WithTimeout(context.Background(), s.a.n.cfg.LeaderWait)
		err := p.attach(ctx)
		cancel()
		if err == nil {
			continue
		}
		if !errors.Is(err, core.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			u.Close()
			return nil, err
		}
		p.mu.Lock()
		p.reattaching = true
		p.mu.Unlock()
		s.a.n.goWork(func(stop <-chan struct{}) { p.reattach(stop) })
	}
	return u, nil
}

// attachRetrying attaches a consumer's only part, trying again while
// its group is unavailable (a leader changing under the request), for
// up to a request timeout and a leader wait: a client subscribing
// during a failover waits for it rather than being refused.
func (p *part) attachRetrying() error {
	n := p.u.s.a.n
	deadline := time.Now().Add(n.cfg.RequestTimeout + n.cfg.LeaderWait)
	delay := 20 * time.Millisecond
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := p.attach(ctx)
		cancel()
		if err == nil || !errors.Is(err, core.ErrUnavailable) || isOutOfCluster(err) || p.u.s.isClosed() || time.Now().Add(delay).After(deadline) {
			return err
		}
		select {
		case <-n.draining:
			return err
		case <-time.After(delay):
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

// txGroup is the one group a transaction's sends and acks belong to.
func (s *remoteSession) txGroup(sends []*core.Message, acks []core.TxAck) (uint64, []ackRef, error) {
	var group uint64
	one := func(g uint64) error {
		if group != 0 && g != group {
			return core.ErrCrossGroupTx
		}
		group = g
		return nil
	}
	for _, m := range sends {
		if err := one(s.a.n.groupOf(m.Address)); err != nil {
			return 0, nil, err
		}
	}
	refs := make([]ackRef, 0, len(acks))
	for _, ak := range acks {
		u, ok := ak.Upstream.(*upstream)
		if !ok {
			return 0, nil, fmt.Errorf("%w: not a cluster delivery", core.ErrUnknownDelivery)
		}
		p, utag, ok := u.partOf(ak.Tag)
		if !ok {
			return 0, nil, fmt.Errorf("%w: the delivery's group changed leader; it will be redelivered", core.ErrUnknownDelivery)
		}
		if err := one(p.group); err != nil {
			return 0, nil, err
		}
		refs = append(refs, ackRef{p.cidNow(), utag})
	}
	return group, refs, nil
}

// Commit implements core.RemoteSession.
func (s *remoteSession) Commit(ctx context.Context, sends []*core.Message, acks []core.TxAck) error {
	g, refs, err := s.txGroup(sends, acks)
	if err != nil || g == 0 {
		return err
	}
	l, err := s.link(ctx, g)
	if err != nil {
		return err
	}
	_, _, err = s.a.request(ctx, l, l.leader, &rpcMsg{kind: kCommit, group: g, sid: s.sid, sends: sends, acks: refs})
	return err
}

// Unsubscribe implements core.RemoteSession: a durable subscription may
// have a part in every group (a wildcard one does).
func (s *remoteSession) Unsubscribe(name string) error {
	found := false
	var firstErr error
	for g := uint64(1); g <= uint64(s.a.n.cfg.Groups); g++ {
		l, err := s.link(context.Background(), g)
		if err == nil {
			_, _, err = s.a.request(context.Background(), l, l.leader, &rpcMsg{kind: kUnsubscribe, group: g, sid: s.sid, str: name})
		}
		switch {
		case err == nil:
			found = true
		case errors.Is(err, core.ErrQueueNotFound):
		case firstErr == nil:
			firstErr = err
		}
	}
	if firstErr != nil {
		return firstErr
	}
	if !found {
		return fmt.Errorf("%w: durable subscription %q", core.ErrQueueNotFound, name)
	}
	return nil
}

// CreateTemporaryQueue implements core.RemoteSession: the queue lives in
// a group chosen by the session, and its name says which.
func (s *remoteSession) CreateTemporaryQueue() (string, error) {
	g := 1 + s.sid%uint64(s.a.n.cfg.Groups)
	l, err := s.link(context.Background(), g)
	if err != nil {
		return "", err
	}
	name, _, err := s.a.request(context.Background(), l, l.leader, &rpcMsg{kind: kCreateTemp, group: g, sid: s.sid})
	return name, err
}

// Close implements core.RemoteSession.
func (s *remoteSession) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	a := s.a
	a.mu.Lock()
	var ls []*sessionLink
	for k, l := range a.links {
		if k.sid == s.sid {
			ls = append(ls, l)
			delete(a.links, k)
		}
	}
	a.mu.Unlock()
	for _, l := range ls {
		if !l.lost {
			a.to(l.leader, &rpcMsg{kind: kCloseSession, group: l.group, sid: s.sid})
		}
	}
}

// loseLinkLocked marks a session link lost (its leader changed, the
// session there ended, or the link to that node was reset): requests
// through it fail, its upstream parts re-attach. a.mu held.
func (a *access) loseLinkLocked(l *sessionLink, why string) {
	if l.lost {
		return
	}
	l.lost = true
	if a.links[linkKey{l.s.sid, l.group}] == l {
		delete(a.links, linkKey{l.s.sid, l.group})
	}
	var fail []*call
	for rid, c := range a.pending {
		if c.link == l {
			fail = append(fail, c)
			delete(a.pending, rid)
		}
	}
	parts := make([]*part, 0, len(l.parts))
	for p := range l.parts {
		parts = append(parts, p)
	}
	err := fmt.Errorf("%w: group %d (%s); the outcome of this operation is unknown", core.ErrUnavailable, l.group, why)
	go func() {
		for _, c := range fail {
			c.done(err, "", nil)
		}
		for _, p := range parts {
			p.lost(l)
		}
	}()
}

// sessionLost handles kSessionLost from a group's leader.
func (a *access) sessionLost(group, sid uint64, why string) {
	a.mu.Lock()
	if l := a.links[linkKey{sid, group}]; l != nil {
		a.loseLinkLocked(l, why)
	}
	a.mu.Unlock()
}

// peerGone loses every link through node id and fails the requests
// waiting for it.
func (a *access) peerGone(id uint64) {
	a.mu.Lock()
	for _, l := range a.links {
		if l.leader == id {
			a.loseLinkLocked(l, "link to its leader reset")
		}
	}
	var fail []*call
	for rid, c := range a.pending {
		if c.leader == id {
			fail = append(fail, c)
			delete(a.pending, rid)
		}
	}
	a.mu.Unlock()
	err := fmt.Errorf("%w: link to node %d reset; the outcome of this operation is unknown", core.ErrUnavailable, id)
	for _, c := range fail {
		go c.done(err, "", nil)
	}
}

// leaderChanged loses the links to a group's former leader.
func (a *access) leaderChanged(group, leader uint64) {
	a.mu.Lock()
	for k, l := range a.links {
		if k.group == group && l.leader != leader {
			a.loseLinkLocked(l, "leader changed")
		}
	}
	a.mu.Unlock()
}

// deliver hands a kDeliver to its part.
func (a *access) deliver(cid, tag uint64, m *core.Message, count uint32, redelivered bool, mark uint32) {
	a.mu.Lock()
	p := a.parts[cid]
	a.mu.Unlock()
	if p != nil {
		p.DeliverMarked(tag, m, count, redelivered, mark)
	}
}

func (a *access) consumerLost(cid uint64) {
	a.mu.Lock()
	p := a.parts[cid]
	var l *sessionLink
	if p != nil {
		l = p.link
	}
	a.mu.Unlock()
	if p != nil {
		p.lost(l)
	}
}

// upstream is a consumer's upstream in the cluster: a part per group it
// reads. Tags it gives the mirror are (part index, part epoch, upstream
// delivery id), so a settlement reaches the right part, and one from
// before a part was re-attached is recognised and dropped.
type upstream struct {
	s      *remoteSession
	o      core.ConsumerOptions
	feed   *core.Feed
	parts  []*part
	window atomic.Int64 // the most credit the consumer has asked for: each part's cap
	closed atomic.Bool
}

const (
	tagIDBits    = 40
	tagEpochBits = 16
	tagIDMask    = 1<<tagIDBits - 1
	tagEpochMask = 1<<tagEpochBits - 1
)

func makeTag(idx uint8, epoch uint64, id uint64) uint64 {
	return uint64(idx)<<(tagIDBits+tagEpochBits) | (epoch&tagEpochMask)<<tagIDBits | id&tagIDMask
}

// partOf returns the part a tag belongs to and its upstream delivery id,
// unless the part was re-attached since.
func (u *upstream) partOf(tag uint64) (*part, uint64, bool) {
	idx := int(tag >> (tagIDBits + tagEpochBits))
	if idx >= len(u.parts) {
		return nil, 0, false
	}
	p := u.parts[idx]
	p.mu.Lock()
	defer p.mu.Unlock()
	if (tag>>tagIDBits)&tagEpochMask != p.epoch&tagEpochMask || p.cid == 0 {
		return nil, 0, false
	}
	return p, tag & tagIDMask, true
}

func (u *upstream) Flow(n int) {
	if n <= 0 || u.closed.Load() {
		return
	}
	w := u.window.Add(int64(n))
	for _, p := range u.parts {
		p.flow(n, int(w))
	}
}

func (u *upstream) Drain() {
	u.window.Store(0)
	for _, p := range u.parts {
		p.drain()
	}
}

func (u *upstream) Settle(tag uint64, o core.Outcome) {
	if p, id, ok := u.partOf(tag); ok {
		p.settle(id, o)
	}
}

func (u *upstream) Close() {
	if u.closed.Swap(true) {
		return
	}
	for _, p := range u.parts {
		p.detach()
	}
}

// part is an upstream's consumer in one group.
type part struct {
	u     *upstream
	idx   uint8
	group uint64

	// leader is the node serving the upstream consumer (0 while not
	// attached), read without mu by Doubtful.
	leader atomic.Uint64

	mu    sync.Mutex
	cid   uint64 // the upstream consumer's id (0 while not attached)
	epoch uint64
	link  *sessionLink
	// outstanding is the credit granted to the upstream consumer and not
	// used yet; while the part is not attached, the credit to grant it
	// once it is.
	outstanding int
	attached    bool // outstanding has been granted upstream
	reattaching bool
}

func (p *part) cidNow() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cid
}

// attach opens the part's upstream consumer on its group's leader.
func (p *part) attach(ctx context.Context) error {
	s := p.u.s
	a := s.a
	l, err := s.link(ctx, p.group)
	if err != nil {
		return err
	}
	cid := a.nextID.Add(1)
	p.mu.Lock()
	p.cid, p.link, p.attached = cid, l, false
	p.leader.Store(l.leader)
	p.mu.Unlock()
	a.mu.Lock()
	a.parts[cid] = p
	l.parts[p] = struct{}{}
	a.mu.Unlock()
	_, _, err = a.request(ctx, l, l.leader, &rpcMsg{kind: kAttach, group: p.group, sid: s.sid, cid: cid, opts: p.u.o})
	if err != nil {
		a.mu.Lock()
		delete(a.parts, cid)
		delete(l.parts, p)
		a.mu.Unlock()
		p.mu.Lock()
		if p.cid == cid {
			p.cid, p.link = 0, nil
		}
		p.mu.Unlock()
		return err
	}
	// Grant what the consumer asked for while the part was not attached;
	// from now on flow grants as it goes.
	p.mu.Lock()
	grant := 0
	if p.cid == cid {
		p.attached = true
		grant = p.outstanding
	}
	p.mu.Unlock()
	if grant > 0 {
		a.to(l.leader, &rpcMsg{kind: kFlow, group: p.group, cid: cid, n: uint64(grant)})
	}
	return nil
}

// flow asks the part's consumer for n more, within the window (or keeps
// it for when the part is attached).
func (p *part) flow(n, window int) {
	p.mu.Lock()
	grant := min(n, window-p.outstanding)
	if grant <= 0 {
		p.mu.Unlock()
		return
	}
	p.outstanding += grant
	cid, l, attached := p.cid, p.link, p.attached
	p.mu.Unlock()
	if attached {
		p.u.s.a.to(l.leader, &rpcMsg{kind: kFlow, group: p.group, cid: cid, n: uint64(grant)})
	}
}

func (p *part) drain() {
	p.mu.Lock()
	p.outstanding = 0
	cid, l, attached := p.cid, p.link, p.attached
	p.mu.Unlock()
	if attached {
		p.u.s.a.to(l.leader, &rpcMsg{kind: kDrain, group: p.group, cid: cid})
	}
}

func (p *part) settle(id uint64, o core.Outcome) {
	p.mu.Lock()
	cid, l := p.cid, p.link
	p.mu.Unlock()
	if cid != 0 {
		p.u.s.a.to(l.leader, &rpcMsg{kind: kSettle, group: p.group, cid: cid, tag: id, n: uint64(o)})
	}
}

func (p *part) detach() {
	a := p.u.s.a
	p.mu.Lock()
	cid, l := p.cid, p.link
	p.cid, p.link = 0, nil
	p.mu.Unlock()
	if cid == 0 {
		return
	}
	a.mu.Lock()
	delete(a.parts, cid)
	delete(l.parts, p)
	a.mu.Unlock()
	if !l.lost {
		a.to(l.leader, &rpcMsg{kind: kDetach, group: p.group, cid: cid})
	}
}

// Deliver implements core.Sink for the part's upstream consumer.
func (p *part) Deliver(id uint64, m *core.Message, count uint32, redelivered bool) {
	p.DeliverMarked(id, m, count, redelivered, 0)
}

// DeliverMarked implements core.MarkSink: a delivery marked upstream
// (an MQTT packet id kept with the message in its group) reaches the
// mirror with its mark.
func (p *part) DeliverMarked(id uint64, m *core.Message, count uint32, redelivered bool, mark uint32) {
	p.mu.Lock()
	if p.outstanding > 0 {
		p.outstanding--
	}
	tag := makeTag(p.idx, p.epoch, id)
	p.mu.Unlock()
	p.u.feed.DeliverMarked(tag, m, count, redelivered, mark)
}

// lost re-attaches a part whose upstream consumer is gone (through link
// l; nil when unknown).
func (p *part) lost(l *sessionLink) {
	p.mu.Lock()
	if (l != nil && p.link != l) || p.reattaching || p.u.closed.Load() {
		p.mu.Unlock()
		return
	}
	old := p.epoch
	p.epoch++
	cid := p.cid
	p.cid, p.link, p.outstanding, p.attached = 0, nil, 0, false
	p.leader.Store(0)
	p.reattaching = true
	p.mu.Unlock()
	a := p.u.s.a
	a.mu.Lock()
	delete(a.parts, cid)
	a.mu.Unlock()
	idx := p.idx
	credit := p.u.feed.Lost(func(tag uint64) bool {
		return uint8(tag>>(tagIDBits+tagEpochBits)) == idx && (tag>>tagIDBits)&tagEpochMask == old&tagEpochMask
	})
	// The new upstream consumer is asked for what the consumer wants now
	// (plus what it asks for meanwhile): granted once attached.
	p.flow(credit, max(int(p.u.window.Load()), credit))
	a.n.goWork(func(stop <-chan struct{}) { p.reattach(stop) })
}

// reattach attaches the part again on its group's (new) leader, backing
// off while the group has none, until the upstream or the node closes.
func (p *part) reattach(stop <-chan struct{}) {
	delay := 50 * time.Millisecond
	for {
		if p.u.closed.Load() || p.u.s.isClosed() {
			p.mu.Lock()
			p.reattaching = false
			p.mu.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.u.s.a.n.cfg.RequestTimeout)
		err := p.attach(ctx)
		cancel()
		if err == nil {
			p.mu.Lock()
			p.reattaching = false
			p.mu.Unlock()
			if p.u.closed.Load() {
				p.detach()
			}
			return
		}
		if !errors.Is(err, core.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			p.u.s.a.n.log.Warn().Err(err).Uint64("group", p.group).Msg("a consumer could not be re-attached after its group's leader changed")
		}
		select {
		case <-stop:
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
}

// PermissionsChanged implements core.Cluster: this node's group brokers
// drop their authorization caches (every node watches its own users
// file and tells its own).
func (a *access) PermissionsChanged() {
	for _, g := range a.n.groups {
		if b, _ := g.activeBroker(); b != nil {
			b.PermissionsChanged()
		}
	}
}

// Retain implements core.Cluster.
func (a *access) Retain(m *core.Message) error {
	g := a.n.groupOf(m.Address)
	leader, err := a.n.waitLeader(context.Background(), g)
	if err != nil {
		return err
	}
	_, _, err = a.request(context.Background(), nil, leader, &rpcMsg{kind: kRetain, group: g, msg: m})
	return err
}

// ask asks group's leader a catalog question. Catalog questions only
// read, so one that fails while the group changes leader (the link to
// the old one reset: "the outcome is unknown") is asked again, for up
// to LeaderWait: a client connecting during a failover then waits for
// the answer instead of being told that what it had is unknown.
func (a *access) ask(g uint64, what uint8, arg string) ([]byte, error) {
	deadline := time.Now().Add(a.n.cfg.LeaderWait)
	for {
		leader, err := a.n.waitLeader(context.Background(), g)
		if err != nil {
			return nil, err
		}
		_, p, err := a.request(context.Background(), nil, leader, &rpcMsg{kind: kCatalog, group: g, n: uint64(what), str: arg})
		if err == nil || !errors.Is(err, core.ErrUnavailable) || time.Now().After(deadline) {
			return p, err
		}
		select {
		case <-time.After(askRetryPause):
		case <-a.n.draining:
			return nil, err
		}
	}
}

// askEvery asks every group's leader the same catalog question at
// once, and returns the answers and errors by group (index g-1): a
// question to every group costs the slowest group's wait, not the sum
// of them (a node starting while groups had no leader waited up to
// LeaderWait for each in turn before its listeners opened).
func (a *access) askEvery(what uint8, arg string) ([][]byte, []error) {
	k := a.n.cfg.Groups
	ps, errs := make([][]byte, k), make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ps[i], errs[i] = a.ask(uint64(i+1), what, arg)
		}()
	}
	wg.Wait()
	return ps, errs
}

// askRetryPause spaces the retries of a catalog question.
const askRetryPause = 50 * time.Millisecond

// AddressRoutingTypes implements core.Catalog.
func (a *access) AddressRoutingTypes(name string) (anycast, multicast, exists bool) {
	p, err := a.ask(a.n.groupOf(name), catRoutingTypes, name)
	if err != nil || len(p) != 3 {
		return false, false, false
	}
	return p[0] == 1, p[1] == 1, p[2] == 1
}

// DurableSubscriptions implements core.Catalog, from every group.
func (a *access) DurableSubscriptions(clientID string) ([]core.SubscriptionInfo, error) {
	seen := map[string]bool{}
	var out []core.SubscriptionInfo
	ps, errs := a.askEvery(catDurableSubs, clientID)
	for g := uint64(1); g <= uint64(a.n.cfg.Groups); g++ {
		p, err := ps[g-1], errs[g-1]
		if err != nil {
			return nil, fmt.Errorf("durable subscriptions of %q in group %d: %w", clientID, g, err)
		}
		d := reader{b: p}
		n := d.uvarint()
		for i := uint64(0); i < n && d.err == nil; i++ {
			x := core.SubscriptionInfo{Name: d.str(), Address: d.str(), Selector: d.str()}
			if d.err == nil && !seen[x.Name] {
				seen[x.Name] = true
				out = append(out, x)
			}
		}
	}
	return out, nil
}

// DurableClientIDs implements core.Catalog.
func (a *access) DurableClientIDs() []string {
	seen := map[string]bool{}
	var out []string
	ps, errs := a.askEvery(catDurableClientIDs, "")
	for g := uint64(1); g <= uint64(a.n.cfg.Groups); g++ {
		p, err := ps[g-1], errs[g-1]
		if err != nil {
			continue
		}
		d := reader{b: p}
		n := d.uvarint()
		for i := uint64(0); i < n && d.err == nil; i++ {
			if id := d.str(); d.err == nil && !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Retained implements core.Catalog.
func (a *access) Retained() []*core.Message {
	var out []*core.Message
	ps, errs := a.askEvery(catRetained, "")
	for g := uint64(1); g <= uint64(a.n.cfg.Groups); g++ {
		p, err := ps[g-1], errs[g-1]
		if err != nil {
			continue
		}
		d := reader{b: p}
		n := d.uvarint()
		for i := uint64(0); i < n && d.err == nil; i++ {
			if m, err := core.DecodeMessage(d.bytes()); err == nil {
				out = append(out, m)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out
}

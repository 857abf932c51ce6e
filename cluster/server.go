package cluster

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/junctionmq/junction/core"
)

// server is the group side of forwarding: on the node that leads a
// group, the sessions and upstream consumers that access brokers (this
// node's own, or other nodes') have opened on the group broker. Its
// handlers are called with the origin node's id; replies go back through
// reply (local: direct calls; remote: frames).
type server struct {
	n         *Node
	mu        sync.Mutex
	sessions  map[sessKey]*served
	consumers map[consKey]*servedConsumer
	parked    map[parkKey]*parking
}

// A request for a group this node has just been elected to lead waits
// until its group broker is active (or the node gives the leadership
// up): the other nodes learn of the new leader as soon as this node
// does, and their first requests would otherwise fail for nothing.
// Requests of one origin for one group keep their order.
type parkKey struct{ origin, group uint64 }

type parking struct {
	msgs     []*rpcMsg
	since    time.Time
	draining bool
}

// maxParked bounds the requests one origin may have waiting for one
// group; past it the link is reset.
const maxParked = 10000

type sessKey struct{ origin, sid, group uint64 }
type consKey struct{ origin, cid uint64 }

type served struct {
	key  sessKey
	gs   *core.GroupSession
	cids map[uint64]struct{}
	err  error // the open failed: every request fails with it
}

type servedConsumer struct {
	key  consKey
	sess *served
	up   core.Upstream
}

func newServer(n *Node) *server {
	return &server{n: n, sessions: make(map[sessKey]*served), consumers: make(map[consKey]*servedConsumer), parked: make(map[parkKey]*parking)}
}

// open opens a session for origin's session sid on group's broker.
func (sv *server) open(origin, group, sid uint64, opts core.SessionOptions) {
	k := sessKey{origin, sid, group}
	s := &served{key: k, cids: make(map[uint64]struct{})}
	g := sv.n.group(group)
	if g == nil {
		s.err = fmt.Errorf("%w: no group %d", core.ErrUnavailable, group)
	} else if b, _ := g.activeBroker(); b == nil {
		s.err = ErrNotLeader
	} else {
		s.gs, s.err = b.OpenGroupSession(opts)
	}
	sv.mu.Lock()
	old := sv.sessions[k]
	sv.sessions[k] = s
	sv.mu.Unlock()
	if old != nil && old.gs != nil {
		old.gs.Close()
	}
	if s.err != nil {
		sv.n.reply(origin, &rpcMsg{kind: kSessionLost, group: group, sid: sid, str: s.err.Error()})
	}
}

func (sv *server) session(origin, group, sid uint64) (*served, error) {
	sv.mu.Lock()
	s := sv.sessions[sessKey{origin, sid, group}]
	sv.mu.Unlock()
	switch {
	case s == nil:
		return nil, fmt.Errorf("%w: session not open on this node", core.ErrUnavailable)
	case s.err != nil:
		return nil, s.err
	}
	return s, nil
}

func (sv *server) closeSession(origin, group, sid uint64) {
	k := sessKey{origin, sid, group}
	sv.mu.Lock()
	s := sv.sessions[k]
	delete(sv.sessions, k)
	if s != nil {
		for cid := range s.cids {
			delete(sv.consumers, consKey{origin, cid})
		}
	}
	sv.mu.Unlock()
	if s != nil && s.gs != nil {
		s.gs.Close()
	}
}

// send routes m on the group broker; done, if not nil, gets the outcome
// and whether m's address is now over its limit (replyFull).
func (sv *server) send(origin, group, sid uint64, m *core.Message, done func(err error, full bool)) {
	s, err := sv.session(origin, group, sid)
	if err != nil {
		if done != nil {
			done(err, false)
		}
		return
	}
	if done == nil {
		s.gs.Send(m, nil)
		return
	}
	addr := m.Address
	s.gs.Send(m, func(err error) { done(err, err == nil && s.gs.Blocked(addr)) })
}

// replyFull is the answer's text to a send stored over its address's
// limit: the sender's node holds its producers for a while (access.full).
const replyFull = "full"

// sendReply returns the text of a send's answer.
func sendReply(full bool) string {
	if full {
		return replyFull
	}
	return ""
}

func (sv *server) attach(origin, group, sid, cid uint64, o core.ConsumerOptions, sink core.Sink) error {
	s, err := sv.session(origin, group, sid)
	if err != nil {
		return err
	}
	up, err := s.gs.Attach(o, sink)
	if err != nil {
		return err
	}
	sv.mu.Lock()
	if sv.sessions[s.key] != s {
		sv.mu.Unlock()
		up.Close()
		return fmt.Errorf("%w: session closed", core.ErrUnavailable)
	}
	s.cids[cid] = struct{}{}
	sv.consumers[consKey{origin, cid}] = &servedConsumer{key: consKey{origin, cid}, sess: s, up: up}
	sv.mu.Unlock()
	return nil
}

func (sv *server) consumer(origin, cid uint64) core.Upstream {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if c := sv.consumers[consKey{origin, cid}]; c != nil {
		return c.up
	}
	return nil
}

func (sv *server) flow(origin, cid uint64, n int) {
	if up := sv.consumer(origin, cid); up != nil && n > 0 {
		up.Flow(n)
	}
}

func (sv *server) drain(origin, cid uint64) {
	if up := sv.consumer(origin, cid); up != nil {
		up.Drain()
	}
}

func (sv *server) settle(origin, cid, tag uint64, o core.Outcome) {
	if up := sv.consumer(origin, cid); up != nil {
		up.Settle(tag, o)
	}
}

func (sv *server) detach(origin, cid uint64) {
	k := consKey{origin, cid}
	sv.mu.Lock()
	c := sv.consumers[k]
	delete(sv.consumers, k)
	if c != nil {
		delete(c.sess.cids, cid)
	}
	sv.mu.Unlock()
	if c != nil {
		c.up.Close()
	}
}

func (sv *server) commit(ctx context.Context, origin, group, sid uint64, sends []*core.Message, acks []ackRef, records []core.ClientRecord) error {
	s, err := sv.session(origin, group, sid)
	if err != nil {
		return err
	}
	txAcks := make([]core.TxAck, 0, len(acks))
	for _, a := range acks {
		up := sv.consumer(origin, a.cid)
		if up == nil {
			return fmt.Errorf("%w: consumer of an acked delivery is gone", core.ErrUnknownDelivery)
		}
		txAcks = append(txAcks, core.TxAck{Upstream: up, Tag: a.tag})
	}
	if len(records) > 0 {
		return s.gs.CommitRecords(ctx, sends, txAcks, records)
	}
	return s.gs.Commit(ctx, sends, txAcks)
}

func (sv *server) unsubscribe(origin, group, sid uint64, name string) error {
	s, err := sv.session(origin, group, sid)
	if err != nil {
		return err
	}
	return s.gs.Unsubscribe(name)
}

func (sv *server) createTemp(origin, group, sid uint64) (string, error) {
	s, err := sv.session(origin, group, sid)
	if err != nil {
		return "", err
	}
	return s.gs.CreateTemporaryQueue()
}

func (sv *server) broker(group uint64) (*core.Broker, error) {
	g := sv.n.group(group)
	if g == nil {
		return nil, fmt.Errorf("%w: no group %d", core.ErrUnavailable, group)
	}
	b, _ := g.activeBroker()
	if b == nil {
		return nil, ErrNotLeader
	}
	return b, nil
}

func (sv *server) retain(group uint64, m *core.Message) error {
	b, err := sv.broker(group)
	if err != nil {
		return err
	}
	return b.Retain(m)
}

// catalog answers a question about the group (kCatalog).
func (sv *server) catalog(group uint64, what uint8, arg string) ([]byte, error) {
	b, err := sv.broker(group)
	if err != nil {
		return nil, err
	}
	var out []byte
	switch what {
	case catRoutingTypes:
		any, multi, exists := b.AddressRoutingTypes(arg)
		for _, v := range []bool{any, multi, exists} {
			if v {
				out = append(out, 1)
			} else {
				out = append(out, 0)
			}
		}
	case catDurableSubs:
		subs := b.DurableSubscriptionsOf(arg)
		out = binary.AppendUvarint(out, uint64(len(subs)))
		for _, x := range subs {
			out = appendStr(out, x.Name)
			out = appendStr(out, x.Address)
			out = appendStr(out, x.Selector)
		}
	case catDurableClientIDs:
		ids := b.DurableClientIDs()
		out = binary.AppendUvarint(out, uint64(len(ids)))
		for _, id := range ids {
			out = appendStr(out, id)
		}
	case catClientRecords:
		recs := b.ClientRecordsOf(arg)
		out = binary.AppendUvarint(out, uint64(len(recs)))
		for _, r := range recs {
			out = appendStr(out, r.Key)
			out = appendBytes(out, r.Value)
		}
	case catRecordHolders:
		ids := b.ClientRecordHolders()
		out = binary.AppendUvarint(out, uint64(len(ids)))
		for _, id := range ids {
			out = appendStr(out, id)
		}
	case catRetained:
		ms := b.Retained()
		out = binary.AppendUvarint(out, uint64(len(ms)))
		for _, m := range ms {
			out = appendBytes(out, core.EncodeMessage(m))
		}
	default:
		return nil, fmt.Errorf("%w: catalog question %d", errBadFrame, what)
	}
	return out, nil
}

// groupClosed ends every session served by a group broker that closes,
// telling their origins.
func (sv *server) groupClosed(group uint64, why string) {
	sv.mu.Lock()
	var gone []*served
	for k, s := range sv.sessions {
		if k.group == group {
			gone = append(gone, s)
			delete(sv.sessions, k)
			for cid := range s.cids {
				delete(sv.consumers, consKey{k.origin, cid})
			}
		}
	}
	sv.mu.Unlock()
	for _, s := range gone {
		if s.gs != nil {
			s.gs.Close()
		}
		sv.n.reply(s.key.origin, &rpcMsg{kind: kSessionLost, group: group, sid: s.key.sid, str: why})
	}
}

// originGone forgets every session of an origin node whose link was
// reset: their consumers' unsettled messages go back to their queues.
func (sv *server) originGone(origin uint64) {
	sv.mu.Lock()
	var gone []*served
	for k, s := range sv.sessions {
		if k.origin == origin {
			gone = append(gone, s)
			delete(sv.sessions, k)
		}
	}
	for k := range sv.consumers {
		if k.origin == origin {
			delete(sv.consumers, k)
		}
	}
	for k := range sv.parked {
		if k.origin == origin {
			delete(sv.parked, k)
		}
	}
	sv.mu.Unlock()
	for _, s := range gone {
		if s.gs != nil {
			s.gs.Close()
		}
	}
}

// remoteSink sends an upstream consumer's deliveries to its origin node.
type remoteSink struct {
	n      *Node
	origin uint64
	group  uint64
	cid    uint64
}

func (s remoteSink) Deliver(tag uint64, m *core.Message, count uint32, redelivered bool) {
	s.DeliverMarked(tag, m, count, redelivered, 0)
}

// DeliverMarked implements core.MarkSink.
func (s remoteSink) DeliverMarked(tag uint64, m *core.Message, count uint32, redelivered bool, mark uint32) {
	// A leader that may have been replaced (lease.go) says that the
	// message may have been delivered by its successor too.
	redelivered = redelivered || !s.n.leaseHeld() || !s.n.group(s.group).sure()
	s.n.links.send(s.origin, &rpcMsg{kind: kDeliver, group: s.group, cid: s.cid, tag: tag, count: count, redelivered: redelivered, mark: mark, msg: m})
}

// handleRemote takes a request from another node, on the transport's
// reader goroutine for that node: requests of one node are handled in
// order (those that wait for a commit run on their own), except that
// requests for a group this node is activating wait for it.
func (sv *server) handleRemote(from uint64, m *rpcMsg) {
	if m.kind == kMember {
		go sv.n.handleMember(from, m)
		return
	}
	k := parkKey{from, m.group}
	sv.mu.Lock()
	p := sv.parked[k]
	if p == nil && sv.activating(m.group) {
		p = &parking{since: time.Now()}
		sv.parked[k] = p
	}
	if p != nil {
		if len(p.msgs) >= maxParked {
			delete(sv.parked, k)
			sv.mu.Unlock()
			sv.n.log.Warn().Uint64("peer", from).Uint64("group", m.group).Msg("too many requests waiting for a group's activation: resetting the link")
			sv.n.links.send(from, &rpcMsg{kind: kLinkReset})
			sv.n.resetPeer(from)
			return
		}
		p.msgs = append(p.msgs, m)
		sv.mu.Unlock()
		return
	}
	sv.mu.Unlock()
	sv.dispatch(from, m)
}

// activating reports whether this node leads group but its group broker
// is not active yet.
func (sv *server) activating(group uint64) bool {
	g := sv.n.group(group)
	return g != nil && g.lead.Load() == sv.n.cfg.NodeID && !g.isActive.Load()
}

// activated releases the requests parked for a group whose state
// changed (activated, or no longer led here), and those parked too long.
func (sv *server) activated(g *group) {
	sv.mu.Lock()
	var keys []parkKey
	for k, p := range sv.parked {
		if !p.draining && ((g != nil && k.group == g.id && !sv.activating(k.group)) || time.Since(p.since) > sv.n.cfg.LeaderWait) {
			p.draining = true
			keys = append(keys, k)
		}
	}
	sv.mu.Unlock()
	for _, k := range keys {
		sv.n.goWork(func(<-chan struct{}) { sv.drainParked(k) })
	}
}

// drainParked handles a key's parked requests in order, then lets new
// ones through.
func (sv *server) drainParked(k parkKey) {
	for {
		sv.mu.Lock()
		p := sv.parked[k]
		if p == nil {
			sv.mu.Unlock()
			return
		}
		if len(p.msgs) == 0 {
			delete(sv.parked, k)
			sv.mu.Unlock()
			return
		}
		msgs := p.msgs
		p.msgs = nil
		sv.mu.Unlock()
		for _, m := range msgs {
			sv.dispatch(k.origin, m)
		}
	}
}

// dispatch handles one request from another node.
func (sv *server) dispatch(from uint64, m *rpcMsg) {
	replyDone := func(rid uint64) func(error) {
		if rid == 0 {
			return nil
		}
		return func(err error) { sv.n.replyResult(from, m.group, rid, err, "", nil) }
	}
	switch m.kind {
	case kOpen:
		sv.open(from, m.group, m.sid, m.open)
	case kCloseSession:
		sv.closeSession(from, m.group, m.sid)
	case kSend:
		var done func(error, bool)
		if rid := m.rid; rid != 0 {
			done = func(err error, full bool) { sv.n.replyResult(from, m.group, rid, err, sendReply(full), nil) }
		}
		sv.send(from, m.group, m.sid, m.msg, done)
	case kAttach:
		err := sv.attach(from, m.group, m.sid, m.cid, m.opts, remoteSink{n: sv.n, origin: from, group: m.group, cid: m.cid})
		sv.n.replyResult(from, m.group, m.rid, err, "", nil)
	case kFlow:
		sv.flow(from, m.cid, int(min(m.n, 1<<30)))
	case kDrain:
		sv.drain(from, m.cid)
	case kSettle:
		sv.settle(from, m.cid, m.tag, core.Outcome(m.n))
	case kDetach:
		sv.detach(from, m.cid)
	case kCommit:
		go func() {
			err := sv.commit(context.Background(), from, m.group, m.sid, m.sends, m.acks, m.records)
			sv.n.replyResult(from, m.group, m.rid, err, "", nil)
		}()
	case kRecord:
		sv.record(from, m.group, m.sid, m.n, m.str, m.payload, replyDone(m.rid))
	case kMark:
		sv.mark(from, m.cid, m.tag, uint32(m.n), replyDone(m.rid))
	case kUnsubscribe:
		err := sv.unsubscribe(from, m.group, m.sid, m.str)
		sv.n.replyResult(from, m.group, m.rid, err, "", nil)
	case kCreateTemp:
		name, err := sv.createTemp(from, m.group, m.sid)
		sv.n.replyResult(from, m.group, m.rid, err, name, nil)
	case kRetain:
		go func() {
			err := sv.retain(m.group, m.msg)
			sv.n.replyResult(from, m.group, m.rid, err, "", nil)
		}()
	case kCatalog:
		p, err := sv.catalog(m.group, uint8(m.n), m.str)
		sv.n.replyResult(from, m.group, m.rid, err, "", p)
	case kAdmin:
		go func() {
			p, err := sv.serveAdmin(m.group, uint8(m.n), m.str)
			sv.n.replyResult(from, m.group, m.rid, err, "", p)
		}()
	}
}

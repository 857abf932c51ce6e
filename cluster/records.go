package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/junctionmq/junction/core"
)

// Client records and marks (core's optional cluster ports). A client
// id's records live in the group its id hashes to, written by that
// group's broker like any of its durable state, so a client that
// reconnects to another node, or after a failover, finds its session
// (an MQTT client's subscriptions, its QoS 2 packet ids) as it left it.
// A mark (Consumer.Mark: an MQTT delivery's packet id) is kept with the
// upstream delivery on the group broker, which journals it with the
// message and hands it back with every redelivery.

var (
	_ core.RecordsCatalog  = (*access)(nil)
	_ core.RecordsSession  = (*remoteSession)(nil)
	_ core.MarkingUpstream = (*upstream)(nil)
	_ core.MarkSink        = (*part)(nil)
	_ core.MarkSink        = remoteSink{}
)

// recordsGroup is the group that holds clientID's records.
func (n *Node) recordsGroup(clientID string) uint64 { return n.groupOf("$records/" + clientID) }

// ClientRecords implements core.RecordsCatalog.
func (a *access) ClientRecords(clientID string) ([]core.ClientRecord, error) {
	g := a.n.recordsGroup(clientID)
	p, err := a.ask(g, catClientRecords, clientID)
	if err != nil {
		return nil, fmt.Errorf("records of %q in group %d: %w", clientID, g, err)
	}
	d := reader{b: p}
	n := d.uvarint()
	var out []core.ClientRecord
	for i := uint64(0); i < n && d.err == nil; i++ {
		r := core.ClientRecord{Key: d.str(), Value: d.bytes()}
		if d.err == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// ClientRecordHolders implements core.RecordsCatalog, from every group.
func (a *access) ClientRecordHolders() []string {
	seen := map[string]bool{}
	var out []string
	ps, errs := a.askEvery(catRecordHolders, "")
	for g := uint64(1); g <= uint64(a.n.cfg.Groups); g++ {
		p, err := ps[g-1], errs[g-1]
		if err != nil {
			a.n.log.Warn().Err(err).Uint64("group", g).Msg("client record holders of a group unknown")
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

// recordOp is one client record write of a session, waiting its turn.
type recordOp struct {
	op    uint64 // recSet, recClear
	key   string // the key, or the prefix to clear
	value []byte
	done  func(error)
}

// recordLane keeps a session's record writes in order: one goroutine at
// a time writes them, each tried again while the group is between
// leaders (a write is idempotent: the same key set to the same value,
// or the same prefix cleared), so an earlier write never lands after a
// later one.
type recordLane struct {
	mu      sync.Mutex
	q       []recordOp
	running bool
}

// SetClientRecord implements core.RecordsSession.
func (s *remoteSession) SetClientRecord(key string, value []byte, done func(error)) {
	s.queueRecord(recordOp{op: recSet, key: key, value: value, done: done})
}

// ClearClientRecords implements core.RecordsSession.
func (s *remoteSession) ClearClientRecords(prefix string, done func(error)) {
	s.queueRecord(recordOp{op: recClear, key: prefix, done: done})
}

func (s *remoteSession) queueRecord(op recordOp) {
	ln := &s.records
	ln.mu.Lock()
	ln.q = append(ln.q, op)
	start := !ln.running
	ln.running = true
	ln.mu.Unlock()
	if start {
		s.a.n.goWork(s.writeRecords)
	}
}

// writeRecords writes the session's queued record operations in order
// until none is left.
func (s *remoteSession) writeRecords(stop <-chan struct{}) {
	ln := &s.records
	for {
		ln.mu.Lock()
		if len(ln.q) == 0 {
			ln.running = false
			ln.mu.Unlock()
			return
		}
		op := ln.q[0]
		ln.q = ln.q[1:]
		ln.mu.Unlock()
		op.done(s.writeRecord(stop, op))
	}
}

func (s *remoteSession) writeRecord(stop <-chan struct{}, op recordOp) error {
	n := s.a.n
	g := n.recordsGroup(s.opts.ClientID)
	deadline := time.Now().Add(n.cfg.RequestTimeout + n.cfg.LeaderWait)
	delay := 20 * time.Millisecond
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		l, err := s.link(ctx, g)
		if err == nil {
			_, _, err = s.a.request(ctx, l, l.leader, &rpcMsg{kind: kRecord, group: g, sid: s.sid, n: op.op, str: op.key, payload: op.value})
		}
		cancel()
		if err == nil || !errors.Is(err, core.ErrUnavailable) || s.isClosed() || time.Now().Add(delay).After(deadline) {
			return err
		}
		select {
		case <-stop:
			return err
		case <-n.draining:
			return err
		case <-time.After(delay):
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

// CommitRecords implements core.RecordsSession: the transaction's sends
// and acks must be in the group of the session's records.
func (s *remoteSession) CommitRecords(ctx context.Context, sends []*core.Message, acks []core.TxAck, records []core.ClientRecord) error {
	g, refs, err := s.txGroup(sends, acks)
	if err != nil {
		return err
	}
	rg := s.a.n.recordsGroup(s.opts.ClientID)
	if g != 0 && g != rg {
		return core.ErrCrossGroupTx
	}
	l, err := s.link(ctx, rg)
	if err != nil {
		return err
	}
	_, _, err = s.a.request(ctx, l, l.leader, &rpcMsg{kind: kCommit, group: rg, sid: s.sid, sends: sends, acks: refs, records: records})
	return err
}

// Mark implements core.MarkingUpstream: the mark goes to the upstream
// delivery on the group broker. A delivery from before its part was
// attached again needs none: the new upstream delivers the message
// again, with the mark it had if that was stored.
func (u *upstream) Mark(tag uint64, mark uint32, done func(error)) {
	p, id, ok := u.partOf(tag)
	if !ok {
		done(nil)
		return
	}
	p.mu.Lock()
	cid, l := p.cid, p.link
	p.mu.Unlock()
	if cid == 0 || l == nil {
		done(nil)
		return
	}
	u.s.a.async(l, l.leader, &rpcMsg{kind: kMark, group: p.group, cid: cid, tag: id, n: uint64(mark)}, func(err error, _ string, _ []byte) {
		if errors.Is(err, core.ErrUnavailable) {
			// The group changed leader: the message comes again from
			// the new one (with its mark, if this one was stored).
			err = nil
		}
		done(err)
	})
}

// record applies a session's client record write on its group broker.
func (sv *server) record(origin, group, sid, op uint64, key string, value []byte, done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	s, err := sv.session(origin, group, sid)
	if err != nil {
		done(err)
		return
	}
	switch op {
	case recSet:
		s.gs.SetClientRecord(key, value, done)
	case recClear:
		s.gs.ClearClientRecords(key, done)
	default:
		done(fmt.Errorf("%w: record operation %d", errBadFrame, op))
	}
}

// mark marks an upstream delivery of a served consumer.
func (sv *server) mark(origin, cid, tag uint64, mark uint32, done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	up := sv.consumer(origin, cid)
	if up == nil {
		// Gone with what it delivered, which comes again (with the
		// mark it had, if that was stored) to the consumer's next
		// upstream.
		done(nil)
		return
	}
	mu, ok := up.(core.MarkingUpstream)
	if !ok {
		done(nil)
		return
	}
	mu.Mark(tag, mark, done)
}

package cluster

import (
	"slices"
	"sync"

	"github.com/junctionmq/junction/core"
)

// groupJournal is a group broker's journal: core's MessageJournal (the
// messages namespace) or Journal (the bindings namespace) over the
// group's replicated log. Every write becomes an operation of a Raft
// entry; its done is called once the entry is committed (on a majority
// of the group's nodes) and applied here, which is after it is durable
// on this node's disk too (the loop saves a Ready's entries before it
// applies its committed entries). sync is ignored: every write is
// replicated and synced before it completes, which is what core asks for
// confirmations and more than it needs for acks.
//
// A write the group can no longer commit (its node lost the leadership)
// completes with core.ErrUnavailable, and the group broker is closed:
// memory and the replicated log must not disagree for long.
type groupJournal struct {
	g  *group
	ns uint8
}

var (
	_ core.MessageJournal = groupJournal{}
	_ core.Journal        = groupJournal{}
)

func (j groupJournal) Append(id uint64, ut uint16, p []byte, _ bool, done func(error)) {
	j.g.submit([]op{{kind: opAppend, ns: j.ns, id: id, utype: ut, payload: slices.Clone(p)}}, done)
}

func (j groupJournal) Update(id uint64, ut uint16, p []byte, _ bool, done func(error)) {
	j.g.submit([]op{{kind: opUpdate, ns: j.ns, id: id, utype: ut, payload: slices.Clone(p)}}, done)
}

func (j groupJournal) Delete(id uint64, _ bool, done func(error)) {
	j.g.submit([]op{{kind: opDelete, ns: j.ns, id: id}}, done)
}

// Replay replays the group's applied state: what the group broker's
// journals would hold after a restart.
func (j groupJournal) Replay(add, update func(id uint64, ut uint16, p []byte) error) error {
	return j.g.state.replay(j.ns, add, update)
}

// MaxID is the largest id the group has used, or the group's base: ids
// of different groups never meet, so message ids are unique across the
// cluster.
func (j groupJournal) MaxID() uint64 {
	return max(j.g.idBase(), j.g.state.maxIDOf(j.ns))
}

func (j groupJournal) AppendTx(tx, id uint64, ut uint16, p []byte) {
	j.g.txAdd(tx, op{kind: opAppend, ns: j.ns, id: id, utype: ut, payload: slices.Clone(p)})
}

func (j groupJournal) UpdateTx(tx, id uint64, ut uint16, p []byte) {
	j.g.txAdd(tx, op{kind: opUpdate, ns: j.ns, id: id, utype: ut, payload: slices.Clone(p)})
}

func (j groupJournal) DeleteTx(tx, id uint64) {
	j.g.txAdd(tx, op{kind: opDelete, ns: j.ns, id: id})
}

// Commit proposes the transaction's operations in one entry: they are
// applied together or not at all.
func (j groupJournal) Commit(tx uint64, done func(error)) {
	ops := j.g.txTake(tx)
	if len(ops) == 0 {
		goDone(done, nil)
		return
	}
	j.g.submit(ops, done)
}

func (j groupJournal) Rollback(tx uint64, done func(error)) {
	j.g.txTake(tx)
	goDone(done, nil)
}

// goDone completes done on another goroutine, as the journal contract
// asks of completions.
func goDone(done func(error), err error) {
	if done != nil {
		go done(err)
	}
}

// txBufs holds transactions being built, per group.
type txBufs struct {
	mu  sync.Mutex
	txs map[uint64][]op
}

func (g *group) txAdd(tx uint64, o op) {
	g.tx.mu.Lock()
	if g.tx.txs == nil {
		g.tx.txs = make(map[uint64][]op)
	}
	g.tx.txs[tx] = append(g.tx.txs[tx], o)
	g.tx.mu.Unlock()
}

func (g *group) txTake(tx uint64) []op {
	g.tx.mu.Lock()
	defer g.tx.mu.Unlock()
	ops := g.tx.txs[tx]
	delete(g.tx.txs, tx)
	return ops
}

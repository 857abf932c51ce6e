package clustertest

import (
	"fmt"
	"sync"
	"time"
)

// Watcher polls every node's /api/v1/cluster every 100 ms for the whole
// scenario. Raft allows one leader per group and term; a node that says
// it leads group g in term t while another node said so of the same g
// and t is a violation: two nodes accepting writes for one group at
// once. It also writes every change of a node's view (leader, term,
// serving) to the timeline, and counts the polls at which two nodes
// served one group at once in different terms (a deposed leader that
// has not yet heard of its successor: it cannot commit, so this is
// allowed, but long overlaps are worth reading).
type Watcher struct {
	c     *Cluster
	stopc chan struct{}
	wg    sync.WaitGroup

	mu         sync.Mutex
	claims     map[[2]uint64]uint64              // (group, term) → the node that claimed it
	seen       map[uint64]map[uint64]GroupStatus // node → group → last status
	seenAt     map[uint64]time.Time              // node → time of its last status
	activeAt   map[uint64]map[uint64]time.Time   // node → group → since when it serves it
	violations []string
	overlaps   int
	polls      int
}

func newWatcher(c *Cluster) *Watcher {
	w := &Watcher{c: c, stopc: make(chan struct{}), claims: map[[2]uint64]uint64{},
		seen: map[uint64]map[uint64]GroupStatus{}, seenAt: map[uint64]time.Time{}, activeAt: map[uint64]map[uint64]time.Time{}}
	for id := range c.Nodes {
		w.wg.Add(1)
		go w.poll(id)
	}
	return w
}

func (w *Watcher) stop() {
	select {
	case <-w.stopc:
	default:
		close(w.stopc)
	}
	w.wg.Wait()
}

func (w *Watcher) poll(id uint64) {
	defer w.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.stopc:
			return
		case <-t.C:
		}
		s, err := w.c.Status(id)
		if err != nil {
			continue // stopped, killed or cut off: nothing to see
		}
		w.record(id, s)
	}
}

func (w *Watcher) record(id uint64, s Status) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	now := time.Now()
	prev := w.seen[id]
	if prev == nil {
		prev = map[uint64]GroupStatus{}
	}
	cur := map[uint64]GroupStatus{}
	if w.activeAt[id] == nil {
		w.activeAt[id] = map[uint64]time.Time{}
	}
	for _, g := range s.Groups {
		cur[g.ID] = g
		if p, ok := prev[g.ID]; !ok || p.Leader != g.Leader || p.Term != g.Term || p.Active != g.Active {
			w.c.Event("watch: node %d sees group %d: leader %d, term %d, serving here %v", id, g.ID, g.Leader, g.Term, g.Active)
		}
		if g.Active {
			if w.activeAt[id][g.ID].IsZero() {
				w.activeAt[id][g.ID] = now
			}
		} else {
			delete(w.activeAt[id], g.ID)
		}
		if g.Active && g.Leader != id {
			w.c.Event("watch: node %d serves group %d but names %d its leader (term %d)", id, g.ID, g.Leader, g.Term)
		}
		if g.Leader == id {
			k := [2]uint64{g.ID, g.Term}
			if other, ok := w.claims[k]; ok && other != id {
				v := fmt.Sprintf("group %d term %d: nodes %d and %d both claim the leadership", g.ID, g.Term, other, id)
				w.violations = append(w.violations, v)
				w.c.Event("watch: VIOLATION: %s", v)
			} else {
				w.claims[k] = id
			}
		}
	}
	w.seen[id] = cur
	w.seenAt[id] = now
	// Two nodes serving one group in this moment (statuses younger than
	// 300 ms), in different terms.
	for _, g := range s.Groups {
		if !g.Active {
			continue
		}
		for other, st := range w.seen {
			if other == id || now.Sub(w.seenAt[other]) > 300*time.Millisecond {
				continue
			}
			if og, ok := st[g.ID]; ok && og.Active {
				w.overlaps++
				w.c.Event("watch: nodes %d (term %d) and %d (term %d) both serve group %d", id, g.Term, other, og.Term, g.ID)
			}
		}
	}
}

// Violations returns the two-leaders-in-one-term violations seen.
func (w *Watcher) Violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.violations...)
}

// Summary says how much the watcher saw.
func (w *Watcher) Summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%d status polls, %d (group, term) leaderships, %d polls with two nodes serving one group in different terms",
		w.polls, len(w.claims), w.overlaps)
}

// Serving reports whether node id's last status (younger than 1 s) says
// it serves group g.
func (w *Watcher) Serving(id, g uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.seenAt[id]) > time.Second {
		return false
	}
	return w.seen[id][g].Active
}

// ServedElsewhere reports whether a node other than not serves group g
// (by statuses younger than 1 s), and which.
func (w *Watcher) ServedElsewhere(g, not uint64) (uint64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, st := range w.seen {
		if id != not && time.Since(w.seenAt[id]) < time.Second && st[g].Active {
			return id, true
		}
	}
	return 0, false
}

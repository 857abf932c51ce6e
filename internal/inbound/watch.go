package inbound

import (
	"context"
	"hash/maphash"
	"sync"
)

// Watch calls Stop for each connection served with a context when that
// context ends, with one context.AfterFunc per context and shard rather
// than one per connection (each costs a few hundred bytes, and an entry
// in the context's list of children). Contexts are told apart by their
// Done channel: the contexts a listener derives per connection with
// values only (pprof labels) end with its own, and share one entry. An
// entry stays, empty, until its context ends, so that connections that
// come and go one at a time do not make and stop an AfterFunc each. The
// zero Watch with Stop set is ready.
//
// The members are spread over shards, each with its own lock: every
// connection's open and close passes here, and with one lock a wave of
// thousands of closes at once queued on it, each holding what its close
// had not yet given back.
type Watch[T comparable] struct {
	// Stop is called, on a goroutine of its own per context and shard,
	// for each member of a context that has ended.
	Stop func(T)

	shards [watchShards]watchShard[T]
}

// watchShards is a power of two, several times the cores of a large
// machine.
const watchShards = 64

var watchSeed = maphash.MakeSeed()

type watchShard[T comparable] struct {
	mu   sync.Mutex
	ctxs map[<-chan struct{}]map[T]struct{} // guarded by mu: by the context's Done
	_    [48]byte                           // a cache line to itself
}

func (w *Watch[T]) shard(m T) *watchShard[T] {
	return &w.shards[maphash.Comparable(watchSeed, m)&(watchShards-1)]
}

// Add makes m a member of ctx. If ctx has ended already, Stop is called
// for m at once.
func (w *Watch[T]) Add(ctx context.Context, m T) {
	sh := w.shard(m)
	done := ctx.Done()
	sh.mu.Lock()
	if ctx.Err() != nil {
		sh.mu.Unlock()
		w.Stop(m)
		return
	}
	set, ok := sh.ctxs[done]
	if !ok {
		if sh.ctxs == nil {
			sh.ctxs = make(map[<-chan struct{}]map[T]struct{})
		}
		set = make(map[T]struct{})
		sh.ctxs[done] = set
		if done != nil {
			context.AfterFunc(ctx, func() { w.ended(sh, done) })
		}
	}
	set[m] = struct{}{}
	sh.mu.Unlock()
}

// Remove forgets m.
func (w *Watch[T]) Remove(ctx context.Context, m T) {
	sh := w.shard(m)
	done := ctx.Done()
	sh.mu.Lock()
	delete(sh.ctxs[done], m)
	sh.mu.Unlock()
}

// ended stops the members of the context whose Done is done, in sh; it
// has ended.
func (w *Watch[T]) ended(sh *watchShard[T], done <-chan struct{}) {
	sh.mu.Lock()
	set := sh.ctxs[done]
	delete(sh.ctxs, done)
	sh.mu.Unlock()
	for m := range set {
		w.Stop(m)
	}
}

// watched returns how many members are watched (for tests).
func (w *Watch[T]) watched() int {
	n := 0
	for i := range w.shards {
		sh := &w.shards[i]
		sh.mu.Lock()
		for _, set := range sh.ctxs {
			n += len(set)
		}
		sh.mu.Unlock()
	}
	return n
}

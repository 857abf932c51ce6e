package inbound

import (
	"context"
	"hash/maphash"
	"sync"
)

// Watch calls Stop for each connection served with a context when that
// context ends, with one context.AfterFunc per context and shard rather
// than one per connection (each costs a few hundred bytes, and an entry
// in the context's list of children). The zero Watch with Stop set is
// ready.
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
	ctxs map[context.Context]*members[T] // guarded by mu
	_    [48]byte                        // a cache line to itself
}

type members[T comparable] struct {
	set  map[T]struct{}
	stop func() bool // context.AfterFunc's
}

func (w *Watch[T]) shard(m T) *watchShard[T] {
	return &w.shards[maphash.Comparable(watchSeed, m)&(watchShards-1)]
}

// Add makes m a member of ctx. If ctx has ended already, Stop is called
// for m at once.
func (w *Watch[T]) Add(ctx context.Context, m T) {
	sh := w.shard(m)
	sh.mu.Lock()
	if ctx.Err() != nil {
		sh.mu.Unlock()
		w.Stop(m)
		return
	}
	ms := sh.ctxs[ctx]
	if ms == nil {
		if sh.ctxs == nil {
			sh.ctxs = make(map[context.Context]*members[T])
		}
		ms = &members[T]{set: make(map[T]struct{})}
		ms.stop = context.AfterFunc(ctx, func() { w.ended(sh, ctx) })
		sh.ctxs[ctx] = ms
	}
	ms.set[m] = struct{}{}
	sh.mu.Unlock()
}

// Remove forgets m, and ctx with its shard's last member.
func (w *Watch[T]) Remove(ctx context.Context, m T) {
	sh := w.shard(m)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ms := sh.ctxs[ctx]
	if ms == nil {
		return
	}
	delete(ms.set, m)
	if len(ms.set) == 0 {
		ms.stop()
		delete(sh.ctxs, ctx)
	}
}

// ended stops the members of ctx in sh, ctx having ended.
func (w *Watch[T]) ended(sh *watchShard[T], ctx context.Context) {
	sh.mu.Lock()
	ms := sh.ctxs[ctx]
	delete(sh.ctxs, ctx)
	sh.mu.Unlock()
	if ms == nil {
		return
	}
	for m := range ms.set {
		w.Stop(m)
	}
}

// watched returns how many contexts have members (for tests).
func (w *Watch[T]) watched() int {
	n := 0
	for i := range w.shards {
		sh := &w.shards[i]
		sh.mu.Lock()
		n += len(sh.ctxs)
		sh.mu.Unlock()
	}
	return n
}

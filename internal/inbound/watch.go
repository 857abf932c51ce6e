package inbound

import (
	"context"
	"sync"
)

// Watch calls Stop for each connection served with a context when that
// context ends, with one context.AfterFunc per context rather than one
// per connection (each costs a few hundred bytes, and an entry in the
// context's list of children). The zero Watch with Stop set is ready.
type Watch[T comparable] struct {
	// Stop is called, on a goroutine of its own per context, for each
	// member of a context that has ended.
	Stop func(T)

	mu   sync.Mutex
	ctxs map[context.Context]*members[T] // guarded by mu
}

type members[T comparable] struct {
	set  map[T]struct{}
	stop func() bool // context.AfterFunc's
}

// Add makes m a member of ctx. If ctx has ended already, Stop is called
// for m at once.
func (w *Watch[T]) Add(ctx context.Context, m T) {
	w.mu.Lock()
	if ctx.Err() != nil {
		w.mu.Unlock()
		w.Stop(m)
		return
	}
	ms := w.ctxs[ctx]
	if ms == nil {
		if w.ctxs == nil {
			w.ctxs = make(map[context.Context]*members[T])
		}
		ms = &members[T]{set: make(map[T]struct{})}
		ms.stop = context.AfterFunc(ctx, func() { w.ended(ctx) })
		w.ctxs[ctx] = ms
	}
	ms.set[m] = struct{}{}
	w.mu.Unlock()
}

// Remove forgets m, and ctx with its last member.
func (w *Watch[T]) Remove(ctx context.Context, m T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ms := w.ctxs[ctx]
	if ms == nil {
		return
	}
	delete(ms.set, m)
	if len(ms.set) == 0 {
		ms.stop()
		delete(w.ctxs, ctx)
	}
}

// ended stops the members of ctx, which has ended.
func (w *Watch[T]) ended(ctx context.Context) {
	w.mu.Lock()
	ms := w.ctxs[ctx]
	delete(w.ctxs, ctx)
	w.mu.Unlock()
	if ms == nil {
		return
	}
	for m := range ms.set {
		w.Stop(m)
	}
}

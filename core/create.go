package core

import (
	"errors"
	"fmt"
)

// Creating durable queues. A durable queue's binding is written, and
// synced, before the queue is bound (so that no confirmed message names a
// queue the journal does not know), but never under Broker.mu: a sync
// under the broker-wide lock would stall every send and subscribe of the
// broker behind one new queue. The creator reserves the name
// (Broker.creating) under b.mu, writes the binding with no lock held,
// then retakes b.mu and binds the queue; whoever wants the same name
// meanwhile waits for the reservation to end and looks again.

// reserveLocked reserves name for a creation. If another creation of it
// is under way it releases b.mu, waits for it, retakes b.mu and returns
// false: the caller must look again.
func (b *Broker) reserveLocked(name string) bool {
	if ch := b.creating[name]; ch != nil {
		b.mu.Unlock()
		<-ch
		b.mu.Lock()
		return false
	}
	if b.creating == nil {
		b.creating = make(map[string]chan struct{})
	}
	b.creating[name] = make(chan struct{})
	return true
}

// persistReservedLocked writes the binding of q, whose name the caller
// reserved, with b.mu released, then retakes b.mu and ends the
// reservation. On success the caller registers and binds q before it
// releases b.mu. A queue with nothing to write keeps the lock throughout.
func (b *Broker) persistReservedLocked(q *Queue) error {
	var err error
	if b.bindings != nil && q.durable {
		b.mu.Unlock()
		err = b.persistQueue(q)
		b.mu.Lock()
	}
	ch := b.creating[q.name]
	delete(b.creating, q.name)
	close(ch)
	if err == nil && b.closed {
		b.unpersistQueue(q)
		err = ErrClosed
	}
	return err
}

// anycastLocked returns address name with its anycast queue, creating
// either as needed (b.mu held, released while the binding is written).
// auto marks an address created on first use.
func (b *Broker) anycastLocked(name string, auto bool) (*address, error) {
	for {
		if b.closed {
			return nil, ErrClosed
		}
		a := b.addressLocked(name, auto)
		if a.anycast != nil {
			return a, nil
		}
		if !b.reserveLocked(name) {
			continue // created or failed meanwhile: look again
		}
		q := b.unregisteredQueue(name, name, Anycast, true, false, "")
		if err := b.persistReservedLocked(q); err != nil {
			return nil, err
		}
		a = b.addressLocked(name, auto) // it may have been deleted meanwhile
		b.queues[name] = q
		a.anycast = q
		b.emitQueue(EventBindingAdded, q, "")
		b.bumpLocked()
		return a, nil
	}
}

// errAutoCreate: a consumer's pass found its anycast queue missing and
// creatable; queueFor creates it outside the pass and looks again.
var errAutoCreate = errors.New("core: auto-create the queue")

// autoCreateAnycast creates address name's anycast queue on first use
// by a send or a consumer of s (nil: the broker's own send): the one
// place where queues are auto-created. It checks the address settings,
// s's permissions (createAddress, createDurableQueue) and its user's
// quota, with b.mu not held.
func (b *Broker) autoCreateAnycast(name string, s *Session) (*address, error) {
	st := b.settings.resolve(name)
	if !st.AutoCreate || isTemporaryName(name) {
		return nil, fmt.Errorf("%w: %q", ErrQueueNotFound, name)
	}
	if err := s.authorizeCreate(name, Anycast); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if a := b.addresses[name]; a != nil && a.anycast != nil {
		return a, nil
	}
	if b.creating[name] == nil {
		if err := b.chargeAutoQueueLocked(s, name); err != nil {
			return nil, err
		}
	}
	return b.anycastLocked(name, true)
}

// unregisteredQueue is newQueueLocked without registering the queue.
func (b *Broker) unregisteredQueue(name, addr string, rt RoutingType, durable, temporary bool, clientID string) *Queue {
	q := &Queue{
		b: b, name: name, address: addr, routing: rt,
		durable: durable, temporary: temporary, clientID: clientID,
	}
	st := b.settings.resolve(addr)
	q.st.Store(&st)
	q.nd = st.NonDestructive
	q.maxBytes.Store(st.MaxSizeBytes)
	return q
}

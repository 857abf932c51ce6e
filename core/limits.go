package core

import (
	"errors"
	"fmt"
)

// ErrQuotaExceeded is returned when an operation would take a user past
// a per-user limit, such as Config.MaxAutoCreatedQueuesPerUser.
var ErrQuotaExceeded = errors.New("core: quota exceeded")

// autoQueues counts the anycast queues each user has auto-created (by a
// send to, or a consumer on, an address that did not have one), for
// Config.MaxAutoCreatedQueuesPerUser. Queues recovered from the journal
// at start, and those made by the broker's own sends, a front-end's
// internal sessions or an administrator, are nobody's. Guarded by
// Broker.mu.
type autoQueues struct {
	byUser map[string]map[string]struct{} // user → names of the queues it created
	owner  map[string]string              // queue name → the user who created it
}

// chargeAutoQueueLocked is called, with b.mu held for writing, before
// the anycast queue name is auto-created for s. It refuses with
// ErrQuotaExceeded when s's user has as many auto-created queues alive
// as the limit; otherwise it records the queue as the user's. A queue
// recorded but then not created (a journal error) is forgotten at the
// user's next check.
func (b *Broker) chargeAutoQueueLocked(s *Session, name string) error {
	max := b.cfg.MaxAutoCreatedQueuesPerUser
	if max <= 0 || s == nil || s.opts.Protocol == "" {
		return nil // the broker's own sends, a front-end's internal session
	}
	t := &b.autoq
	if t.byUser == nil {
		t.byUser = make(map[string]map[string]struct{})
		t.owner = make(map[string]string)
	}
	user := s.opts.User
	mine := t.byUser[user]
	if len(mine) >= max {
		// Forget what is gone, then count again.
		for q := range mine {
			if x := b.queues[q]; x == nil || x.routing != Anycast || t.owner[q] != user {
				delete(mine, q)
				if t.owner[q] == user {
					delete(t.owner, q)
				}
			}
		}
		if len(mine) >= max {
			return fmt.Errorf("%w: user %q has auto-created %d queues, the limit; %q was not created", ErrQuotaExceeded, user, len(mine), name)
		}
	}
	if mine == nil {
		mine = make(map[string]struct{})
		t.byUser[user] = mine
	}
	if prev, ok := t.owner[name]; ok && prev != user {
		delete(t.byUser[prev], name)
	}
	mine[name] = struct{}{}
	t.owner[name] = user
	return nil
}

// unchargeAutoQueueLocked forgets q, being removed, as its creator's.
// b.mu is held for writing.
func (b *Broker) unchargeAutoQueueLocked(q *Queue) {
	t := &b.autoq
	user, ok := t.owner[q.name]
	if !ok || q.routing != Anycast {
		return
	}
	delete(t.owner, q.name)
	if mine := t.byUser[user]; mine != nil {
		delete(mine, q.name)
		if len(mine) == 0 {
			delete(t.byUser, user)
		}
	}
}

// AutoCreatedQueues returns how many auto-created queues the broker
// counts against user.
func (b *Broker) AutoCreatedQueues(user string) int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	n := 0
	for q := range b.autoq.byUser[user] {
		if x := b.queues[q]; x != nil && x.routing == Anycast && b.autoq.owner[q] == user {
			n++
		}
	}
	return n
}

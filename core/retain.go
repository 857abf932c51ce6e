package core

import (
	"fmt"
	"sort"
	"time"

	"github.com/junctionmq/junction/core/wildcard"
)

// recRetained is the message journal's user type for a retained message
// (the last value of an address, as MQTT keeps it).
const recRetained uint16 = 4

// retained is the last-value store: one message per address, journaled
// when the broker has a message journal (unless kept with
// RetainInMemory).
type retainedStore struct {
	byAddr map[string]*Message // guarded by Broker.mu
	ids    map[string]uint64   // guarded by Broker.mu: journal record of each (0: in memory only)
}

// Retain keeps m as the retained message of its address, replacing the
// previous one; an empty body clears it (MQTT's retain semantics). With a
// journal it returns once the new value is on disk. m must not be changed
// afterwards. A retained message past its Expiration is never handed
// out, and is dropped when found.
func (b *Broker) Retain(m *Message) error {
	if err := validAddress(m.Address); err != nil {
		return err
	}
	if b.cluster != nil {
		return b.cluster.Retain(m)
	}
	var id uint64
	if b.msgs != nil && m.Size() > 0 {
		id = b.msgID.Add(1)
		if m.Streamed() {
			// By reference: a file of its own under the record's id,
			// which goes with the record (setRetained, dropRetained).
			c, err := b.retainedCopy(m, id)
			if err != nil {
				return err
			}
			m = c
		}
		ch := make(chan error, 1)
		b.msgs.Append(id, recRetained, encodeMessage(m, nil), true, func(err error) { ch <- err })
		if err := <-ch; err != nil {
			return fmt.Errorf("%w: retained message: %w", ErrPersistence, err)
		}
	}
	b.setRetained(m, id)
	return nil
}

// RetainInMemory is Retain without the journal: the value is lost on a
// restart. It is for values a front-end publishes again anyway, such as
// the broker's statistics under $SYS. In a cluster it is kept by this
// (access) broker, for its own clients.
func (b *Broker) RetainInMemory(m *Message) error {
	if err := validAddress(m.Address); err != nil {
		return err
	}
	b.setRetained(m, 0)
	return nil
}

func (b *Broker) setRetained(m *Message, id uint64) {
	b.mu.Lock()
	old, had := b.retained.ids[m.Address]
	oldMsg := b.retained.byAddr[m.Address]
	if m.Size() == 0 {
		delete(b.retained.byAddr, m.Address)
		delete(b.retained.ids, m.Address)
	} else {
		b.retained.byAddr[m.Address] = m
		b.retained.ids[m.Address] = id
	}
	b.mu.Unlock()
	if had && old != 0 {
		b.deleteWithBody(old, oldMsg)
	}
}

// retainedCopy copies m, whose body is streamed, for the retained record
// id: its body in a file of its own under id (a link to m's).
func (b *Broker) retainedCopy(m *Message, id uint64) (*Message, error) {
	if err := b.large.Link(m.lb.id, id); err != nil {
		return nil, fmt.Errorf("%w: retained large message body: %w", ErrPersistence, err)
	}
	c := m.shallowCopy()
	c.ID = m.ID
	c.lb = keptBody(b.large, id, m.Size())
	return c, nil
}

// deleteWithBody deletes the record id of m (a retained value, a
// message read back from a page store), and m's body's file once the
// delete is on disk when the record owns it.
func (b *Broker) deleteWithBody(id uint64, m *Message) {
	if m == nil || m.lb == nil || m.lb.id != id {
		b.msgs.Delete(id, false, b.logStoreErr)
		return
	}
	b.msgs.Delete(id, true, func(err error) {
		if err == nil {
			err = b.large.Remove(id)
		}
		b.logStoreErr(err)
	})
}

// Retained returns the retained messages that have not expired, ordered
// by address.
func (b *Broker) Retained() []*Message {
	return b.retainedMatching("", time.Now())
}

// RetainedCount returns how many retained messages the broker holds
// (expired ones not yet dropped included).
func (b *Broker) RetainedCount() int {
	n := 0
	if b.cluster != nil {
		n = len(b.cluster.Retained())
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	return n + len(b.retained.byAddr)
}

// RetainedFor returns the retained messages a subscription to pattern
// (an address, or a wildcard pattern) made by this session receives:
// those whose address it matches (see Broker's system-address rule),
// that have not expired, and that the session's user may consume, each
// decided for the message's own address (refusals counted and logged as
// for any consume). Ordered by address.
func (s *Session) RetainedFor(pattern string) []*Message {
	ms := s.b.retainedMatching(pattern, time.Now())
	if s.trusted() {
		return ms
	}
	out := ms[:0]
	for _, m := range ms {
		if s.authorize(PermConsume, m.Address) == nil {
			out = append(out, m)
		}
	}
	return out
}

// retainedMatching returns the unexpired retained messages whose address
// pattern matches ("" for all), ordered by address, and drops the
// expired ones it finds. An access broker asks its cluster (whose group
// brokers drop expired ones as they find them) and adds its own kept
// in memory.
func (b *Broker) retainedMatching(pattern string, now time.Time) []*Message {
	var expired []*Message
	var out []*Message
	if b.cluster != nil {
		for _, m := range b.cluster.Retained() {
			if (pattern == "" || subscriptionMatch(pattern, m.Address)) && !m.Expired(now) {
				out = append(out, m)
			}
		}
	}
	b.mu.RLock()
	if pattern != "" && !wildcard.IsPattern(pattern) {
		if m := b.retained.byAddr[pattern]; m != nil {
			out = append(out, m)
		}
	} else {
		for addr, m := range b.retained.byAddr {
			if pattern == "" || subscriptionMatch(pattern, addr) {
				out = append(out, m)
			}
		}
	}
	b.mu.RUnlock()
	live := out[:0]
	for _, m := range out {
		if m.Expired(now) {
			expired = append(expired, m)
			continue
		}
		live = append(live, m)
	}
	for _, m := range expired {
		b.dropRetained(m)
	}
	sort.Slice(live, func(i, j int) bool { return live[i].Address < live[j].Address })
	return live
}

// dropRetained removes m if it is still its address's retained message.
func (b *Broker) dropRetained(m *Message) {
	b.mu.Lock()
	if b.retained.byAddr[m.Address] != m {
		b.mu.Unlock()
		return
	}
	id := b.retained.ids[m.Address]
	delete(b.retained.byAddr, m.Address)
	delete(b.retained.ids, m.Address)
	b.mu.Unlock()
	if id != 0 {
		b.deleteWithBody(id, m)
	}
}

// restoreRetained takes a retained record found at recovery; of two for
// one address (a crash between writing the new one and deleting the old),
// the later wins and the other is deleted.
func (b *Broker) restoreRetained(id uint64, p []byte) error {
	m, _, err := decodeMessage(p)
	if err != nil {
		return err
	}
	if old, ok := b.retained.ids[m.Address]; ok {
		if old > id {
			b.staleRecords = append(b.staleRecords, id)
			return nil
		}
		b.staleRecords = append(b.staleRecords, old)
	}
	if m.lb != nil {
		if b.large == nil {
			return fmt.Errorf("%w: retained message %d has its body in the large-message store, which is not configured", errCorruptRecord, id)
		}
		// Its size once the replay is over (recover): a record a later
		// one superseded may have lost its file already.
		m.lb = keptBody(b.large, id, 0)
	}
	b.retained.byAddr[m.Address] = m
	b.retained.ids[m.Address] = id
	return nil
}

package core

import (
	"fmt"
	"sort"
)

// recRetained is the message journal's user type for a retained message
// (the last value of an address, as MQTT keeps it).
const recRetained uint16 = 4

// retained is the last-value store: one message per address, journaled
// when the broker has a message journal.
type retainedStore struct {
	byAddr map[string]*Message // guarded by Broker.mu
	ids    map[string]uint64   // guarded by Broker.mu: journal record of each
}

// Retain keeps m as the retained message of its address, replacing the
// previous one; an empty body clears it (MQTT's retain semantics). With a
// journal it returns once the new value is on disk. m must not be changed
// afterwards.
func (b *Broker) Retain(m *Message) error {
	if err := validAddress(m.Address); err != nil {
		return err
	}
	if b.cluster != nil {
		return b.cluster.Retain(m)
	}
	var id uint64
	if b.msgs != nil && len(m.Body) > 0 {
		id = b.msgID.Add(1)
		ch := make(chan error, 1)
		b.msgs.Append(id, recRetained, encodeMessage(m, nil), true, func(err error) { ch <- err })
		if err := <-ch; err != nil {
			return fmt.Errorf("%w: retained message: %w", ErrPersistence, err)
		}
	}
	b.mu.Lock()
	old, had := b.retained.ids[m.Address]
	if len(m.Body) == 0 {
		delete(b.retained.byAddr, m.Address)
		delete(b.retained.ids, m.Address)
	} else {
		b.retained.byAddr[m.Address] = m
		b.retained.ids[m.Address] = id
	}
	b.mu.Unlock()
	if had && old != 0 {
		b.msgs.Delete(old, false, b.logStoreErr)
	}
	return nil
}

// Retained returns the retained messages, ordered by address.
func (b *Broker) Retained() []*Message {
	if b.cluster != nil {
		return b.cluster.Retained()
	}
	b.mu.RLock()
	out := make([]*Message, 0, len(b.retained.byAddr))
	for _, m := range b.retained.byAddr {
		out = append(out, m)
	}
	b.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out
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
			b.msgs.Delete(id, false, b.logStoreErr)
			return nil
		}
		b.msgs.Delete(old, false, b.logStoreErr)
	}
	b.retained.byAddr[m.Address] = m
	b.retained.ids[m.Address] = id
	return nil
}

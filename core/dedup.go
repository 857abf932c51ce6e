package core

import (
	"errors"
	"fmt"
	"sync"
)

// Duplicate detection. A producer that does not know whether its message
// was stored (its connection broke before the confirmation, the broker
// crashed, a cluster group changed leader) sends it again; with a
// duplicate id the broker stores it once. Each address remembers the
// last IDCacheSize ids sent to it (address setting id-cache-size,
// default 20,000), in the journal when the message is durable, so the
// memory survives a restart and a kill -9, as HornetQ's duplicate-id
// caches do.
//
// The id is the message property PropDuplicateID (_AMQ_DUPL_ID, as
// Artemis names it: a STOMP header, an AMQP application property, an
// MQTT 5 user property), or, for a message a cluster node forwards,
// PropForwardID (an internal property no client sees). A duplicate is
// confirmed to its producer, so that it stops resending, but only once
// the original is durable (a duplicate of a message still on its way to
// the disk waits for it); it is counted per address and never delivered.
// In a transaction a duplicate fails the commit with ErrDuplicateID: the
// transaction is all or nothing, so it cannot be confirmed in part.
//
// The id's record is written with the message's in one journal
// transaction: a crash keeps both or neither, so a resent message is
// never taken for a duplicate of one that was lost, and never stored
// twice.

// Properties carrying a duplicate id.
const (
	PropDuplicateID = "_AMQ_DUPL_ID"
	PropForwardID   = InternalPropertyPrefix + "FWD_ID"
	// PropAMQPMessageID is where the AMQP front-end keeps an AMQP
	// message's message-id (as text); with the address setting
	// duplicate-id-from-message-id it is the duplicate id of a message
	// that carries no _AMQ_DUPL_ID.
	PropAMQPMessageID = InternalPropertyPrefix + "AMQP_MESSAGE_ID"
)

// DefaultIDCacheSize is the number of duplicate ids an address keeps.
const DefaultIDCacheSize = 20000

// ErrDuplicateID fails a transaction that sends a message whose
// duplicate id its address has already seen.
var ErrDuplicateID = errors.New("core: duplicate id already sent to this address")

// recDuplicateID is the message journal's user type for a duplicate id
// (payload: address, id), written in the transaction of its message.
const recDuplicateID uint16 = 8

// dupKey returns m's duplicate id, "" for none; with msgID, an AMQP
// message-id counts too (after the other two).
func dupKey(m *Message, msgID bool) string {
	ps := [...]string{PropDuplicateID, PropForwardID, PropAMQPMessageID}
	n := len(ps)
	if !msgID {
		n--
	}
	for _, p := range ps[:n] {
		switch v := m.Properties[p].(type) {
		case string:
			if v != "" {
				return p + "\x00" + v
			}
		case []byte:
			if len(v) > 0 {
				return p + "\x00" + string(v)
			}
		}
	}
	return ""
}

// dupEntry is one remembered id.
type dupEntry struct {
	key     string
	record  uint64 // journal record of the id; 0 when not journaled
	durable bool   // the original is stored (or needs no storing)
	waiters []func(error)
}

// dupCache is an address's ring of ids.
type dupCache struct {
	ring []*dupEntry
	next int
	byID map[string]*dupEntry
}

// dups holds every address's cache, apart from the address maps (an
// auto-created address may go; its ids stay until evicted).
type dups struct {
	mu     sync.Mutex
	byAddr map[string]*dupCache
}

// counts of duplicates refused, per address.
type dupCounts struct {
	mu     sync.Mutex
	byAddr map[string]uint64
}

func (b *Broker) cacheOf(address string) *dupCache {
	c := b.dup.byAddr[address]
	if c == nil {
		n := b.settings.resolve(address).IDCacheSize
		if n <= 0 {
			return nil
		}
		if b.dup.byAddr == nil {
			b.dup.byAddr = make(map[string]*dupCache)
		}
		c = &dupCache{ring: make([]*dupEntry, 0, min(n, 1024)), byID: make(map[string]*dupEntry)}
		b.dup.byAddr[address] = c
	}
	return c
}

// claimDup looks up key for address. For a duplicate it returns the
// original's entry (and dup); otherwise it remembers key with a new
// entry, evicting the oldest id when the cache is full, and returns it.
// A nil entry means the address keeps no ids.
func (b *Broker) claimDup(address, key string) (e *dupEntry, dup bool) {
	b.dup.mu.Lock()
	defer b.dup.mu.Unlock()
	c := b.cacheOf(address)
	if c == nil {
		return nil, false
	}
	if e := c.byID[key]; e != nil {
		return e, true
	}
	e = &dupEntry{key: key}
	b.rememberLocked(address, c, e)
	return e, false
}

// rememberLocked adds e to c, evicting the oldest id when c is full.
func (b *Broker) rememberLocked(address string, c *dupCache, e *dupEntry) {
	size := b.settings.resolve(address).IDCacheSize
	if len(c.ring) < size {
		c.ring = append(c.ring, e)
	} else {
		old := c.ring[c.next]
		delete(c.byID, old.key)
		if old.record != 0 && b.msgs != nil {
			b.msgs.Delete(old.record, false, b.logStoreErr)
		}
		c.ring[c.next] = e
		c.next = (c.next + 1) % size
	}
	c.byID[e.key] = e
}

// settleDup records the outcome of storing the original of e: waiting
// duplicates are confirmed, or, when it failed, the id is forgotten (so
// that the producer's next try is taken) and they fail too.
func (b *Broker) settleDup(address string, e *dupEntry, err error) {
	b.dup.mu.Lock()
	ws := e.waiters
	e.waiters = nil
	if err == nil {
		e.durable = true
	} else if c := b.dup.byAddr[address]; c != nil && c.byID[e.key] == e {
		delete(c.byID, e.key)
	}
	b.dup.mu.Unlock()
	for _, w := range ws {
		w(err)
	}
}

// waitDup answers a duplicate: at once when its original is stored, else
// when it is.
func (b *Broker) waitDup(e *dupEntry, done func(error)) {
	b.dup.mu.Lock()
	if !e.durable {
		e.waiters = append(e.waiters, done)
		b.dup.mu.Unlock()
		return
	}
	b.dup.mu.Unlock()
	done(nil)
}

func (b *Broker) countDup(address string) {
	b.dupCount.mu.Lock()
	if b.dupCount.byAddr == nil {
		b.dupCount.byAddr = make(map[string]uint64)
	}
	b.dupCount.byAddr[address]++
	b.dupCount.mu.Unlock()
}

// Duplicates returns, per address, the messages refused as duplicates
// since the broker started.
func (b *Broker) Duplicates() map[string]uint64 {
	b.dupCount.mu.Lock()
	defer b.dupCount.mu.Unlock()
	out := make(map[string]uint64, len(b.dupCount.byAddr))
	for a, n := range b.dupCount.byAddr {
		out[a] = n
	}
	return out
}

// dupRecord encodes a duplicate id's journal record.
func dupRecord(address, key string) []byte {
	return appendStr(appendStr(nil, address), key)
}

// restoreDup puts a recovered id back in its address's cache.
func (b *Broker) restoreDup(id uint64, p []byte) error {
	d := &decoder{b: p}
	address, key := d.str(), d.str()
	if d.err != nil || len(d.b) != 0 {
		return fmt.Errorf("%w: duplicate id record", errCorruptRecord)
	}
	b.dup.mu.Lock()
	defer b.dup.mu.Unlock()
	c := b.cacheOf(address)
	if c == nil || c.byID[key] != nil {
		// The address no longer keeps ids, or keeps fewer: forget it.
		b.msgs.Delete(id, false, b.logStoreErr)
		return nil
	}
	b.rememberLocked(address, c, &dupEntry{key: key, record: id, durable: true})
	return nil
}

// journalWithDup journals m (for its durable queues among qs) and its
// duplicate id in one transaction; done follows journalMessage's
// contract (and settles the id: see deliver).
func (b *Broker) journalWithDup(m *Message, qs []*Queue, address string, e *dupEntry, done func(error)) {
	ids := make([]uint64, 0, len(qs))
	for _, q := range qs {
		if q.durable {
			ids = append(ids, q.id)
		}
	}
	rec, err := b.messageRecord(m, ids)
	if err != nil {
		done(err)
		return
	}
	tx := b.txID.Add(1)
	record := b.msgID.Add(1)
	b.dup.mu.Lock()
	e.record = record
	b.dup.mu.Unlock()
	b.msgs.AppendTx(tx, m.ID, recMessage, rec)
	b.msgs.AppendTx(tx, record, recDuplicateID, dupRecord(address, e.key))
	b.msgs.Commit(tx, wrapPersist(done))
}

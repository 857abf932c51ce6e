package core

import (
	"sync/atomic"
	"time"
)

// DropReason says why a message did not reach a queue, or why a send
// was refused. Every drop and refusal is counted per reason (broker),
// per queue (QueueStats.Dropped), per producing connection
// (ConnectionInfo.Dropped, Refused) and logged, at most once a minute
// per queue and reason.
type DropReason uint8

// The reasons.
const (
	// DropFull: the queue was over its limit with address-full-policy DROP.
	DropFull DropReason = iota
	// DropNonDurable: a non-durable message to a PAGE queue over its
	// limit; non-durable messages never go to disk.
	DropNonDurable
	// RefusedFull: the send was refused (address-full-policy FAIL).
	RefusedFull
	// RefusedDisk: a durable send was refused because the store is over
	// its disk limit.
	RefusedDisk
	// DropRing: the oldest message of a ring queue (ring-size), dropped
	// to make room for a new one (lvq.go).
	DropRing
	numDropReasons
)

var dropReasonNames = [numDropReasons]string{"queue_full", "non_durable_over_budget", "refused_full", "refused_disk_full", "ring_full"}

// String returns the reason's metric label.
func (r DropReason) String() string {
	if r < numDropReasons {
		return dropReasonNames[r]
	}
	return "unknown"
}

// refusal reports whether the reason refuses the send (the producer is
// told) rather than dropping the message for one queue.
func (r DropReason) refusal() bool { return r == RefusedFull || r == RefusedDisk }

// dropCounters count drops per reason.
type dropCounters [numDropReasons]atomic.Uint64

// DropStats returns the broker's drops and refusals since start, by
// reason (String gives the label).
func (b *Broker) DropStats() map[DropReason]uint64 {
	out := make(map[DropReason]uint64, numDropReasons)
	for r := range numDropReasons {
		out[r] = b.drops[r].Load()
	}
	return out
}

// dropped counts and logs a message q did not take (or a refused send
// aimed at q) for reason, attributed to the producing session s (nil for
// the broker's own moves).
func (b *Broker) dropped(q *Queue, m *Message, s *Session, reason DropReason) {
	b.drops[reason].Add(1)
	if s != nil {
		if reason.refusal() {
			s.refused.Add(1)
		} else {
			s.dropped.Add(1)
		}
	}
	if !reason.refusal() {
		q.stats.dropped.Add(1)
	}
	b.emitDrop(q, m, s, reason.refusal(), reason.String())
	now := time.Now().UnixNano()
	last := &q.lastDropLog[reason]
	if l := last.Load(); now-l > int64(time.Minute) && last.CompareAndSwap(l, now) {
		ev := b.log.Warn().Str("queue", q.name).Str("reason", reason.String()).Uint64("message", m.ID).
			Int64("queue_bytes", q.bytes.Load()).Int64("max_bytes", q.maxBytes.Load()).
			Int64("broker_memory", b.mem.used.Load()).Int64("max_memory", b.mem.max).
			Uint64("total_for_reason", b.drops[reason].Load())
		if s != nil {
			ev = ev.Str("protocol", s.opts.Protocol).Str("remote", s.opts.RemoteAddr).Str("user", s.opts.User).Str("client_id", s.opts.ClientID)
		}
		ev.Msg("message not queued (logged at most once a minute per queue and reason)")
	}
}

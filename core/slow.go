package core

import "fmt"

// SlowConsumerPolicy is what happens when a non-durable subscription lags
// past its address's SlowConsumerThreshold.
type SlowConsumerPolicy string

// The slow-consumer policies.
const (
	// SlowNotify logs the lagging subscription (once per lag episode).
	SlowNotify SlowConsumerPolicy = "NOTIFY"
	// SlowKill also disconnects the subscriber's connection, which
	// deletes its non-durable subscription and frees what it held; a
	// connection core cannot close (a front-end's internal session) is
	// only notified.
	SlowKill SlowConsumerPolicy = "KILL"
)

func (p SlowConsumerPolicy) valid() bool { return p == SlowNotify || p == SlowKill }

// checkSlowLocked applies the slow-consumer policy after a message joined
// q: a non-durable subscription whose depth passed its threshold is
// reported and, with KILL, its subscribers' connections are returned to
// be closed once q's lock is released. The episode ends when the
// subscription drains below half the threshold.
func (q *Queue) checkSlowLocked() []func() {
	max := q.settings().SlowConsumerThreshold
	// A non-destructive queue's depth is not what its consumer lags by.
	if max <= 0 || !q.temporary || q.durable || q.nd {
		return nil
	}
	depth := q.stats.depth.Load()
	if depth <= max {
		if q.slow && depth < max/2 {
			q.slow = false
		}
		return nil
	}
	if q.slow {
		return nil
	}
	q.slow = true
	q.b.emitQueue(EventConsumerSlow, q, string(q.settings().SlowConsumerPolicy))
	var closers []func()
	for _, c := range q.consumers {
		s := c.s
		ev := q.b.log.Warn().Str("queue", q.name).Str("address", q.address).Int64("depth", depth).Int64("threshold", max).
			Str("policy", string(q.settings().SlowConsumerPolicy)).Str("protocol", s.opts.Protocol).Str("remote", s.opts.RemoteAddr).
			Str("user", s.opts.User).Str("client_id", s.opts.ClientID)
		if q.settings().SlowConsumerPolicy == SlowKill && s.opts.Close != nil {
			closers = append(closers, s.opts.Close)
			q.stats.slowKilled.Add(1)
			ev.Msg("slow consumer: disconnecting it (slow-consumer-policy KILL)")
			continue
		}
		ev.Msg(fmt.Sprintf("slow consumer: its non-durable subscription lags past %d messages", max))
	}
	return closers
}

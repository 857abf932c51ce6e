package core

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/junctionmq/junction/core/selector"
)

// Selectors (ConsumerOptions.Selector, whose doc lists the identifiers)
// are parsed by package core/selector and evaluated here against a
// message and its delivery attempt.

// parseSelector parses a consumer's selector; blank means none (nil).
func parseSelector(expr string) (*selector.Selector, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, nil
	}
	sel, err := selector.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSelector, err)
	}
	return sel, nil
}

// selectorValue resolves a selector identifier for m on its attempt
// failures+1 (the table of ConsumerOptions.Selector).
func selectorValue(m *Message, failures uint32, name string) (any, bool) {
	if v, ok := m.Properties[name]; ok {
		return v, true
	}
	switch name {
	case "JMSMessageID":
		return "ID:" + strconv.FormatUint(m.ID, 10), true
	case "JMSPriority":
		return int64(m.Priority), true
	case "JMSTimestamp":
		if m.Timestamp.IsZero() {
			return nil, false
		}
		return m.Timestamp.UnixMilli(), true
	case "JMSCorrelationID":
		return nonEmpty(m.CorrelationID)
	case "JMSDeliveryMode":
		if m.Durable {
			return "PERSISTENT", true
		}
		return "NON_PERSISTENT", true
	case "JMSExpiration":
		if m.Expiration.IsZero() {
			return int64(0), true
		}
		return m.Expiration.UnixMilli(), true
	case "JMSXGroupID":
		return nonEmpty(m.GroupID)
	case "JMSXUserID":
		return nonEmpty(m.UserID)
	case "JMSXDeliveryCount":
		return int64(failures) + 1, true
	}
	return nil, false
}

func nonEmpty(s string) (any, bool) {
	if s == "" {
		return nil, false
	}
	return s, true
}

// accepts reports whether c may take r: its user may read r (a
// consumer of a wildcard subscription, readauthz.go) and its selector
// selects r. Called under q.mu.
func (c *Consumer) accepts(r *ref) bool {
	if c.rd != nil && !c.rd.may(c.q.b, c.s.opts.User, r.msg.Address) {
		return false
	}
	if c.sel == nil {
		return true
	}
	return c.sel.Matches(func(name string) (any, bool) { return selectorValue(r.msg, r.failures, name) })
}

// admits reports whether a message routed to subscription q belongs on
// it: not refused by its no-local session nor by its selector, and, for
// a subscription bound to a wildcard pattern, readable by one of its
// readers (readauthz.go; note counts a refusal). It reads only fields
// fixed at creation and atomics, so routing calls it without q.mu.
func (q *Queue) admits(m *Message, note bool) bool {
	if o := q.noLocal.Load(); o != 0 && o == m.origin {
		return false
	}
	if q.filter != nil && !q.filter.Matches(func(name string) (any, bool) { return selectorValue(m, 0, name) }) {
		return false
	}
	return q.rd == nil || q.admitsReader(m, note)
}

// admitted returns the queues of qs that admit m: qs itself (shared, not
// to be changed) when all do, which is the case without selectors,
// no-local subscriptions or refused readers, so the common path
// allocates nothing.
func admitted(qs []*Queue, m *Message, note bool) []*Queue {
	for i, q := range qs {
		if q.admits(m, note) {
			continue
		}
		out := append(make([]*Queue, 0, len(qs)-1), qs[:i]...)
		for _, q := range qs[i+1:] {
			if q.admits(m, note) {
				out = append(out, q)
			}
		}
		return out
	}
	return qs
}

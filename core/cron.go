package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// cronSpec is a parsed five-field cron entry, as ActiveMQ's
// AMQ_SCHEDULED_CRON takes: minute (0-59), hour (0-23), day of month
// (1-31), month (1-12), day of week (0-7, 0 and 7 are Sunday). Each field
// is *, a number, a range a-b, any of those with a step /n, or a
// comma-separated list of them. As in cron, when both day fields are
// restricted a day matching either is taken.
type cronSpec struct {
	min, hour, dom, month, dow uint64 // bit sets
	domAny, dowAny             bool
}

// parseCron parses a cron entry.
func parseCron(s string) (*cronSpec, error) {
	f := strings.Fields(s)
	if len(f) != 5 {
		return nil, fmt.Errorf("cron entry %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", s, len(f))
	}
	c := &cronSpec{}
	var err error
	for i, p := range []struct {
		set      *uint64
		lo, hi   int
		fieldAny *bool
	}{{&c.min, 0, 59, nil}, {&c.hour, 0, 23, nil}, {&c.dom, 1, 31, &c.domAny}, {&c.month, 1, 12, nil}, {&c.dow, 0, 7, &c.dowAny}} {
		if *p.set, err = cronField(f[i], p.lo, p.hi); err != nil {
			return nil, fmt.Errorf("cron entry %q: field %d: %w", s, i+1, err)
		}
		if p.fieldAny != nil {
			*p.fieldAny = f[i] == "*" || f[i] == "?"
		}
	}
	if c.dow&(1<<7) != 0 {
		c.dow |= 1 // 7 is Sunday too
	}
	return c, nil
}

func cronField(s string, lo, hi int) (uint64, error) {
	var set uint64
	for _, part := range strings.Split(s, ",") {
		rng, stepText, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("bad step %q", stepText)
			}
			step = n
		}
		a, b := lo, hi
		switch {
		case rng == "*" || rng == "?":
		case strings.Contains(rng, "-"):
			x, y, _ := strings.Cut(rng, "-")
			var err1, err2 error
			a, err1 = strconv.Atoi(x)
			b, err2 = strconv.Atoi(y)
			if err1 != nil || err2 != nil {
				return 0, fmt.Errorf("bad range %q", rng)
			}
		default:
			n, err := strconv.Atoi(rng)
			if err != nil {
				return 0, fmt.Errorf("bad value %q", rng)
			}
			a, b = n, n
			if hasStep {
				b = hi
			}
		}
		if a < lo || b > hi || a > b {
			return 0, fmt.Errorf("%q out of range %d-%d", part, lo, hi)
		}
		for v := a; v <= b; v += step {
			set |= 1 << uint(v)
		}
	}
	return set, nil
}

func (c *cronSpec) dayMatches(t time.Time) bool {
	dom := c.dom&(1<<uint(t.Day())) != 0
	dow := c.dow&(1<<uint(t.Weekday())) != 0
	switch {
	case c.domAny && c.dowAny:
		return true
	case c.domAny:
		return dow
	case c.dowAny:
		return dom
	}
	return dom || dow
}

// next returns the first minute strictly after t that c matches, in t's
// location; zero if none within five years (such as February 30).
func (c *cronSpec) next(t time.Time) time.Time {
	t = t.Truncate(time.Minute).Add(time.Minute)
	limit := t.AddDate(5, 0, 0)
	for t.Before(limit) {
		switch {
		case c.month&(1<<uint(t.Month())) == 0:
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, t.Location())
		case !c.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, t.Location())
		case c.hour&(1<<uint(t.Hour())) == 0:
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, t.Location())
		case c.min&(1<<uint(t.Minute())) == 0:
			t = t.Add(time.Minute)
		default:
			return t
		}
	}
	return time.Time{}
}

package management_test

import (
	"context"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
)

// "A leading -, or order=desc, sorts descending" (docs/api.md): both
// together sort descending too, not ascending again.
func TestQueuesSortDescBothWays(t *testing.T) {
	e := newEnv(t)
	s := e.Session(core.SessionOptions{})
	for i, name := range []string{"one", "two", "three"} {
		for range i + 1 {
			e.Send(s, name, []byte("x"), nil)
		}
	}
	for _, q := range []string{"sort=-depth", "sort=depth&order=desc", "sort=-depth&order=desc"} {
		out := e.Want(200, "GET", "/api/v1/queues?"+q, nil)
		qs, _ := out["queues"].([]any)
		if len(qs) != 3 || qs[0].(map[string]any)["name"] != "three" || qs[2].(map[string]any)["name"] != "one" {
			t.Errorf("%s: %v", q, qs)
		}
	}
}

// An empty queue has no oldest message: sorted by oldestMessage it comes
// last in both directions (ascending put it first, as the zero time).
func TestQueuesSortOldestMessageEmptyLast(t *testing.T) {
	e := newEnv(t)
	s := e.Session(core.SessionOptions{})
	t0 := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	// "old" holds the oldest message, "new" a newer one; "a.empty" and
	// "z.empty" none (their names would put one first on a tie).
	for name, ts := range map[string]time.Time{"old": t0, "new": t0.Add(time.Minute)} {
		m := &core.Message{Address: name, RoutingType: core.Anycast, Body: []byte("x"), Timestamp: ts}
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a.empty", "z.empty"} {
		e.Want(201, "POST", "/api/v1/queues", map[string]any{"name": name})
	}
	for q, want := range map[string][]string{
		"sort=oldestMessage":             {"old", "new"},
		"sort=oldestMessage&order=asc":   {"old", "new"},
		"sort=-oldestMessage":            {"new", "old"},
		"sort=oldestMessage&order=desc":  {"new", "old"},
		"sort=-oldestMessage&order=desc": {"new", "old"},
	} {
		out := e.Want(200, "GET", "/api/v1/queues?"+q, nil)
		qs, _ := out["queues"].([]any)
		var names []string
		for _, x := range qs {
			names = append(names, x.(map[string]any)["name"].(string))
		}
		if len(names) != 4 || names[0] != want[0] || names[1] != want[1] {
			t.Errorf("%s: %v, want %v then the two empty queues", q, names, want)
		}
	}
	// A page past the queues with messages holds only empty ones.
	out := e.Want(200, "GET", "/api/v1/queues?sort=oldestMessage&offset=2&limit=2", nil)
	for _, x := range out["queues"].([]any) {
		if q := x.(map[string]any); q["depth"] != 0.0 {
			t.Errorf("second page of sort=oldestMessage holds %v (depth %v)", q["name"], q["depth"])
		}
	}
}

// The console's Replaced column sorts by the queues' last-value
// replacements (_AMQ_LVQ_NAME).
func TestQueuesSortByReplaced(t *testing.T) {
	e := newEnv(t)
	s := e.Session(core.SessionOptions{})
	for i, name := range []string{"one", "two", "three"} {
		for range i + 1 {
			e.Send(s, name, []byte("x"), map[string]any{core.PropLastValue: "k"})
		}
	}
	for q, want := range map[string][]string{"sort=replaced": {"one", "two", "three"}, "sort=-replaced": {"three", "two", "one"}} {
		out := e.Want(200, "GET", "/api/v1/queues?"+q, nil)
		var got []string
		var replaced []float64
		for _, x := range out["queues"].([]any) {
			got = append(got, x.(map[string]any)["name"].(string))
			replaced = append(replaced, x.(map[string]any)["replaced"].(float64))
		}
		if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Errorf("%s: %v (replaced %v), want %v", q, got, replaced, want)
		}
	}
}

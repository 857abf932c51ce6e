package management_test

import (
	"testing"

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

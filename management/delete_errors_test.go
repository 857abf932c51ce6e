package management_test

import (
	"strings"
	"testing"

	"github.com/junctionmq/junction/core"
)

// A deletion refused for consumers says so in an operator's words: the
// queue is a plain queue, not a "durable subscription"; and a 404 names
// what was not found.
func TestDeleteErrorsSayWhy(t *testing.T) {
	e := newEnv(t)
	e.Want(201, "POST", "/api/v1/queues", map[string]any{"name": "jobs"})
	s := e.Session(core.SessionOptions{})
	c, err := s.Subscribe(core.ConsumerOptions{Address: "jobs", RoutingType: core.Anycast, Handler: func(core.Delivery) {}})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/v1/queues/jobs", "/api/v1/addresses/jobs"} {
		msg, _ := e.Want(409, "DELETE", path, nil)["error"].(string)
		if !strings.Contains(msg, `"jobs" has consumers`) || strings.Contains(msg, "durable subscription") {
			t.Errorf("DELETE %s: %q", path, msg)
		}
		if strings.Contains(path, "addresses") && !strings.HasPrefix(msg, `the queue "jobs" of address "jobs" has consumers`) {
			t.Errorf("DELETE %s: %q does not name the queue", path, msg)
		}
	}
	c.Close()
	e.Want(204, "DELETE", "/api/v1/queues/jobs", nil)
	for _, path := range []string{"/api/v1/queues/jobs", "/api/v1/addresses/nope"} {
		msg, _ := e.Want(404, "DELETE", path, nil)["error"].(string)
		if want := path[strings.LastIndex(path, "/")+1:]; !strings.Contains(msg, `"`+want+`"`) {
			t.Errorf("DELETE %s: %q does not name %q", path, msg, want)
		}
	}
}

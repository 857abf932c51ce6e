package management_test

import (
	"strings"
	"testing"
)

// POST /queues with routingType multicast creates no queue: it answers
// the address, which now takes multicast sends, and not the anycast
// queue that happens to share its name.
func TestCreateMulticastAnswersTheAddress(t *testing.T) {
	e := newEnv(t)
	e.Want(201, "POST", "/api/v1/queues", map[string]any{"name": "jobs"})
	out := e.Want(201, "POST", "/api/v1/queues", map[string]any{"name": "jobs", "routingType": "multicast"})
	if out["name"] != "jobs" || out["multicast"] != true || out["anycast"] != true || out["routingType"] != nil {
		t.Errorf("multicast on an anycast address: %v", out)
	}
	out = e.Want(201, "POST", "/api/v1/queues", map[string]any{"name": "news", "routingType": "multicast"})
	if out["name"] != "news" || out["multicast"] != true || out["anycast"] != false {
		t.Errorf("multicast on a new address: %v", out)
	}
}

// POST /addresses without a routing type says it is required, not that
// it must be anycast or multicast "not \"\"".
func TestCreateAddressRoutingTypeRequired(t *testing.T) {
	e := newEnv(t)
	out := e.Want(400, "POST", "/api/v1/addresses", map[string]any{"name": "news"})
	if msg, _ := out["error"].(string); !strings.Contains(msg, "routingType is required") {
		t.Errorf("no routingType: %q", msg)
	}
	e.Want(400, "POST", "/api/v1/addresses", map[string]any{"name": "news", "routingType": "both"})
	e.Want(201, "POST", "/api/v1/queues", map[string]any{"name": "jobs"}) // optional here
}

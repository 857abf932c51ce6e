package management_test

import (
	"strings"
	"testing"
)

// The cluster's API on a single broker says it is not a cluster node,
// not that the path does not exist.
func TestClusterPathsOnSingleBroker(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v1/cluster"},
		{"POST", "/api/v1/cluster/members"},
		{"DELETE", "/api/v1/cluster/members/2"},
	} {
		var body any
		if c.method == "POST" {
			body = map[string]any{"id": 2, "address": "127.0.0.1:7102"}
		}
		out := e.Want(404, c.method, c.path, body)
		if msg, _ := out["error"].(string); !strings.Contains(msg, "not a cluster node") {
			t.Errorf("%s %s: %q", c.method, c.path, msg)
		}
	}
}

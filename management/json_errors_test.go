package management_test

import (
	"strings"
	"testing"
)

// A request body of the wrong shape is explained in JSON's terms, not
// with Go's type names (sendRequest.priority of type int).
func TestMalformedJSONInJSONTerms(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		path, body, want string
	}{
		{"/api/v1/send", `{"address": "x", "priority": "high"}`, `field "priority": a string where an integer is wanted`},
		{"/api/v1/send", `{"address": "x", "durable": "yes"}`, `field "durable": a string where true or false is wanted`},
		{"/api/v1/send", `[1]`, `the body is a list where an object is wanted`},
		{"/api/v1/queues", `{"name": 5}`, `field "name": a number where a string is wanted`},
		{"/api/v1/send", `{"address": "x", "colour": 1}`, `unknown field "colour"`},
	} {
		status, out := e.Do("POST", c.path, c.body)
		msg, _ := out["error"].(string)
		if status != 400 || !strings.Contains(msg, c.want) || strings.Contains(msg, "Go ") {
			t.Errorf("POST %s %s: %d %q, want %q", c.path, c.body, status, msg, c.want)
		}
	}
}

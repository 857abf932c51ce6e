package management_test

import (
	"strings"
	"testing"

	"github.com/junctionmq/junction/core"
)

// An XML body browsed through the API reads as sent: curl shows
// <order id="1"/>, not \u003corder id=\"1\"/\u003e.
func TestBrowseXMLBodyUnescaped(t *testing.T) {
	e := newEnv(t)
	s := e.Session(core.SessionOptions{})
	e.Send(s, "orders", []byte(`<order id="1">a & b</order>`), nil)
	status, raw, _ := e.Raw("GET", "/api/v1/queues/orders/messages", nil)
	if status != 200 || !strings.Contains(string(raw), `<order id=\"1\">a & b</order>`) {
		t.Fatalf("%d %s", status, raw)
	}
}

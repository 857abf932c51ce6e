package stomp_test

import (
	"strings"
	"testing"

	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

// A second consumer on a durable subscription is refused with an ERROR
// whose body says which subscription is in use, in core's words.
func TestDurableSubscriptionInUseError(t *testing.T) {
	tb := stomptest.Start(t, stomp.Config{})
	r := tb.Raw(t)
	r.Connect("client-id:auditor\n")
	r.Write("SUBSCRIBE\ndestination:/topic/events\nid:1\nactivemq.subscriptionName:audit\nreceipt:s\n\n\x00")
	if f := r.Frame(); stomptest.Header(f, "receipt-id") != "s" {
		t.Fatalf("got %q", f)
	}
	r.Write("SUBSCRIBE\ndestination:/topic/events\nid:2\nactivemq.subscriptionName:audit\nreceipt:s2\n\n\x00")
	f := r.Frame()
	if !strings.HasPrefix(f, "ERROR\n") || stomptest.Header(f, "message") != "subscribe failed" ||
		!strings.Contains(f, `core: subscription "auditor.audit" has a consumer already`) {
		t.Fatalf("second consumer of a durable subscription: got %q", f)
	}
}

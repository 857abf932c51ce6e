// Package stomp_test tests the STOMP front-end over a broker with a
// journal: package stomp may not import persistence, even in its tests.
package stomp_test

import (
	"strings"
	"testing"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/e2e/e2etest"
	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

// A persistent SEND while the store is over its disk limit gets an
// ERROR "disk full" and the connection is closed.
func TestDiskFullSendsError(t *testing.T) {
	tb := stomptest.StartWith(t, e2etest.DiskFull(t), stomp.Config{})
	e2etest.WaitDiskFull(t, tb.Core)
	r := tb.Raw(t)
	r.Connect("")
	r.Write("SEND\ndestination:/queue/orders\nreceipt:1\n\nnon-durable\x00")
	if f := r.Frame(); !strings.HasPrefix(f, "RECEIPT\n") {
		t.Fatalf("non-durable send: got %q", f)
	}
	r.Write("SEND\ndestination:/queue/orders\nreceipt:2\npersistent:true\n\ndurable\x00")
	f := r.Frame()
	if !strings.HasPrefix(f, "ERROR\n") || stomptest.Header(f, "message") != "disk full" || stomptest.Header(f, "receipt-id") != "2" {
		t.Fatalf("durable send: got %q, want ERROR disk full for receipt 2", f)
	}
	r.Closed()
	if got := tb.Core.DropStats()[core.RefusedDisk]; got != 1 {
		t.Fatalf("refused_disk_full = %d, want 1", got)
	}
}

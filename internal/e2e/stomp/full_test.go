// Package stomp_test tests the STOMP front-end over a broker with a
// journal: package stomp may not import persistence, even in its tests.
package stomp_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/persistence/journal"
	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

// A persistent SEND while the store is over its disk limit gets an
// ERROR "disk full" and the connection is closed.
func TestDiskFullSendsError(t *testing.T) {
	dir := t.TempDir()
	msgs, err := journal.Open(journal.Config{Dir: filepath.Join(dir, "journal"), FileSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { msgs.Close() })
	bindings, err := journal.Open(journal.Config{Dir: filepath.Join(dir, "bindings"), FileSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bindings.Close() })
	usage := func() (int64, int64, error) { return 2000, 1 << 40, nil }
	tb := stomptest.StartWith(t, core.Config{Messages: msgs, Bindings: bindings,
		Disk: core.DiskLimits{Usage: usage, MaxUsage: 1000, Interval: 5 * time.Millisecond}}, stomp.Config{})
	testserve.Eventually(t, "the disk limit to be seen", func() bool { return tb.Core.DiskFull() != "" })
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

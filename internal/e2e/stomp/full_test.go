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
)

// startBrokerConfig is startBroker with a whole broker configuration.
func startBrokerConfig(t *testing.T, bcfg core.Config) *testBroker {
	t.Helper()
	b, err := core.New(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := stomp.New(stomp.Config{}, b)
	t.Cleanup(func() { b.Close() })
	addr, _ := testserve.Serve(t, srv.ServeConn)
	return &testBroker{addr: addr, broker: b, srv: srv}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

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
	tb := startBrokerConfig(t, core.Config{Messages: msgs, Bindings: bindings,
		Disk: core.DiskLimits{Usage: usage, MaxUsage: 1000, Interval: 5 * time.Millisecond}})
	eventually(t, "the disk limit to be seen", func() bool { return tb.broker.DiskFull() != "" })
	r := tb.raw(t)
	r.connect("")
	r.write("SEND\ndestination:/queue/orders\nreceipt:1\n\nnon-durable\x00")
	if f := r.frame(); !strings.HasPrefix(f, "RECEIPT\n") {
		t.Fatalf("non-durable send: got %q", f)
	}
	r.write("SEND\ndestination:/queue/orders\nreceipt:2\npersistent:true\n\ndurable\x00")
	f := r.frame()
	if !strings.HasPrefix(f, "ERROR\n") || header(f, "message") != "disk full" || header(f, "receipt-id") != "2" {
		t.Fatalf("durable send: got %q, want ERROR disk full for receipt 2", f)
	}
	r.closed()
	if got := tb.broker.DropStats()[core.RefusedDisk]; got != 1 {
		t.Fatalf("refused_disk_full = %d, want 1", got)
	}
}

// Package amqp_test tests the AMQP front-end over a broker with a
// journal: package amqp may not import persistence, even in its tests.
package amqp_test

import (
	"path/filepath"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/amqp/amqptest"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/persistence/journal"
)

// diskFullConfig is a broker configuration with a journal whose disk
// limit is always exceeded: durable sends are refused once the broker
// has checked (waitDiskFull).
func diskFullConfig(t *testing.T) core.Config {
	t.Helper()
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
	return core.Config{Messages: msgs, Bindings: bindings,
		Disk: core.DiskLimits{Usage: usage, MaxUsage: 1000, Interval: 5 * time.Millisecond}}
}

func waitDiskFull(t *testing.T, b *core.Broker) {
	t.Helper()
	testserve.Eventually(t, "the disk limit to be seen", func() bool { return b.DiskFull() != "" })
}

// A durable send while the store is over its disk limit is rejected with
// amqp:resource-limit-exceeded; non-durable sends still go through.
func TestDiskFullRejectsDurableSends(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, diskFullConfig(t))
	waitDiskFull(t, tb.Core)
	snd := amqptest.NewSender(t, tb.Session(t, nil), "orders", nil)
	m := amqptest.Text("durable")
	m.Header = &goamqp.MessageHeader{Durable: true}
	amqptest.WantResourceLimit(t, snd.Send(amqptest.Ctx(t), m, nil))
	amqptest.Send(t, snd, amqptest.Text("non-durable"))
	if got := tb.Core.DropStats()[core.RefusedDisk]; got != 1 {
		t.Fatalf("refused_disk_full = %d, want 1", got)
	}
	if c := amqptest.ConnInfo(t, tb.Core); c.Refused != 1 {
		t.Fatalf("connection refused %d, want 1", c.Refused)
	}
}

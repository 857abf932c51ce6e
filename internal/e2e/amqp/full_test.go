// Package amqp_test tests the AMQP front-end over a broker with a
// journal: package amqp may not import persistence, even in its tests.
package amqp_test

import (
	"testing"

	goamqp "github.com/Azure/go-amqp"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/amqp/amqptest"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/e2e/e2etest"
)

// A durable send while the store is over its disk limit is rejected with
// amqp:resource-limit-exceeded; non-durable sends still go through.
func TestDiskFullRejectsDurableSends(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, e2etest.DiskFull(t))
	e2etest.WaitDiskFull(t, tb.Core)
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

package cluster

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
)

// TestClusterNoWaitSendsHeldOverBudget: a NoWait session (AMQP's, which
// cannot wait on its reading goroutine) pipelining durable sends past its
// group's part of the budget has them held on its own node, unconfirmed,
// instead of forwarded: the group stays near its part (AMQP then grants
// no more credit, as the sends stay unconfirmed). Once a consumer makes
// room every held send is confirmed, and all arrive in the order sent.
// Before, such sends were forwarded at once and the group took them over
// its limit: an AMQP producer filled it by its whole link credit.
func TestClusterNoWaitSendsHeldOverBudget(t *testing.T) {
	const budget = 1 << 20 // 512 KiB per group
	c := startClusterWith(t, 3, 2, func(cfg *Config) { cfg.Broker.MaxMemory = budget })
	c.waitBalanced() // no handover while it fills: a group's part counted twice would end the fill early
	prod, err := c.access[1].NewSession(core.SessionOptions{Protocol: "test", NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	held := func() int64 {
		var used int64
		for _, a := range c.access {
			used += a.Memory().Used
		}
		return used
	}
	var mu sync.Mutex
	confirmed, failed := 0, 0
	send := func(i int) {
		body := make([]byte, 1024)
		copy(body, fmt.Sprint(i))
		m := &core.Message{Address: "nowait", RoutingType: core.Anycast, Durable: true, Body: body, Priority: core.DefaultPriority}
		prod.SendAsync(m, func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				return
			}
			confirmed++
		})
	}
	count := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return confirmed, failed
	}
	// Fill the group past its part, a send at a time, each confirmed
	// before the next, until the answer to one said full.
	n := 0
	deadline := time.Now().Add(20 * time.Second)
	for !c.access[1].Blocked("nowait") {
		send(n)
		n++
		for {
			if ok, bad := count(); ok+bad == n {
				break
			}
			if time.Now().After(deadline) {
				ok, bad := count()
				t.Fatalf("the group did not fill: %d sent, %d confirmed, %d failed, %d bytes held", n, ok, bad, held())
			}
			time.Sleep(time.Millisecond)
		}
	}
	// 300 more sends (a link's credit) are held, not forwarded.
	before, _ := count()
	const more = 300
	for i := range more {
		send(n + i)
	}
	n += more
	time.Sleep(time.Second)
	ok, bad := count()
	if bad != 0 || ok-before > 2 {
		t.Fatalf("%d of %d sends past the group's part confirmed, %d failed; want them held", ok-before, more, bad)
	}
	if used := held(); used > budget/2+64<<10 {
		t.Fatalf("the group holds %d bytes with the sends held; want about its part, %d", used, budget/2)
	}
	// A consumer makes room: every send is confirmed, in order (a
	// delivery made again, flagged, after a lost acknowledgement aside).
	cs := session(t, c.access[2], "")
	cn, col := subscribe(t, cs, core.ConsumerOptions{Address: "nowait", RoutingType: core.Anycast, Credit: 100})
	for i := 0; i < n; {
		var d core.Delivery
		select {
		case d = <-col.ch:
		case <-time.After(10 * time.Second):
			ok, bad := count()
			t.Fatalf("delivery %d of %d not within 10 s; %d confirmed, %d failed, %d bytes held", i, n, ok, bad, held())
		}
		cn.Ack(d.ID)
		cn.Flow(1)
		got, _, _ := strings.Cut(string(d.Message.Body), "\x00")
		if seq, err := strconv.Atoi(got); err == nil && seq < i && d.Redelivered() {
			continue
		}
		if got != fmt.Sprint(i) {
			t.Fatalf("delivery %d is message %q (redelivered %v)", i, got, d.Redelivered())
		}
		i++
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		ok, bad := count()
		if ok == n && bad == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sends confirmed, %d failed, once consumed", ok, n, bad)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
)

// TestClusterMemoryBudgetShared: the node's memory budget is shared by
// its groups, since every node holds every group's live messages: one
// group's queue is refused (FAIL) once it holds about its share, half
// the budget with two groups, not the whole of it.
func TestClusterMemoryBudgetShared(t *testing.T) {
	const budget = 1 << 20
	fail := string(core.FullFail)
	c := startClusterWith(t, 3, 2, func(cfg *Config) {
		cfg.Broker.MaxMemory = budget
		cfg.Broker.AddressSettings = []core.AddressSettings{{Match: "#", FullPolicy: &fail}}
	})
	s := session(t, c.access[0], "")
	body := make([]byte, 1024)
	n := 0
	for ; n < 5000; n++ {
		m := &core.Message{Address: "mem", RoutingType: core.Anycast, Durable: true, Body: body, Priority: core.DefaultPriority}
		err := s.Send(context.Background(), m)
		if errors.Is(err, core.ErrAddressFull) {
			break
		}
		if err != nil {
			t.Fatalf("send %d: %v", n, err)
		}
	}
	// Each message counts its body, its metadata and an overhead
	// (core/memory.go): more than its 1 KiB body.
	if n*len(body) > budget/2 || n < budget/2/4096 {
		t.Fatalf("%d messages of 1 KiB accepted before the queue was full; want fewer than %d (half the budget: 2 groups)", n, budget/2/len(body))
	}
	// The node reports what its groups hold against its budget.
	var used int64
	var limit int64
	for i := range c.access {
		st := c.access[i].Memory()
		used += st.Used
		limit = st.Max
	}
	if limit != budget || used < int64(n*len(body)) || used > budget {
		t.Fatalf("the nodes report %d bytes used of %d; want at least the %d bytes of bodies, within %d", used, limit, n*len(body), budget)
	}
	t.Logf("%d messages of 1 KiB accepted (budget %d bytes over 2 groups)", n, budget)
}

// TestClusterProducersWaitOverBudget: with the default full policy
// (PAGE, which a group broker cannot page to), a producer sending durable
// messages past its group's part of the budget waits on its own node,
// as on a single broker, instead of the group holding ever more: the
// backlog stays near the budget; it goes on once a consumer makes room.
func TestClusterProducersWaitOverBudget(t *testing.T) {
	const budget = 1 << 20 // 512 KiB per group
	c := startClusterWith(t, 3, 2, func(cfg *Config) { cfg.Broker.MaxMemory = budget })
	prod := session(t, c.access[1], "")
	var sent atomic.Int64
	stopped := make(chan error, 1)
	go func() {
		body := make([]byte, 1024)
		for range 3000 {
			m := &core.Message{Address: "wait", RoutingType: core.Anycast, Durable: true, Body: body, Priority: core.DefaultPriority}
			if err := prod.Send(context.Background(), m); err != nil {
				stopped <- err
				return
			}
			sent.Add(1)
		}
		stopped <- nil
	}()
	held := func() int64 {
		var used int64
		for _, a := range c.access {
			used += a.Memory().Used
		}
		return used
	}
	// The group fills to about its part of the budget...
	deadline := time.Now().Add(20 * time.Second)
	for held() < budget/2-4<<10 {
		if time.Now().After(deadline) || sent.Load() == 3000 {
			t.Fatalf("the group did not fill: %d of 3000 sent, %d bytes held (its part of the budget: %d)", sent.Load(), held(), budget/2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// ...and then the producer waits: at most the sends under way when
	// it filled go on.
	n := sent.Load()
	time.Sleep(time.Second)
	if more := sent.Load() - n; more > 16 {
		t.Fatalf("the producer did not wait: %d more sent in the second after the group filled (%d bytes held, its part %d)", more, held(), budget/2)
	}
	n = sent.Load()
	if used := held(); used > budget/2+64<<10 {
		t.Fatalf("the producer waits after %d messages with %d bytes held; want about the group's part, %d", n, used, budget/2)
	}
	// A consumer makes room: the producer goes on.
	cs := session(t, c.access[2], "")
	cn, col := subscribe(t, cs, core.ConsumerOptions{Address: "wait", RoutingType: core.Anycast, Credit: 200})
	for range 200 {
		cn.Ack(col.next(t).ID)
	}
	deadline = time.Now().Add(10 * time.Second)
	for sent.Load() < n+100 {
		if time.Now().After(deadline) {
			t.Fatalf("the producer did not go on after 200 messages were consumed: %d sent, was %d", sent.Load(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	prod.Close()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting producer did not end with its session")
	}
}

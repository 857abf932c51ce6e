package cluster

import (
	"context"
	"errors"
	"testing"

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

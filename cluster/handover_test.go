package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
)

// A leader handing its group to another node (balanceLeaders) is
// replaced while it still hears from a majority: raft's MsgTimeoutNow
// makes the target campaign at once. So from the moment the handover
// starts, what the old leader delivers is flagged, and the new leader
// serves no earlier than a lease later, so that what the old one handed
// out unflagged before has arrived before the same messages come again,
// flagged (lease.go).
func TestClusterHandoverFlagsAndWaits(t *testing.T) {
	c := startCluster(t, 3, 1)
	// Not before the group is with its preferred node: balanceLeaders'
	// own handover would rightly flag the first delivery (seen under
	// -race in a loaded run).
	c.waitBalanced()
	const addr = "handover"
	a := c.leaderOf(addr)
	b := (a + 1) % 3
	prod := session(t, c.access[(a+2)%3], "")
	const sent = 5
	for i := range sent {
		m := &core.Message{Address: addr, RoutingType: core.Anycast, Durable: true, Body: []byte(fmt.Sprint(i)), Priority: core.DefaultPriority}
		if err := prod.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	// A consumer on the leader's node takes one message: a first
	// delivery, unflagged.
	cons, col := subscribe(t, session(t, c.access[a], ""), core.ConsumerOptions{Address: addr, RoutingType: core.Anycast, Credit: 1})
	// A node whose Raft loop ran late (the race detector on a busy
	// machine) rightly doubts its lease and flags (lease.go).
	if d := col.next(t); d.Redelivered() && c.nodes[a].stalledUntil.Load() == 0 {
		t.Fatalf("%q flagged before the handover", d.Message.Body)
	}
	ga, gb := c.nodes[a].groups[0], c.nodes[b].groups[0]
	start := time.Now()
	var sure bool
	if err := c.nodes[a].doLoop(func() {
		ga.transferLeader(c.nodes[b].cfg.NodeID)
		sure = ga.sure()
	}); err != nil {
		t.Fatal(err)
	}
	if sure {
		t.Fatal("the group is still sure on its leader once it is handing it over")
	}
	// More credit at once: whoever delivers now (the old leader before it
	// steps down, or the new one) must flag every message.
	cons.Flow(2 * sent)
	lease := c.nodes[b].lease()
	deadline := time.Now().Add(10 * time.Second)
	for !gb.isActive.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the target did not serve the group within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	if took := time.Since(start); took < lease {
		t.Fatalf("the new leader served %v after the handover began, before a lease (%v)", took, lease)
	}
	got := map[string]int{}
	for len(got) < sent {
		d := col.next(t)
		if !d.Redelivered() {
			t.Fatalf("%q delivered unflagged after the handover began", d.Message.Body)
		}
		got[string(d.Message.Body)]++
		_ = cons.Ack(d.ID) // one of the old leader's may be stale: ignored
	}
	if ga.transferring.Load() {
		t.Fatal("the old leader still says it is handing the group over")
	}
}

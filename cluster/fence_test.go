package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
)

// A node resets the connections holding deliveries of a source it is
// no longer sure of once it has lost the majority's contact, and only
// then: not in a healthy cluster, not when a group's leader alone is
// gone while the node leads a group of its own (its followers answer).
func TestClusterFence(t *testing.T) {
	// A lease of 250ms: a loop a little late under the race detector on
	// a busy machine does not flag the first deliveries.
	c := startClusterWith(t, 3, 3, func(cfg *Config) { cfg.Tick = 50 * time.Millisecond })
	// Each node leads a group once the leaders are spread.
	deadline := time.Now().Add(15 * time.Second)
	for {
		lead := map[uint64]bool{}
		for _, g := range c.nodes[0].groups {
			lead[g.lead.Load()] = true
		}
		if len(lead) == 3 && !lead[0] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the groups' leaders were not spread over the nodes within 15s: %v", lead)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.waitLeaders()
	l, ci, x, aborts := fenceSetup(t, c)
	n := c.nodes[ci]
	lease := n.lease()
	quiet := func(what string) {
		t.Helper()
		time.Sleep(5 * lease)
		if a, f := aborts.Load(), n.Status().FencedConnections; a != 0 || f != 0 {
			t.Fatalf("%s: %d aborts, %d fenced connections", what, a, f)
		}
	}
	quiet("healthy cluster")
	// The group's leader goes: the node still hears from a majority
	// (itself and x), what it wrote reached its client.
	c.crash(l)
	quiet("the leader gone, the majority in touch")
	// Now alone: its lease runs out, and the connection holding the three
	// deliveries is reset.
	c.crash(x)
	deadline = time.Now().Add(lease + 2*time.Second)
	for aborts.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no abort within %v of losing the majority", lease+2*time.Second)
		}
		time.Sleep(lease / 10)
	}
	time.Sleep(lease)
	if a, f := aborts.Load(), n.Status().FencedConnections; a != 1 || f != 1 {
		t.Fatalf("after losing the majority: %d aborts, %d fenced connections; want 1 each", a, f)
	}
}

// A node that leads no group hears no Raft message between the loss of
// its groups' leader and the next election (its fellow follower has
// nothing to tell it): the forwarding lane's pings show the fence that
// the node is still in touch with a majority, and it resets nothing.
func TestClusterFenceSparesTheFollowersOfALostLeader(t *testing.T) {
	// The default tick: a lease of 500ms, pings every 125ms.
	c := startCluster(t, 3, 1)
	c.waitLeaders()
	l, ci, _, aborts := fenceSetup(t, c)
	n := c.nodes[ci]
	c.crash(l)
	// Until a new leader is elected (one to two election timeouts, each
	// four leases) and some more.
	time.Sleep(12 * n.lease())
	if a, f := aborts.Load(), n.Status().FencedConnections; a != 0 || f != 0 {
		t.Fatalf("the leader gone, the majority in touch: %d aborts, %d fenced connections", a, f)
	}
	if g := n.groups[0]; g.lead.Load() == 0 {
		t.Fatalf("no new leader after %v", 12*n.lease())
	}
}

// fenceSetup sends three messages to an address through one node (x)
// and has a session on another (ci), neither the leader (l) of its
// group, take them: three unflagged deliveries held, the session's
// connection aborts counted. A delivery is flagged redelivered only
// after a leader change or a link reset (a machine too busy to keep the
// cluster healthy: -race on two loaded cores): then it starts over, on
// another address, at most three times.
func fenceSetup(t *testing.T, c *testCluster) (l, ci, x int, aborts *atomic.Int32) {
	t.Helper()
	for try := 0; ; try++ {
		before := c.disturbances()
		addr := fmt.Sprintf("fenced.%d", try)
		l = c.leaderOf(addr)
		ci, x = (l+1)%3, (l+2)%3
		prod := session(t, c.access[x], "")
		for i := range 3 {
			m := &core.Message{Address: addr, RoutingType: core.Anycast, Durable: true, Body: []byte(fmt.Sprint(i)), Priority: core.DefaultPriority}
			if err := prod.Send(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
		aborts = new(atomic.Int32)
		s, err := c.access[ci].NewSession(core.SessionOptions{Protocol: "test", Abort: func() { aborts.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		_, col := subscribe(t, s, core.ConsumerOptions{Address: addr, RoutingType: core.Anycast, Credit: 3})
		flagged := ""
		for range 3 {
			if d := col.next(t); d.Redelivered() && flagged == "" {
				flagged = string(d.Message.Body)
			}
		}
		switch after := c.disturbances(); {
		case flagged == "":
			return l, ci, x, aborts
		case after == before:
			t.Fatalf("%q flagged in a healthy cluster", flagged)
		case try == 2:
			t.Fatalf("%q flagged: the cluster had leader changes or link resets in each of three tries", flagged)
		default:
			t.Logf("%q flagged after a leader change or link reset (%d before, %d after): starting over", flagged, before, after)
			s.Close()
		}
	}
}

// disturbances counts the leader changes and link resets the cluster's
// nodes have seen.
func (c *testCluster) disturbances() uint64 {
	var n uint64
	for _, node := range c.nodes {
		if node == nil {
			continue
		}
		st := node.Status()
		n += st.LinkResets
		for _, g := range st.Groups {
			n += g.LeaderChanges
		}
	}
	return n
}

package transport

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/faultproxy"
)

// proxied starts nodes 1..3 whose every link goes through a fault proxy.
func proxied(t *testing.T) (*faultproxy.Net, map[uint64]*testNode) {
	t.Helper()
	fn, err := faultproxy.NewNet(1, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	ls := map[uint64]net.Listener{}
	for id := uint64(1); id <= 3; id++ {
		ls[id] = listen(t)
		fn.SetTarget(id, ls[id].Addr().String())
	}
	nodes := map[uint64]*testNode{}
	for id := uint64(1); id <= 3; id++ {
		nodes[id] = startNode(t, id, ls[id], fn.Peers(id), nil)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
		fn.Close()
	})
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				waitConnected(t, a, b)
			}
		}
	}
	return fn, nodes
}

// blocked sends marked frames from a to b and checks that none arrives
// while the positive probes around it show the rest of the mesh works.
func blocked(t *testing.T, a, b *testNode) {
	t.Helper()
	mark := []byte(fmt.Sprintf("blocked %d→%d %d", a.id, b.id, time.Now().UnixNano()))
	for range 5 {
		a.Send(b.id, LaneRaft, mark)
	}
	time.Sleep(300 * time.Millisecond) // a negative check: nothing may arrive in this window
	for _, f := range b.sink.get(a.id, LaneRaft) {
		if bytes.Equal(f, mark) {
			t.Fatalf("a frame from %d reached %d across a cut", a.id, b.id)
		}
	}
}

func TestCutsThroughFaultProxies(t *testing.T) {
	fn, nodes := proxied(t)
	all := func(t *testing.T, except ...[2]uint64) {
		t.Helper()
		cut := map[[2]uint64]bool{}
		for _, e := range except {
			cut[e] = true
		}
		for _, a := range nodes {
			for _, b := range nodes {
				if a != b && !cut[[2]uint64{a.id, b.id}] {
					probe(t, a, b, LaneRaft)
				}
			}
		}
		for _, e := range except {
			blocked(t, nodes[e[0]], nodes[e[1]])
		}
	}
	all(t)

	t.Run("one way", func(t *testing.T) {
		// Node 1's frames to 2 vanish; 2's to 1 still arrive, since
		// they travel on 2's own connection.
		fn.OneWay(1, 2)
		all(t, [2]uint64{1, 2})
		fn.Heal()
		all(t)
	})
	t.Run("partition", func(t *testing.T) {
		fn.Partition([]uint64{1}, []uint64{2, 3})
		all(t, [2]uint64{1, 2}, [2]uint64{2, 1}, [2]uint64{1, 3}, [2]uint64{3, 1})
		fn.Heal()
		all(t)
	})
	t.Run("reset", func(t *testing.T) {
		// A reset link is noticed: the link goes down, sends drop and
		// OnUnreachable fires, then it comes back on its own.
		before := nodes[3].unreachCount(1)
		fn.Proxy(3, 1).Reset()
		waitFor(t, 10*time.Second, "node 3's link to 1 down", func() bool { return !nodes[3].lane(1, LaneRaft).Connected })
		waitFor(t, 10*time.Second, "OnUnreachable(1) at node 3", func() bool {
			nodes[3].Send(1, LaneRaft, []byte("x"))
			return nodes[3].unreachCount(1) > before
		})
		fn.Proxy(3, 1).Pass()
		all(t)
	})
}

//go:build linux

package transport

import (
	"testing"

	"github.com/junctionmq/junction/internal/netns"
)

// TestPartitionInNamespaces runs three nodes, each listening and dialling
// inside its own network namespace, and cuts them with packet filters:
// real partitions, not a proxy. It needs root (netns.Setup skips
// otherwise).
func TestPartitionInNamespaces(t *testing.T) {
	n := netns.Setup(t, "", 1, 2, 3)
	const port = 7100
	nodes := map[uint64]*testNode{}
	for id := uint64(1); id <= 3; id++ {
		l, err := n.Listen(id, n.Addr(id, port))
		if err != nil {
			t.Fatal(err)
		}
		peers := map[uint64]string{}
		for p := uint64(1); p <= 3; p++ {
			if p != id {
				peers[p] = n.Addr(p, port)
			}
		}
		nodes[id] = startNode(t, id, l, peers, func(c *Config) { c.Dial = n.DialFunc(id) })
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				waitConnected(t, a, b)
				probe(t, a, b, LaneRaft)
			}
		}
	}

	if err := n.Isolate(1); err != nil {
		t.Fatal(err)
	}
	probe(t, nodes[2], nodes[3], LaneRaft)
	probe(t, nodes[3], nodes[2], LaneRaft)
	blocked(t, nodes[1], nodes[2])
	blocked(t, nodes[3], nodes[1])

	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				probe(t, a, b, LaneRaft)
			}
		}
	}

	if err := n.OneWay(2, 3); err != nil {
		t.Fatal(err)
	}
	probe(t, nodes[3], nodes[2], LaneRaft)
	blocked(t, nodes[2], nodes[3])
}

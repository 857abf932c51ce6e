package cluster

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/junctionmq/junction/cluster/transport"
)

// dropRPC is a node's transport that refuses its forwarding frames to
// one peer while drop is set, as the transport does while that lane's
// connection is not up yet (a node starting: its peer's dialer backs off
// up to a second between attempts, lane by lane).
type dropRPC struct {
	Transport
	to      uint64
	drop    atomic.Bool
	dropped atomic.Int32 // answers (kResult) dropped
}

func (d *dropRPC) Send(to uint64, lane transport.Lane, frame []byte) bool {
	if to == d.to && lane == transport.LaneRPC && d.drop.Load() {
		if len(frame) > 0 && msgKind(frame[0]) == kResult {
			d.dropped.Add(1)
		}
		return false
	}
	return d.Transport.Send(to, lane, frame)
}

// TestFirstAnswerLostIsNotWaitedFor: node 1 asks node 2 (a group's
// leader) a question before it has ever heard from node 2 on the
// forwarding lane, and node 2's answer is dropped (its connection to
// node 1 not up yet). Node 2 resets the link on its side and starts a
// new epoch; node 1, hearing that epoch first, must see that frames
// before it were lost and fail the question (which is asked again), not
// wait for the request timeout: the ~10 s stall "no answer from node 2
// within 10s" seen at start (the MQTT front-end's restore asking every
// group for its record holders).
func TestFirstAnswerLostIsNotWaitedFor(t *testing.T) {
	var d2 *dropRPC
	c := startClusterWith(t, 3, 3, func(cfg *Config) {
		cfg.LeaderWait = 3 * time.Second
		if cfg.NodeID == 2 {
			cfg.transport = func(n *Node) (Transport, error) {
				tr, err := n.newTransport(n)
				if err != nil {
					return nil, err
				}
				d2 = &dropRPC{Transport: tr, to: 1}
				d2.drop.Store(true)
				return d2, nil
			}
		}
	})
	c.waitBalanced() // group 2 led by node 2
	n1 := c.nodes[0]
	// Node 1 has heard nothing from node 2 on the forwarding lane (its
	// pings were dropped): make sure it does not reset for silence in
	// the middle of the test.
	p := n1.links.peer(2)
	p.mu.Lock()
	p.lastHeard = time.Now().Add(time.Hour)
	heard := p.inEpoch
	p.mu.Unlock()
	if heard != 0 {
		t.Fatalf("node 1 heard from node 2 (epoch %d) although its frames were dropped", heard)
	}

	before := d2.dropped.Load()
	go func() {
		// Let node 2's answer be dropped, then its link come up.
		deadline := time.Now().Add(5 * time.Second)
		for d2.dropped.Load() == before && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		d2.drop.Store(false)
	}()
	t0 := time.Now()
	_, err := n1.access.ask(2, catRoutingTypes, "x")
	took := time.Since(t0)
	t.Logf("asked group 2 in %v: %v", took, err)
	if took > 3*time.Second {
		t.Fatalf("node 1 waited %v for an answer node 2 had lost (%v)", took, err)
	}
	if err != nil {
		t.Fatalf("the question, asked again, failed: %v", err)
	}
	if d2.dropped.Load() == before {
		t.Fatal("node 2's answer was never dropped: the test did not test the lost first answer")
	}
}

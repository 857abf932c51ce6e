package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
)

// TestClusterLogBoundedByBytes: a group whose entries are large takes
// its snapshots by size, long before SnapshotEntries, so that the log
// each node keeps in memory stays within the catch-up bound (16 MiB)
// plus SnapshotBytes, not the whole of what was sent (40 MiB here); the
// nodes agree, and a consumer reads every message.
func TestClusterLogBoundedByBytes(t *testing.T) {
	const snapBytes = 1 << 20
	c := startClusterWith(t, 3, 1, func(cfg *Config) {
		cfg.SnapshotEntries = 1 << 30
		cfg.SnapshotBytes = snapBytes
	})
	s := session(t, c.access[0], "")
	const size, n = 256 << 10, 160 // 40 MiB
	for i := range n {
		body := make([]byte, size)
		body[0] = byte(i)
		m := &core.Message{Address: "big", RoutingType: core.Anycast, Durable: true, Body: body, Priority: core.DefaultPriority}
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	cn, col := subscribe(t, s, core.ConsumerOptions{Address: "big", RoutingType: core.Anycast, Credit: 20})
	// In order, each once; a message again only flagged redelivered and
	// only after a leader change (on a loaded machine the leader can lose
	// its quorum while acknowledgements are on their way: those not
	// committed come again, as at-least-once delivery has it).
	again := 0
	for next := 0; next < n; {
		d := col.next(t)
		if len(d.Message.Body) != size {
			t.Fatalf("message %d: %d bytes", next, len(d.Message.Body))
		}
		switch i := int(d.Message.Body[0]); {
		case i < next && d.Redelivered():
			again++
		case i == next:
			next++
		default:
			t.Fatalf("message %d: got %d (redelivered %v)", next, i, d.Redelivered())
		}
		cn.Ack(d.ID)
		cn.SetCredit(20)
	}
	if again > 0 && c.disturbances() == 0 {
		t.Fatalf("%d messages delivered again in a healthy cluster", again)
	}
	if again > 0 {
		t.Logf("%d messages delivered again, flagged, after a leader change", again)
	}
	c.sameState(20 * time.Second)
	// Every node applies every entry and snapshots on its own: wait for
	// the slowest to have compacted.
	const bound = 16<<20 + snapBytes + 512<<10 // catch-up + one snapshot's worth + an entry
	deadline := time.Now().Add(20 * time.Second)
	for i, nd := range c.nodes {
		for {
			g := nd.rlog.Stats().Groups[0]
			if g.SnapshotIndex > 0 && g.Bytes <= bound {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: snapshot index %d, %d bytes of log held (bound %d)", i+1, g.SnapshotIndex, g.Bytes, bound)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

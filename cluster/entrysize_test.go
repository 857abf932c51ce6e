package cluster

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/junctionmq/junction/core"
)

// A transaction larger than the Raft log takes in one entry is refused,
// saying so, and costs nobody else anything: on the leader (its own
// node's client) before it is sent to anyone, which every follower would
// have refused to save; from another node by the leader as well when
// the forwarding link can carry it, and on the client's own node when it
// cannot, before it is framed: the link between the two nodes is not
// reset (which would fail every operation in flight on it). Every node
// goes on serving.
func TestClusterRefusesAnOversizedEntry(t *testing.T) {
	c := startClusterWith(t, 3, 1, func(cfg *Config) {
		cfg.MaxMessageBytes, cfg.MaxEntryBytes = 64<<10, 16<<10
	})
	c.waitLeaders()
	const addr = "big"
	leader := c.leaderOf(addr)
	other := (leader + 1) % len(c.nodes)
	resets := func() (n uint64) {
		for _, x := range c.nodes {
			n += x.Status().LinkResets
		}
		return n
	}
	before := resets()
	body := bytes.Repeat([]byte("x"), 60<<10) // one fits an entry, two do not
	commit := func(node, messages int) error {
		s := session(t, c.access[node], "")
		tx, err := s.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for range messages {
			if err := tx.Send(&core.Message{Address: addr, RoutingType: core.Anycast, Durable: true, Body: body, Priority: core.DefaultPriority}); err != nil {
				t.Fatal(err)
			}
		}
		return tx.Commit(context.Background())
	}
	for _, tc := range []struct {
		what           string
		node, messages int
	}{
		{"on the leader's node", leader, 10},
		{"forwarded (the leader refuses it)", other, 2},
		{"too large to forward (refused before it is sent)", other, 10},
	} {
		// Refused for good (not "unavailable": trying again cannot help),
		// saying why; the text says the size.
		err := commit(tc.node, tc.messages)
		if err == nil || errors.Is(err, core.ErrUnavailable) || !strings.Contains(err.Error(), "over the limit") {
			t.Fatalf("%s: commit of %d KiB: %v, want a refusal for its size", tc.what, tc.messages*60, err)
		}
		t.Logf("%s: %v", tc.what, err)
	}
	if err := commit(other, 10); !errors.Is(err, core.ErrTooLarge) {
		t.Fatalf("a transaction too large to forward: %v, want core.ErrTooLarge", err)
	}
	if n := resets() - before; n != 0 {
		t.Fatalf("%d forwarding links reset by the refusals, want none", n)
	}
	// Every node still serves: a send through each is confirmed, and all
	// three are delivered.
	for i := range c.nodes {
		p := session(t, c.access[i], "")
		m := &core.Message{Address: addr, RoutingType: core.Anycast, Durable: true, Body: []byte{byte('0' + i)}, Priority: core.DefaultPriority}
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatalf("send through node %d after the refusals: %v", i+1, err)
		}
	}
	for i, n := range c.nodes {
		select {
		case <-n.Failed():
			t.Fatalf("node %d stopped: %v", i+1, n.Err())
		default:
		}
	}
	_, col := subscribe(t, session(t, c.access[other], ""), core.ConsumerOptions{Address: addr, RoutingType: core.Anycast, Credit: 10})
	got := map[string]bool{}
	for range 3 {
		got[string(col.next(t).Message.Body)] = true
	}
	if len(got) != 3 {
		t.Fatalf("delivered %v, want the three small messages", got)
	}
}

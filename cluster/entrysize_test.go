package cluster

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/junctionmq/junction/core"
)

// A transaction larger than the Raft log takes in one entry is refused
// on the leader (core.ErrTooLarge), before it is sent to anyone: every
// node goes on (had the followers received it, each would have stopped
// when saving it).
func TestClusterRefusesAnOversizedEntry(t *testing.T) {
	c := startClusterWith(t, 3, 1, func(cfg *Config) {
		cfg.MaxMessageBytes, cfg.MaxEntryBytes = 64<<10, 16<<10
	})
	c.waitLeaders()
	const addr = "big"
	// Through the leader's own node: from another one the transaction
	// would go over the forwarding link, whose frame limit (one message)
	// it exceeds first.
	s := session(t, c.access[c.leaderOf(addr)], "")
	tx, err := s.Begin()
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 60<<10) // each fits; the ten together do not
	for range 10 {
		if err := tx.Send(&core.Message{Address: addr, RoutingType: core.Anycast, Durable: true, Body: body, Priority: core.DefaultPriority}); err != nil {
			t.Fatal(err)
		}
	}
	// Refused for good (not "unavailable": trying again cannot help),
	// saying why; the sentinel crossing from the group broker is its
	// journal's (ErrPersistence), the text says the size.
	if err := tx.Commit(context.Background()); err == nil || errors.Is(err, core.ErrUnavailable) || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("commit of 600 KiB in one entry: %v, want a refusal for its size", err)
	}
	// Every node still serves: a send through each is confirmed, and all
	// three are delivered.
	for i := range c.nodes {
		p := session(t, c.access[i], "")
		m := &core.Message{Address: addr, RoutingType: core.Anycast, Durable: true, Body: []byte{byte('0' + i)}, Priority: core.DefaultPriority}
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatalf("send through node %d after the refusal: %v", i+1, err)
		}
	}
	for i, n := range c.nodes {
		select {
		case <-n.Failed():
			t.Fatalf("node %d stopped: %v", i+1, n.Err())
		default:
		}
	}
	_, col := subscribe(t, session(t, c.access[0], ""), core.ConsumerOptions{Address: addr, RoutingType: core.Anycast, Credit: 10})
	got := map[string]bool{}
	for range 3 {
		got[string(col.next(t).Message.Body)] = true
	}
	if len(got) != 3 {
		t.Fatalf("delivered %v, want the three small messages", got)
	}
}

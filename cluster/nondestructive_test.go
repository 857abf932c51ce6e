package cluster

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
)

// A non-destructive last-value queue on a cluster: consumers on every
// node read the same latest values, an ack removes nothing, and the
// values survive the crash of the queue's group leader (its replicas
// hold them).
func TestClusterNonDestructiveLastValues(t *testing.T) {
	nd := true
	c := startClusterWith(t, 3, 2, func(cfg *Config) {
		cfg.Broker.AddressSettings = []core.AddressSettings{{Match: "nd.#", NonDestructive: &nd}}
	})
	c.waitBalanced()
	const addr = "nd.prices"
	l := c.leaderOf(addr)
	prod := session(t, c.access[(l+1)%3], "")
	for _, kv := range []string{"a=1", "b=1", "a=2"} {
		k, _, _ := strings.Cut(kv, "=")
		m := &core.Message{Address: addr, RoutingType: core.Anycast, Durable: true, Priority: core.DefaultPriority,
			Body: []byte(kv), Properties: map[string]any{core.PropLastValue: k}}
		if err := prod.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"b=1", "a=2"}
	read := func(i int, ack bool) []string {
		t.Helper()
		s := session(t, c.access[i], "")
		cn, col := subscribe(t, s, core.ConsumerOptions{Address: addr, RoutingType: core.Anycast, Credit: 10})
		var got []string
		for range len(want) {
			d := col.next(t)
			if ack {
				if err := cn.Ack(d.ID); err != nil {
					t.Fatal(err)
				}
			}
			got = append(got, string(d.Message.Body))
		}
		select {
		case d := <-col.ch:
			t.Fatalf("node %d: one more than %v: %q", i+1, got, d.Message.Body)
		case <-time.After(200 * time.Millisecond):
		}
		cn.Close()
		return got
	}
	for i := range 3 {
		if got := read(i, true); !slices.Equal(got, want) {
			t.Fatalf("consumer on node %d got %q, want %q", i+1, got, want)
		}
	}
	c.crash(l)
	c.waitLeaders()
	for i := range 3 {
		if i == l {
			continue
		}
		if got := read(i, false); !slices.Equal(got, want) {
			t.Fatalf("after the crash of node %d, consumer on node %d got %q, want %q", l+1, i+1, got, want)
		}
	}
}

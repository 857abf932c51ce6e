package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
)

// Diverts of the nodes' configuration apply where a send enters the
// cluster: a copy (or, exclusive, the message itself) goes to the group
// of its forwarding address, durable and confirmed like any send, with
// the original address in _AMQ_ORIG_ADDRESS; a selector picks what is
// diverted. Every address here is in a group of its own, so each copy
// crosses groups.
func TestClusterDiverts(t *testing.T) {
	const orders, audit, raw, clean = "orders", "audit", "raw", "clean"
	c := startClusterWith(t, 3, 4, func(cfg *Config) {
		cfg.Broker.Diverts = []core.Divert{
			{Name: "copy", Address: orders, ForwardingAddress: audit},
			{Name: "move", Address: raw, ForwardingAddress: clean, Exclusive: true, Filter: "kind = 'x'"},
		}
	})
	c.waitBalanced()
	var groups []uint64
	for _, a := range []string{orders, audit, raw, clean} {
		groups = append(groups, c.nodes[0].groupOf(a))
	}
	slices.Sort(groups)
	if len(slices.Compact(groups)) < 3 {
		t.Fatalf("the test's addresses share groups: %v", groups)
	}
	for _, q := range []string{orders, audit, raw, clean} {
		if err := c.access[0].CreateQueue(q, core.Anycast); err != nil {
			t.Fatal(err)
		}
	}
	prod := session(t, c.access[1], "")
	send := func(addr, kind string, i int) {
		t.Helper()
		m := &core.Message{Address: addr, RoutingType: core.Anycast, Durable: true, Priority: core.DefaultPriority,
			Body: []byte(fmt.Sprintf("%s %s %d", addr, kind, i)), Properties: map[string]any{"kind": kind}}
		if err := prod.Send(context.Background(), m); err != nil {
			t.Fatalf("send to %s: %v", addr, err)
		}
	}
	const n = 5
	for i := range n {
		send(orders, "x", i)
		send(raw, "x", i)
		send(raw, "y", i)
	}
	// What each queue holds, read through the third node.
	cons := session(t, c.access[2], "")
	read := func(q string, want int) []core.Delivery {
		t.Helper()
		cn, col := subscribe(t, cons, core.ConsumerOptions{Address: q, RoutingType: core.Anycast, Credit: 100})
		var got []core.Delivery
		for range want {
			d := col.next(t)
			if err := cn.Ack(d.ID); err != nil {
				t.Fatal(err)
			}
			got = append(got, d)
		}
		select {
		case d := <-col.ch:
			t.Fatalf("%s: one more than %d: %q", q, want, d.Message.Body)
		case <-time.After(300 * time.Millisecond):
		}
		return got
	}
	for _, w := range []struct{ q, body, orig string }{
		{orders, "orders x %d", ""},
		{audit, "orders x %d", orders},
		{raw, "raw y %d", ""}, // the exclusive divert took the x ones away
		{clean, "raw x %d", raw},
	} {
		for i, d := range read(w.q, n) {
			orig, _ := d.Message.Properties[core.PropOriginalAddress].(string)
			if want := fmt.Sprintf(w.body, i); string(d.Message.Body) != want || orig != w.orig {
				t.Fatalf("%s: %q from %q, want %q from %q", w.q, d.Message.Body, orig, want, w.orig)
			}
		}
	}
}

// Diverts made through the API are refused on a cluster node, saying
// why, rather than kept where they would apply on one node only. Its
// access broker reports its groups' virtual-topic setting, which takes
// a restart to change.
func TestClusterRefusesAPIDiverts(t *testing.T) {
	c := startCluster(t, 3, 2)
	err := c.access[0].CreateDivert(core.Divert{Name: "d", Address: "a", ForwardingAddress: "b"})
	if !errors.Is(err, core.ErrNotInCluster) {
		t.Fatalf("CreateDivert on a cluster node: %v, want ErrNotInCluster", err)
	}
	if err := c.access[0].DeleteDivert("d"); !errors.Is(err, core.ErrNotInCluster) {
		t.Fatalf("DeleteDivert on a cluster node: %v, want ErrNotInCluster", err)
	}
	b, err := core.New(core.Config{Cluster: c.nodes[0].Cluster(), VirtualTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !b.VirtualTopics() {
		t.Fatal("an access broker whose groups apply virtual topics reports them off")
	}
	if err := b.ReloadDiverts(nil, false); !errors.Is(err, core.ErrNotInCluster) {
		t.Fatalf("turning virtual topics off on a running cluster node: %v, want ErrNotInCluster", err)
	}
	if err := c.access[0].ReloadDiverts(nil, true); !errors.Is(err, core.ErrNotInCluster) {
		t.Fatalf("turning virtual topics on on a running cluster node: %v, want ErrNotInCluster", err)
	}
}

// ActiveMQ's virtual topics on a cluster: each consumer group's queue
// Consumer.NAME.VirtualTopic.X lives in the group of VirtualTopic.X,
// whose broker copies every send to the topic to each of them; they are
// read through any node, and a send straight to one of them reaches
// that one only.
func TestClusterVirtualTopics(t *testing.T) {
	const topic = "VirtualTopic.orders"
	queues := []string{"Consumer.A." + topic, "Consumer.B." + topic}
	c := startClusterWith(t, 3, 4, func(cfg *Config) { cfg.Broker.VirtualTopics = true })
	c.waitBalanced()
	for _, q := range queues {
		if g, tg := c.nodes[0].groupOf(q), c.nodes[0].groupOf(topic); g != tg {
			t.Fatalf("%s is in group %d, its topic in %d", q, g, tg)
		}
		if err := c.access[0].CreateQueue(q, core.Anycast); err != nil {
			t.Fatal(err)
		}
	}
	prod := session(t, c.access[1], "")
	send := func(addr string, rt core.RoutingType, body string) {
		t.Helper()
		m := &core.Message{Address: addr, RoutingType: rt, Durable: true, Priority: core.DefaultPriority, Body: []byte(body)}
		if err := prod.Send(context.Background(), m); err != nil {
			t.Fatalf("send to %s: %v", addr, err)
		}
	}
	const n = 5
	for i := range n {
		send(topic, core.Multicast, fmt.Sprint(i))
	}
	send(queues[1], core.Anycast, "B only")
	for i, q := range queues {
		s := session(t, c.access[2-i], "")
		cn, col := subscribe(t, s, core.ConsumerOptions{Address: q, RoutingType: core.Anycast, Credit: 100})
		want := n
		if i == 1 {
			want++
		}
		for j := range want {
			d := col.next(t)
			body := fmt.Sprint(j)
			if j == n {
				body = "B only"
			}
			if string(d.Message.Body) != body {
				t.Fatalf("%s: %q, want %q", q, d.Message.Body, body)
			}
			if err := cn.Ack(d.ID); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case d := <-col.ch:
			t.Fatalf("%s: one more: %q", q, d.Message.Body)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

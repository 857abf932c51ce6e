package cluster

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
)

// waitClusterEvent reads col until an event of type typ that match
// accepts arrives (other events are skipped), up to 10 s.
func waitClusterEvent(t *testing.T, col *col, typ string, match func(core.Event) bool) (core.Event, *core.Message) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case d := <-col.ch:
			if d.Message.Properties[core.PropNotifType] != typ {
				continue
			}
			var e core.Event
			if err := json.Unmarshal(d.Message.Body, &e); err != nil {
				t.Fatal(err)
			}
			if match(e) {
				return e, d.Message
			}
		case <-deadline:
			t.Fatalf("no matching %s event within 10s", typ)
		}
	}
}

// A subscriber to the notification address on one node gets the events
// of every node: the connection of a client of another node, the queue
// created through a third node (an event of the group broker that holds
// it, on its leader's node), each naming its node; and the events stop
// when nothing happens (publishing them makes none).
func TestClusterEventsFromEveryNode(t *testing.T) {
	c := startClusterWith(t, 3, 4, func(cfg *Config) { cfg.Broker.Events = core.EventsConfig{Enabled: true} })
	c.waitBalanced() // no leader change due while events are sent
	watch := session(t, c.access[0], "")
	_, col := subscribe(t, watch, core.ConsumerOptions{Address: core.DefaultNotificationAddress, RoutingType: core.Multicast, Credit: 10000})

	s, err := c.access[1].NewSession(core.SessionOptions{Protocol: "stomp", User: "bob", ClientID: "ev-b", RemoteAddr: "10.0.0.2:999"})
	if err != nil {
		t.Fatal(err)
	}
	e, m := waitClusterEvent(t, col, core.EventConnectionCreated, func(e core.Event) bool { return e.ClientID == "ev-b" })
	if e.Node != "2" || m.Properties[core.PropEventNode] != "2" || e.User != "bob" || e.Protocol != "stomp" ||
		m.Properties[core.PropConnectionID] != int64(s.ID()) {
		t.Fatalf("connection event of node 2: %+v, properties %v", e, m.Properties)
	}

	if err := c.access[2].CreateQueue("evq", core.Anycast); err != nil {
		t.Fatal(err)
	}
	lead := c.nodes[0].groups[c.nodes[0].groupOf("evq")-1].lead.Load()
	e, m = waitClusterEvent(t, col, core.EventBindingAdded, func(e core.Event) bool { return e.Queue == "evq" })
	if want := strconv.FormatUint(lead, 10); e.Node != want || m.Properties[core.PropEventNode] != want || e.Address != "evq" {
		t.Fatalf("queue event from the leader of evq's group (node %d): %+v, properties %v", lead, e, m.Properties)
	}

	// A consumer of node 3: its event is node 3's, naming the queue.
	s3 := session(t, c.access[2], "")
	subscribe(t, s3, core.ConsumerOptions{Address: "evq", RoutingType: core.Anycast, Selector: "x = 1"})
	e, m = waitClusterEvent(t, col, core.EventConsumerCreated, func(e core.Event) bool { return e.Address == "evq" })
	if e.Node != "3" || e.Queue != "evq" || e.Filter != "x = 1" {
		t.Fatalf("consumer event of node 3: %+v, properties %v", e, m.Properties)
	}
	if _, ok := m.Properties[core.PropConsumerCount]; ok {
		t.Fatalf("a mirror's consumer event gives a consumer count: %v", m.Properties)
	}

	s.Close()
	waitClusterEvent(t, col, core.EventConnectionDestroyed, func(e core.Event) bool { return e.ClientID == "ev-b" && e.Node == "2" })

	// No loop: once the cluster is idle, no event comes.
	time.Sleep(300 * time.Millisecond)
	for len(col.ch) > 0 {
		d := <-col.ch
		if a := d.Message.Properties[core.PropEventAddress]; a == core.DefaultNotificationAddress {
			t.Fatalf("an event about the notification address: %v", d.Message.Properties)
		}
	}
	select {
	case d := <-col.ch:
		t.Fatalf("an event of an idle cluster: %v", d.Message.Properties)
	case <-time.After(500 * time.Millisecond):
	}
	var pub uint64
	for _, b := range c.access {
		pub += b.EventStats().Published
	}
	if pub == 0 {
		t.Fatal("no events counted as published")
	}
}

// A flood of events on a group broker (a send dropped by 100 full
// subscriptions at once) fills its node's bounded buffer: the rest are
// dropped and counted, and sends go on without waiting for them.
func TestClusterEventFloodIsDroppedNotWaitedFor(t *testing.T) {
	one := int64(1)
	drop := string(core.FullDrop)
	c := startClusterWith(t, 3, 2, func(cfg *Config) {
		cfg.Broker.Events = core.EventsConfig{Enabled: true, Buffer: 4}
		cfg.Broker.AddressSettings = []core.AddressSettings{{Match: "fan", MaxSizeBytes: &one, FullPolicy: &drop}}
	})
	c.waitBalanced()
	s := session(t, c.access[1], "")
	for range 100 {
		subscribe(t, s, core.ConsumerOptions{Address: "fan", RoutingType: core.Multicast})
	}
	p := session(t, c.access[2], "")
	send := func(body string) {
		t.Helper()
		m := &core.Message{Address: "fan", RoutingType: core.Multicast, Durable: true, Body: []byte(body), Priority: core.DefaultPriority}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	send("fills them")
	start := time.Now()
	const n = 30
	for range n {
		send("x")
		time.Sleep(15 * time.Millisecond)
	}
	took := time.Since(start)
	var st core.EventStats
	for _, b := range c.access {
		x := b.EventStats()
		st.Published += x.Published
		st.Dropped += x.Dropped
	}
	if st.Dropped == 0 {
		t.Fatalf("events %+v: none dropped from 4-event buffers", st)
	}
	t.Logf("%d sends dropped by 100 subscriptions in %v: %d events published, %d dropped", n, took, st.Published, st.Dropped)
}

package clustertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// An MQTT client resuming a persistent session on a node that cannot
// read the session's state (its groups have no leader: the two other
// nodes are down) is refused with "server unavailable", not taken in
// with a fresh session: unknown state taken for none would discard its
// subscription and the messages queued for it. Once the majority is
// back, the same client resumes the session and gets every message sent
// while it was away.
func TestClusterMQTTSessionUnknownIsRefused(t *testing.T) {
	rounds(t) // with the scenarios (make cluster-test): once, it is deterministic
	c := Start(t, proxyNet(t))
	const x, clientID, topic = uint64(1), "sess-unknown", "st/unknown"
	connect := func(id uint64, cid string, clean bool) (paho.Client, bool, error) {
		o := paho.NewClientOptions().SetClientID(cid).SetCleanSession(clean).
			SetConnectTimeout(30 * time.Second).SetAutoReconnect(false).SetConnectRetry(false).
			SetOrderMatters(false).AddBroker("tcp://" + c.Nodes[id].Addrs.MQTT)
		cl := paho.NewClient(o)
		tok := cl.Connect()
		if !tok.WaitTimeout(40 * time.Second) {
			return nil, false, errors.New("no CONNACK within 40s")
		}
		if err := tok.Error(); err != nil {
			return nil, false, err
		}
		return cl, tok.(*paho.ConnectToken).SessionPresent(), nil
	}
	// The persistent session subscribes, and goes away.
	sub, _, err := connect(x, clientID, false)
	if err != nil {
		t.Fatal(err)
	}
	if tok := sub.Subscribe(topic, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	sub.Disconnect(100)
	pub, _, err := connect(2, "sess-unknown-pub", true)
	if err != nil {
		t.Fatal(err)
	}
	const sent = 3
	for i := range sent {
		if tok := pub.Publish(topic, 1, false, fmt.Sprint(i)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d: %v", i, tok.Error())
		}
	}
	pub.Disconnect(100)
	// Node x alone: no group has a leader.
	for id := range c.Nodes {
		if id != x {
			c.Nodes[id].Kill9()
		}
	}
	for try := range 2 { // the same answer each time
		start := time.Now()
		cl, present, err := connect(x, clientID, false)
		if err == nil {
			cl.Disconnect(0)
			t.Fatalf("try %d: connected to a node without a majority (session present %v), want refused", try, present)
		}
		if !errors.Is(err, packets.ErrorRefusedServerUnavailable) {
			t.Fatalf("try %d: %v, want server unavailable", try, err)
		}
		c.Event("try %d refused after %v: %v", try, time.Since(start).Round(time.Millisecond), err)
	}
	for id := range c.Nodes {
		if id != x {
			c.Nodes[id].Start(false)
		}
	}
	c.WaitHealthy(60 * time.Second)
	got := make(chan string, 2*sent)
	o := paho.NewClientOptions().SetClientID(clientID).SetCleanSession(false).SetAutoReconnect(false).
		SetConnectTimeout(30 * time.Second).AddBroker("tcp://" + c.Nodes[x].Addrs.MQTT).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) })
	cl := paho.NewClient(o)
	tok := cl.Connect()
	if !tok.WaitTimeout(40*time.Second) || tok.Error() != nil {
		t.Fatalf("resuming once the majority is back: %v", tok.Error())
	}
	defer cl.Disconnect(100)
	if !tok.(*paho.ConnectToken).SessionPresent() {
		t.Fatal("session present = false once the majority is back: the session was lost")
	}
	seen := map[string]bool{}
	deadline := time.After(20 * time.Second)
	for len(seen) < sent {
		select {
		case m := <-got:
			seen[m] = true
		case <-deadline:
			t.Fatalf("got %v of the %d messages queued for the session", seen, sent)
		}
	}
}

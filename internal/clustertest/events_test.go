package clustertest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/internal/stompclient"
)

// Broker events across a cluster of junction processes, as configured
// by default (notifications on): a STOMP subscriber to the notification
// address on node 1 gets the CONNECTION_CREATED of a STOMP client of
// node 2 and the BINDING_ADDED of a queue a client of node 3 creates,
// each with _AMQ_NodeID (the queue's from its group's leader).
func TestClusterEventsOverSTOMP(t *testing.T) {
	rounds(t) // with the scenarios (make cluster-test): once, it is deterministic
	c := Start(t, proxyNet(t))
	dial := func(id uint64, opts ...func(*gostomp.Conn) error) *gostomp.Conn {
		t.Helper()
		opts = append(opts, gostomp.ConnOpt.HeartBeat(0, 0), gostomp.ConnOpt.Host("/"), stompclient.Quiet)
		deadline := time.Now().Add(30 * time.Second)
		for {
			conn, err := gostomp.Dial("tcp", c.Nodes[id].Addrs.STOMP, opts...)
			if err == nil {
				t.Cleanup(func() { conn.Disconnect() })
				return conn
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: %v", id, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	watch := dial(1)
	sub, err := watch.Subscribe("/topic/activemq.notifications", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	// wait returns the first event of type typ that match accepts within
	// d, or nil.
	wait := func(typ string, match func(map[string]any) bool, d time.Duration) *gostomp.Message {
		t.Helper()
		deadline := time.After(d)
		for {
			select {
			case m := <-sub.C:
				if m.Err != nil {
					t.Fatal(m.Err)
				}
				var e map[string]any
				if m.Header.Get("_AMQ_NotifType") == typ && json.Unmarshal(m.Body, &e) == nil && match(e) {
					return m
				}
			case <-deadline:
				return nil
			}
		}
	}
	// Events are non-durable multicast messages: one sent before the
	// subscription is in place in the notification address's group goes
	// to no one. So a client connects to node 2 again, under a new id,
	// until its event comes (the first, once the subscription is there).
	var m *gostomp.Message
	for i := 0; m == nil; i++ {
		if i == 15 {
			t.Fatal("no CONNECTION_CREATED of node 2's clients within 15 tries of 2s")
		}
		id := fmt.Sprintf("ev-node2-%d", i)
		dial(2, gostomp.ConnOpt.Header("client-id", id))
		m = wait("CONNECTION_CREATED", func(e map[string]any) bool { return e["clientId"] == id }, 2*time.Second)
	}
	if got := m.Header.Get("_AMQ_NodeID"); got != "2" {
		t.Fatalf("CONNECTION_CREATED of node 2's client says node %q", got)
	}

	p := dial(3)
	if err := p.Send("/queue/ev.q", "text/plain", []byte("x"), gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	if m = wait("BINDING_ADDED", func(e map[string]any) bool { return e["queue"] == "ev.q" }, 30*time.Second); m == nil {
		t.Fatal("no BINDING_ADDED of ev.q within 30s")
	}
	node, _ := strconv.ParseUint(m.Header.Get("_AMQ_NodeID"), 10, 64)
	if node < 1 || node > 3 {
		t.Fatalf("BINDING_ADDED of ev.q says node %q", m.Header.Get("_AMQ_NodeID"))
	}
	t.Logf("ev.q (group %d) created on node %d", GroupOf("ev.q"), node)
}

package clustertest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/internal/stompclient"
)

// A divert in the nodes' configuration file copies what a STOMP client
// of node 1 sends to orders into audit, whose group is another: the
// copies are confirmed with the sends, survive kill -9 of audit's
// group leader, and are read through another node with the original
// address in _AMQ_ORIG_ADDRESS. With virtual topics on, what the client
// sends to /topic/VirtualTopic.dv reaches the queue of consumer group
// A, Consumer.A.VirtualTopic.dv, read the same way.
func TestClusterDivertOverSTOMP(t *testing.T) {
	rounds(t) // with the scenarios (make cluster-test): once, it is deterministic
	const orders, audit, topic, vtq = "dv.orders", "dv.audit", "VirtualTopic.dv", "Consumer.A.VirtualTopic.dv"
	if GroupOf(orders) == GroupOf(audit) {
		t.Fatalf("%s and %s share group %d: pick other names", orders, audit, GroupOf(orders))
	}
	c := StartConfig(t, proxyNet(t), fmt.Sprintf("virtual-topics: true\ndiverts:\n  - name: audit-orders\n    address: %s\n    forwarding-address: %s\n", orders, audit))
	for _, q := range []string{orders, audit, vtq} {
		c.CreateQueue(q)
	}
	dial := func(id uint64) *gostomp.Conn {
		t.Helper()
		conn, err := gostomp.Dial("tcp", c.Nodes[id].Addrs.STOMP, gostomp.ConnOpt.HeartBeat(0, 0), gostomp.ConnOpt.Host("/"), stompclient.Quiet)
		if err != nil {
			t.Fatalf("node %d: %v", id, err)
		}
		t.Cleanup(func() { conn.Disconnect() })
		return conn
	}
	prod := dial(1)
	const n = 10
	for i := range n {
		for _, dest := range []string{"/queue/" + orders, "/topic/" + topic} {
			if err := prod.Send(dest, "text/plain", []byte(fmt.Sprint(i)), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true")); err != nil {
				t.Fatalf("send %d to %s: %v", i, dest, err)
			}
		}
	}
	leaders := c.WaitHealthy(30 * time.Second)
	dead := leaders[GroupOf(audit)]
	c.Nodes[dead].Kill9()
	// Healthy once the survivors have elected other leaders (until their
	// election timeout they still name the dead one).
	for deadline := time.Now().Add(30 * time.Second); c.WaitHealthy(30 * time.Second)[GroupOf(audit)] == dead; {
		if time.Now().After(deadline) {
			t.Fatalf("group %d still led by the dead node %d after 30 s", GroupOf(audit), dead)
		}
		time.Sleep(100 * time.Millisecond)
	}
	reader := uint64(1)
	for reader == dead {
		reader++
	}
	cons := dial(reader)
	for _, q := range []string{audit, orders, vtq} {
		sub, err := cons.Subscribe("/queue/"+q, gostomp.AckClientIndividual)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			var m *gostomp.Message
			select {
			case m = <-sub.C:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: %d of %d after 30 s", q, i, n)
			}
			if m.Err != nil {
				t.Fatalf("%s: %v", q, m.Err)
			}
			if string(m.Body) != fmt.Sprint(i) {
				t.Fatalf("%s: message %d is %q", q, i, m.Body)
			}
			if orig := m.Header.Get("_AMQ_ORIG_ADDRESS"); q == audit && orig != orders {
				t.Fatalf("%s: copy %d has _AMQ_ORIG_ADDRESS %q, want %s", q, i, orig, orders)
			}
			if err := cons.Ack(m); err != nil {
				t.Fatal(err)
			}
		}
		if err := sub.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
	}
	c.Event("%d sends to %s and their copies in %s, and to %s in %s, read through node %d after node %d's kill -9", n, orders, audit, topic, vtq, reader, dead)
	// The node's API shows what is in force.
	res, err := c.http.Get("http://" + c.Nodes[reader].Addrs.Console + "/api/v1/diverts")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var list struct {
		VirtualTopics bool `json:"virtualTopics"`
		Diverts       []struct {
			Name string `json:"name"`
		} `json:"diverts"`
	}
	if err := json.NewDecoder(res.Body).Decode(&list); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/diverts: %d, %v", res.StatusCode, err)
	}
	if !list.VirtualTopics || len(list.Diverts) != 1 || list.Diverts[0].Name != "audit-orders" {
		t.Fatalf("GET /api/v1/diverts on node %d: %+v, want virtual topics on and the divert audit-orders", reader, list)
	}
}

package clustertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/internal/stompclient"
)

// A node left alone (the other two killed) stops within its shutdown
// timeout while STOMP, MQTT and AMQP clients keep sending durable
// messages to it: each send waits for a group leader that cannot be
// elected, and without Drain every handler held the front-ends' drain
// for up to LeaderWait per message (CI: a node still in waitLeader 30 s
// after SIGTERM). The sends end with errors, not confirmations.
func TestClusterShutdownWithoutMajority(t *testing.T) {
	rounds(t) // with the scenarios (make cluster-test): once, it is deterministic
	c := Start(t, proxyNet(t))
	x := c.WaitHealthy(10 * time.Second)[1] // it leads group 1 at least
	queues := Queues()
	for _, q := range queues {
		c.CreateQueue(q) // every send must then be stored
	}
	addrs := c.Nodes[x].Addrs
	// Every client connects while the cluster is whole.
	sc, err := gostomp.Dial("tcp", addrs.STOMP, gostomp.ConnOpt.HeartBeat(0, 0), gostomp.ConnOpt.Host("/"), stompclient.Quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Disconnect()
	mc := paho.NewClient(paho.NewClientOptions().SetClientID("shutdown-pub").SetCleanSession(true).
		SetAutoReconnect(false).SetConnectRetry(false).SetOrderMatters(false).AddBroker("tcp://" + addrs.MQTT))
	if tok := mc.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt connect: %v", tok.Error())
	}
	defer mc.Disconnect(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	ac, err := goamqp.Dial(ctx, "amqp://"+addrs.AMQP, &goamqp.ConnOptions{HostName: "localhost"})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	as, err := ac.NewSession(ctx, nil)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	var senders []*goamqp.Sender
	for _, q := range queues {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		snd, err := as.NewSender(ctx, "queue://"+q, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		senders = append(senders, snd)
	}

	for id := range c.Nodes {
		if id != x {
			c.Nodes[id].Kill9()
		}
	}
	// Sends from every protocol to every group, pipelined on each
	// connection; none of the MQTT and AMQP ones may be confirmed.
	const each = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	confirmed := map[string]int{}
	confirm := func(proto, q string, err error) {
		if err == nil {
			mu.Lock()
			confirmed[proto+" "+q]++
			mu.Unlock()
		}
	}
	for _, q := range queues {
		for i := range each {
			body := fmt.Sprintf("shutdown %s %d", q, i)
			// Without receipts: go-stomp's Send waiting for one holds
			// the lock its reader needs to end on a closed connection.
			if err := sc.Send("/queue/"+q, "text/plain", []byte(body), gostomp.SendOpt.Header("persistent", "true")); err != nil {
				t.Fatal(err)
			}
			tok := mc.Publish(strings.ReplaceAll(q, ".", "/"), 1, false, body) // the queue's address
			wg.Add(1)
			go func() {
				defer wg.Done()
				tok.WaitTimeout(time.Minute)
				confirm("mqtt", q, tok.Error())
			}()
		}
	}
	for j, snd := range senders {
		for i := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				confirm("amqp", queues[j], snd.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte(fmt.Sprint("amqp ", i))}}, nil))
			}()
		}
	}
	time.Sleep(time.Second) // the sends wait for leaders
	took := c.Nodes[x].Terminate()
	c.Event("node %d exited %v after SIGTERM", x, took.Round(time.Millisecond))
	// The node's shutdown timeout (its default, 10 s) is what a graceful
	// stop may take.
	if took > 10*time.Second {
		t.Errorf("node %d took %v to exit after SIGTERM, more than its shutdown timeout", x, took)
	}
	// The clients' waits end with the connections the node closed.
	wg.Wait()
	if len(confirmed) > 0 {
		t.Errorf("sends confirmed by a node without a majority: %v", confirmed)
	}
}

package clustertest

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/internal/stompclient"
)

// A retained message and two scheduled ones (STOMP's AMQ_SCHEDULED_TIME,
// AMQP's x-opt-delivery-time), confirmed by the leader of their group,
// survive its kill -9: a new MQTT subscriber through another node gets
// the retained message, flagged retained, once; a consumer through
// another node gets each scheduled message once (flagged redelivered, as
// everything a new leader hands out: docs/cluster.md), and not before
// its time (which comes after the failover, so the new leader
// must have held it back itself).
func TestClusterRetainedAndScheduledSurviveKill9(t *testing.T) {
	rounds(t) // with the scenarios (make cluster-test): once
	retainedAndScheduled(t, proxyNet(t))
}

func TestClusterNetnsRetainedAndScheduledSurviveKill9(t *testing.T) {
	rounds(t)
	retainedAndScheduled(t, netnsNet(t))
}

func retainedAndScheduled(t *testing.T, nw Network) {
	c := Start(t, nw)
	const retainedTopic = "ct/retained"
	g := GroupOf("ct.retained")
	queue := queueIn(g, "ct.sched")
	c.CreateQueue(queue)
	leaders := c.WaitHealthy(30 * time.Second)
	via := leaders[g] // send through the leader: the node that dies
	c.Event("group %d (topic %s, queue %s) led by node %d", g, retainedTopic, queue, via)
	dial := func(addr string) net.Conn {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		nc, err := c.Net.Dial(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}

	mqttOpts := func(clientID string, id uint64) *paho.ClientOptions {
		return paho.NewClientOptions().SetClientID(clientID).SetCleanSession(true).
			SetAutoReconnect(false).SetConnectTimeout(30 * time.Second).AddBroker("tcp://" + c.Nodes[id].Addrs.MQTT).
			SetCustomOpenConnectionFn(func(u *url.URL, _ paho.ClientOptions) (net.Conn, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				return c.Net.Dial(ctx, u.Host)
			})
	}

	// The retained message, QoS 1: PUBACK once committed.
	const retained = "retained-1"
	pub := paho.NewClient(mqttOpts("rs-pub", via))
	if tok := pub.Connect(); !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
		t.Fatalf("MQTT connect to node %d: %v", via, tok.Error())
	}
	if tok := pub.Publish(retainedTopic, 1, true, retained); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("retained publish: %v", tok.Error())
	}
	pub.Disconnect(100)

	// The scheduled messages, due well after the failover (≈ 1-3 s).
	const after = 8 * time.Second
	due := map[string]time.Time{}
	snc := dial(c.Nodes[via].Addrs.STOMP)
	sc, err := gostomp.Connect(snc, gostomp.ConnOpt.HeartBeat(0, 0), gostomp.ConnOpt.Host("/"), stompclient.Quiet)
	if err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(time.Now().Add(after).UnixMilli())
	due["sched-stomp"] = at
	if err := sc.Send("/queue/"+queue, "text/plain", []byte("sched-stomp"), gostomp.SendOpt.Receipt,
		gostomp.SendOpt.Header("persistent", "true"), gostomp.SendOpt.Header("AMQ_SCHEDULED_TIME", strconv.FormatInt(at.UnixMilli(), 10))); err != nil {
		t.Fatalf("STOMP scheduled send: %v", err)
	}
	sc.Disconnect()
	snc.Close()

	anc := dial(c.Nodes[via].Addrs.AMQP)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	ac, err := goamqp.NewConn(ctx, anc, &goamqp.ConnOptions{HostName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := ac.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := ss.NewSender(ctx, "queue://"+queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	at = time.UnixMilli(time.Now().Add(after).UnixMilli())
	due["sched-amqp"] = at
	if err := snd.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true},
		Annotations: goamqp.Annotations{"x-opt-delivery-time": at}, Data: [][]byte{[]byte("sched-amqp")}}, nil); err != nil {
		t.Fatalf("AMQP scheduled send: %v", err)
	}
	cancel()
	ac.Close()
	anc.Close()
	c.Event("retained message set and 2 messages scheduled through node %d, due %v", via, due)

	// kill -9 the group's leader now.
	l := c.WaitHealthy(30 * time.Second)[g]
	killed := time.Now()
	c.Nodes[l].Kill9()
	other := third(l, via) // a node that neither sent nor died
	if via == l {
		other = l%3 + 1
	}
	c.Event("killed node %d, leader of group %d; reading through node %d", l, g, other)

	// A consumer through another node, from right after the kill.
	type got struct {
		body        string
		at          time.Time
		redelivered bool
	}
	deliveries := make(chan got, 16)
	cnc := dial(c.Nodes[other].Addrs.STOMP)
	defer cnc.Close()
	cc, err := gostomp.Connect(cnc, gostomp.ConnOpt.HeartBeat(0, 0), gostomp.ConnOpt.Host("/"), stompclient.Quiet)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := cc.Subscribe("/queue/"+queue, gostomp.AckAuto)
	if err != nil {
		t.Fatalf("subscribe through node %d: %v", other, err)
	}
	go func() {
		for m := range sub.C {
			if m.Err != nil {
				return
			}
			deliveries <- got{string(m.Body), time.Now(), m.Header.Get("redelivered") == "true"}
		}
	}()

	// A new MQTT subscriber through that node gets the retained message.
	retains := make(chan paho.Message, 4)
	msub := paho.NewClient(mqttOpts("rs-sub", other))
	if tok := msub.Connect(); !tok.WaitTimeout(40*time.Second) || tok.Error() != nil {
		t.Fatalf("MQTT connect to node %d: %v", other, tok.Error())
	}
	defer msub.Disconnect(100)
	if tok := msub.Subscribe(retainedTopic, 1, func(_ paho.Client, m paho.Message) { retains <- m }); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("MQTT subscribe through node %d: %v", other, tok.Error())
	}
	select {
	case m := <-retains:
		if string(m.Payload()) != retained || !m.Retained() {
			t.Errorf("the new subscriber got %q (retained flag %v), want %q flagged retained", m.Payload(), m.Retained(), retained)
		}
		c.Event("retained message through node %d %v after the kill", other, time.Since(killed).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Errorf("no retained message through node %d within 20s of subscribing\n%s", other, c.LogExcerpts())
	}

	// Each scheduled message once, at or after its time; nothing more
	// for 3 s after the last is due.
	seen := map[string]int{}
	last := due["sched-stomp"]
	if due["sched-amqp"].After(last) {
		last = due["sched-amqp"]
	}
	deadline := time.After(time.Until(last) + 20*time.Second)
	quiet := time.After(time.Until(last) + 3*time.Second)
	for quiet != nil || len(seen) < len(due) {
		select {
		case d := <-deliveries:
			seen[d.body]++
			when, ok := due[d.body]
			switch {
			case !ok:
				t.Errorf("an unexpected message %q", d.body)
			case d.at.Before(when):
				t.Errorf("%s delivered %v before its time", d.body, when.Sub(d.at))
			case seen[d.body] > 1:
				t.Errorf("%s delivered %d times (redelivered flag %v)", d.body, seen[d.body], d.redelivered)
			default:
				// Flagged redelivered, as docs/cluster.md has it: a new
				// leader flags every message of its group it hands out.
				c.Event("%s through node %d %v after its time (redelivered flag %v)", d.body, other, d.at.Sub(when).Round(time.Millisecond), d.redelivered)
			}
		case <-quiet:
			quiet = nil
		case <-deadline:
			t.Fatalf("scheduled messages seen %v, want each of %v once, within 20s of their time\n%s", seen, due, c.LogExcerpts())
		}
	}
	select {
	case m := <-retains:
		t.Errorf("the retained message came again: %q", m.Payload())
	default:
	}
	cc.Disconnect()

	// The killed node comes back, and the cluster is whole.
	c.Nodes[l].Start(false)
	c.WaitHealthy(60 * time.Second)
}

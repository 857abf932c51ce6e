package mqtt_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/junctionmq/junction/mqtt"
	"github.com/junctionmq/junction/mqtt/mqtttest"
)

// willClient connects an MQTT 5 client (paho.golang) with a session
// expiry interval and a QoS 1 will on will/<id> with a will delay
// interval. It returns its TCP connection, for a test to cut.
func willClient(t *testing.T, addr, id string, delay, expiry uint32) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := paho5.NewClient(paho5.ClientConfig{Conn: nc})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho5.Connect{ClientID: id, KeepAlive: 30, CleanStart: true,
		Properties:     &paho5.ConnectProperties{SessionExpiryInterval: &expiry},
		WillMessage:    &paho5.WillMessage{Topic: "will/" + id, QoS: 1, Payload: []byte(id + " is gone")},
		WillProperties: &paho5.WillProperties{WillDelayInterval: &delay}})
	if err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect %s: %v %+v", id, err, ca)
	}
	return nc
}

// watcher connects the persistent MQTT 3.1.1 session "watch" (first:
// subscribes QoS 1 to will/# and goes away; the messages wait for it),
// and returns its client, its messages and whether the session was
// present.
func watcher(t *testing.T, d *durable, first bool) (paho.Client, chan paho.Message, bool) {
	t.Helper()
	got := make(chan paho.Message, 100)
	o := paho.NewClientOptions().AddBroker("tcp://" + d.Addr).SetClientID("watch").SetCleanSession(false).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second)
	o.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { got <- m })
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect watch: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	if first {
		mqtttest.Wait(t, c.Subscribe("will/#", 1, nil))
		c.Disconnect(100)
		return nil, nil, false
	}
	return c, got, tok.(*paho.ConnectToken).SessionPresent()
}

// waitGone waits (up to 5 s after the client's disconnection is
// recorded) until core shows no connection of MQTT client id.
func waitGone(t *testing.T, d *durable, id string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		held := false
		for _, ci := range d.Core.Connections() {
			held = held || ci.ClientID == "mqtt/"+id
		}
		if !held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the connection of %s is still open", id)
		}
	}
}

// A will held back by its delay interval is journaled with its session
// and published after a restart of the broker, when the delay ends or
// the session ends, whichever is first [MQTT-3.1.3-9, MQTT 5 3.1.2.5],
// counted from when the connection ended; once, not again after a
// second restart. A client that takes its session back before the
// delay has passed gets no will published.
//
// "cut" loses its connection abnormally before the restart; "held" and
// "back" are connected when the broker stops (a shutdown keeps the will
// for the next start). "short" has a will delay longer than its session
// expiry: its will is published as its session ends.
func TestPendingWillsAfterRestart(t *testing.T) {
	d := startDurable(t, mqtt.Config{})
	watcher(t, d, true)

	cut := willClient(t, d.Addr, "cut", 2, 60)
	willClient(t, d.Addr, "held", 3, 60)
	willClient(t, d.Addr, "back", 3, 60)
	willClient(t, d.Addr, "short", 60, 2)
	// The session records hold the time a connection ended in whole
	// seconds: the delays count from that second, at the earliest the
	// second before the connection ends.
	cutAt := time.Unix(time.Now().Unix(), 0)
	cut.Close() // no DISCONNECT: the will is due after its delay
	waitGone(t, d, "cut")
	stopAt := time.Unix(time.Now().Unix(), 0)
	d.restart()

	// Back within its will delay (the session resumed, no will of its
	// own now).
	back := d.Raw(t)
	if ack := back.Session("back", false, 60); !ack.SessionPresent {
		t.Fatal("back: session not present after the restart")
	}
	w, got, present := watcher(t, d, false)
	if !present {
		t.Fatal("watch: session not present after the restart")
	}
	want := map[string]time.Time{
		"will/cut":   cutAt.Add(2 * time.Second),
		"will/held":  stopAt.Add(3 * time.Second),
		"will/short": stopAt.Add(2 * time.Second), // the session's end
	}
	seen := map[string]int{}
	for range want {
		m := mqtttest.Next(t, got)
		at := time.Now()
		due, ok := want[m.Topic()]
		if !ok {
			t.Fatalf("a will on %s (%q)", m.Topic(), m.Payload())
		}
		seen[m.Topic()]++
		if seen[m.Topic()] > 1 {
			t.Fatalf("the will on %s twice", m.Topic())
		}
		if at.Before(due) {
			t.Fatalf("the will on %s at %v, before its time %v", m.Topic(), at.Format(time.StampMilli), due.Format(time.StampMilli))
		}
		if want := strings.TrimPrefix(m.Topic(), "will/") + " is gone"; string(m.Payload()) != want || m.Qos() != 1 {
			t.Fatalf("will %q qos %d, want %q qos 1", m.Payload(), m.Qos(), want)
		}
	}
	// "back"'s delay has passed by now, by a margin: no will of it, no
	// second will of the others.
	mqtttest.None(t, got, time.Until(stopAt.Add(4500*time.Millisecond)))
	// "short" ended with its will; "held" and "cut" go on, without one.
	if ack := d.Raw(t).Session("short", false, 60); ack.SessionPresent {
		t.Fatal("short: session present after its expiry")
	}
	for _, id := range []string{"cut", "held"} {
		for _, r := range d.Core.ClientRecordsOf("mqtt/" + id) {
			if r.Key == "w" {
				t.Fatalf("%s: will record left after the will was published", id)
			}
		}
	}
	back.Disconnect()
	w.Disconnect(100)

	// A second restart publishes nothing again.
	d.restart()
	_, got, _ = watcher(t, d, false)
	mqtttest.None(t, got, 1500*time.Millisecond)
}

// A persistent session with subscriptions and queued QoS 1 messages is
// restored by a restart and, its client not back, ends when its expiry
// interval has passed (counted from its disconnection, before the
// restart) [MQTT-3.1.2-23 (5)]: its queues, their messages and its
// records are gone, and the client finds no session (session present 0,
// nothing delivered).
func TestRestoredSessionWithMessagesExpires(t *testing.T) {
	d := startDurable(t, mqtt.Config{})
	const expiry = 4
	dev := d.Raw(t)
	dev.Session("dev", true, expiry)
	dev.Subscribe(1, nil, packets.SubOptions{Topic: "q/a", QoS: 1}, packets.SubOptions{Topic: "q/b", QoS: 1})
	dev.Disconnect()
	goneAt := time.Unix(time.Now().Unix(), 0)
	pub := d.Client(t, "pub")
	for range 3 {
		mqtttest.Wait(t, pub.Publish("q/a", 1, false, "a"))
		mqtttest.Wait(t, pub.Publish("q/b", 1, false, "b"))
	}
	pub.Disconnect(100)
	queues := []string{"mqtt/dev.q/a", "mqtt/dev.q/b"}
	d.restart()

	// Restored: the queues and their messages, the records.
	for _, q := range queues {
		st, err := d.Core.QueueStat(q)
		if err != nil || st.Depth != 3 || !st.Durable {
			t.Fatalf("%s after the restart: %+v %v, want 3 durable messages", q, st, err)
		}
	}
	if !slices.Contains(d.Core.ClientRecordHolders(), "mqtt/dev") || len(d.Core.DurableSubscriptionsOf("mqtt/dev")) != 2 {
		t.Fatalf("after the restart: record holders %v, subscriptions %v", d.Core.ClientRecordHolders(), d.Core.DurableSubscriptionsOf("mqtt/dev"))
	}
	// Expired, without the client.
	left := func() []string {
		var out []string
		for _, st := range d.Core.QueueStats() {
			if strings.HasPrefix(st.Name, "mqtt/dev.") {
				out = append(out, st.Name)
			}
		}
		if slices.Contains(d.Core.ClientRecordHolders(), "mqtt/dev") {
			out = append(out, "records")
		}
		if slices.Contains(d.Core.DurableClientIDs(), "mqtt/dev") {
			out = append(out, "durable subscriptions")
		}
		return out
	}
	due := goneAt.Add(expiry * time.Second)
	for deadline := due.Add(5 * time.Second); len(left()) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("session not ended 5s after its expiry: %v left", left())
		}
		if len(left()) < 4 && time.Now().Before(due) {
			t.Fatalf("session partly ended before its expiry: %v left", left())
		}
	}
	if time.Now().Before(due) {
		t.Fatalf("session ended at %v, before its expiry %v", time.Now().Format(time.StampMilli), due.Format(time.StampMilli))
	}
	// Also after another restart, and to the client.
	d.restart()
	if l := left(); len(l) > 0 {
		t.Fatalf("after a second restart: %v", l)
	}
	dev = d.Raw(t)
	if ack := dev.Session("dev", false, expiry); ack.SessionPresent {
		t.Fatal("session present after its expiry")
	}
	dev.Silent(200 * time.Millisecond)
	dev.Disconnect()
}

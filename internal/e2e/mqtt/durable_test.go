// Package mqtt_test tests the MQTT front-end over a broker with
// journals, restarted on them: package mqtt may not import persistence,
// even in its tests.
package mqtt_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/e2e/e2etest"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/mqtt"
	"github.com/junctionmq/junction/mqtt/mqtttest"
	"github.com/junctionmq/junction/persistence/journal"
)

// durable is a broker with journals in dir, restartable.
type durable struct {
	t   *testing.T
	dir string
	cfg mqtt.Config
	*mqtttest.Broker
	closers []func()
}

func startDurable(t *testing.T, cfg mqtt.Config) *durable {
	t.Helper()
	d := &durable{t: t, dir: t.TempDir(), cfg: cfg}
	d.start()
	t.Cleanup(d.stop)
	return d
}

func (d *durable) start() {
	t := d.t
	t.Helper()
	msgs, err := journal.Open(journal.Config{Dir: filepath.Join(d.dir, "journal"), FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	bindings, err := journal.Open(journal.Config{Dir: filepath.Join(d.dir, "bindings"), FileSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	b, err := core.New(core.Config{Messages: msgs, Bindings: bindings})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mqtt.New(d.cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := testserve.Serve(t, srv.ServeConn)
	d.Broker = &mqtttest.Broker{Addr: addr, Core: b, Server: srv}
	d.closers = []func(){func() { srv.Close() }, stop, func() { b.Close() }, func() { msgs.Close() }, func() { bindings.Close() }}
}

// stop closes the server, the broker and the journals, in that order.
func (d *durable) stop() {
	for _, f := range d.closers {
		f()
	}
	d.closers = nil
}

// restart stops the broker and starts a new one on the same journals.
func (d *durable) restart() {
	d.stop()
	d.start()
}

// A QoS 1 publish (durable) while the store is over its disk limit is
// answered with reason 0x97.
func TestDiskFullQuotaExceeded(t *testing.T) {
	tb := mqtttest.StartFull(t, mqtt.Config{}, e2etest.DiskFull(t), "orders")
	e2etest.WaitDiskFull(t, tb.Core)
	pub := tb.Client5(t, "p", 0)
	for _, qos := range []byte{1, 2} {
		if r := pub.Publish(t, &paho5.Publish{Topic: "orders", QoS: qos, Payload: []byte("x")}); r == nil || r.ReasonCode != 0x97 {
			t.Fatalf("QoS %d publish past the disk limit: %+v, want reason 0x97", qos, r)
		}
	}
	if got := tb.Core.DropStats()[core.RefusedDisk]; got != 2 {
		t.Fatalf("refused_disk_full = %d, want 2", got)
	}
}

// The session-present flag after a restart of the broker [MQTT-3.2.2-2]:
// a persistent session survives it; a clean one does not.
func TestSessionPresentAfterRestart(t *testing.T) {
	d := startDurable(t, mqtt.Config{})
	dev := d.Client(t, "dev-311", func(o *paho.ClientOptions) { o.SetCleanSession(false) })
	mqtttest.Wait(t, dev.Subscribe("cmd/#", 1, nil))
	dev.Disconnect(100)
	r := d.Raw(t)
	r.Session("dev-5", true, 3600)
	r.Subscribe(1, nil, packets.SubOptions{Topic: "cmd5/#", QoS: 1})
	r.Disconnect()
	clean := d.Raw(t)
	clean.Session("clean-5", true, 0)
	clean.Subscribe(1, nil, packets.SubOptions{Topic: "x", QoS: 1})
	clean.Disconnect()

	d.restart()
	pub := d.Client(t, "pub")
	mqtttest.Wait(t, pub.Publish("cmd/reboot", 1, false, "while away"))
	o := paho.NewClientOptions().AddBroker("tcp://" + d.Addr).SetClientID("dev-311").SetCleanSession(false).
		SetAutoReconnect(false).SetConnectRetry(false)
	got := make(chan paho.Message, 10)
	o.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { got <- m })
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer c.Disconnect(100)
	if !tok.(*paho.ConnectToken).SessionPresent() {
		t.Fatal("MQTT 3.1.1 session present 0 after a restart")
	}
	if m := mqtttest.Next(t, got); string(m.Payload()) != "while away" {
		t.Fatalf("got %q", m.Payload())
	}
	if ack := d.Raw(t).Session("dev-5", false, 3600); !ack.SessionPresent {
		t.Fatal("MQTT 5 session present 0 after a restart")
	}
	if ack := d.Raw(t).Session("clean-5", false, 0); ack.SessionPresent {
		t.Fatal("a session with expiry 0 present after a restart")
	}
}

// A QoS 2 delivery to a persistent session goes out again under its
// packet id after a reconnect and after a restart [MQTT-4.4.0-1]: as
// PUBLISH (DUP) until the client has sent PUBREC, as PUBREL after; the
// message is delivered once.
func TestQoS2DeliveryResumedWithItsPacketID(t *testing.T) {
	d := startDurable(t, mqtt.Config{})
	sub := d.Raw(t)
	sub.Session("q2sub", true, 3600)
	if sa := sub.Subscribe(1, nil, packets.SubOptions{Topic: "q2/#", QoS: 2}); sa.Reasons[0] != 2 {
		t.Fatalf("SUBACK %v", sa.Reasons)
	}
	pub := d.Client5(t, "q2pub", 0)
	if r := pub.Publish(t, &paho5.Publish{Topic: "q2/a", QoS: 2, Payload: []byte("one")}); r == nil || r.ReasonCode != 0 {
		t.Fatalf("PUBREC %+v", r)
	}
	first := sub.PublishOf()
	id := first.PacketID
	if first.QoS != 2 || first.Duplicate || string(first.Payload) != "one" || id == 0 {
		t.Fatalf("PUBLISH %v", first)
	}
	sub.Conn.Close() // no PUBREC

	// Reconnect: the same PUBLISH, DUP set.
	sub = d.Raw(t)
	if ack := sub.Session("q2sub", false, 3600); !ack.SessionPresent {
		t.Fatal("session not present")
	}
	p := sub.PublishOf()
	if p.PacketID != id || !p.Duplicate || p.QoS != 2 || string(p.Payload) != "one" {
		t.Fatalf("after a reconnect: %v, want id %d with DUP", p, id)
	}
	sub.Conn.Close()

	// A restart: the same again.
	d.restart()
	sub = d.Raw(t)
	if ack := sub.Session("q2sub", false, 3600); !ack.SessionPresent {
		t.Fatal("session not present after the restart")
	}
	p = sub.PublishOf()
	if p.PacketID != id || !p.Duplicate || string(p.Payload) != "one" {
		t.Fatalf("after a restart: %v, want id %d with DUP", p, id)
	}
	sub.Ack(packets.PUBREC, id)
	if rel := sub.Expect(packets.PUBREL); rel.Content.(*packets.Pubrel).PacketID != id {
		t.Fatalf("PUBREL for %d", rel.Content.(*packets.Pubrel).PacketID)
	}
	sub.Conn.Close() // no PUBCOMP

	// After PUBREC, a reconnect and a restart resend PUBREL, never the
	// message.
	for _, restart := range []bool{false, true} {
		if restart {
			d.restart()
		}
		sub = d.Raw(t)
		sub.Session("q2sub", false, 3600)
		if rel := sub.Expect(packets.PUBREL); rel.Content.(*packets.Pubrel).PacketID != id {
			t.Fatalf("restart %v: PUBREL for %d", restart, rel.Content.(*packets.Pubrel).PacketID)
		}
		sub.Silent(100 * time.Millisecond)
		sub.Conn.Close()
	}
	sub = d.Raw(t)
	sub.Session("q2sub", false, 3600)
	sub.Expect(packets.PUBREL)
	sub.Ack(packets.PUBCOMP, id)
	sub.Silent(100 * time.Millisecond)
	sub.Disconnect()
	// Done with: nothing comes again.
	sub = d.Raw(t)
	sub.Session("q2sub", false, 3600)
	sub.Silent(200 * time.Millisecond)
}

// A QoS 2 publish of a persistent session is routed once although the
// client resends it after a restart of the broker (its packet id is
// journaled with the message), and its id may be used again after
// PUBCOMP.
func TestQoS2PublishRoutedOnceAcrossRestart(t *testing.T) {
	d := startDurable(t, mqtt.Config{})
	watch := d.Raw(t)
	watch.Session("watch", true, 3600)
	watch.Subscribe(1, nil, packets.SubOptions{Topic: "in/#", QoS: 1})
	watch.Disconnect()

	p := d.Raw(t)
	p.Session("p2", true, 3600)
	p.Publish(&packets.Publish{Topic: "in/x", QoS: 2, PacketID: 7, Payload: []byte("x")})
	p.Expect(packets.PUBREC)
	p.Conn.Close()
	d.restart()

	p = d.Raw(t)
	if ack := p.Session("p2", false, 3600); !ack.SessionPresent {
		t.Fatal("session not present")
	}
	p.Publish(&packets.Publish{Topic: "in/x", QoS: 2, PacketID: 7, Duplicate: true, Payload: []byte("x")})
	p.Expect(packets.PUBREC)
	p.Ack(packets.PUBREL, 7)
	if c := p.Expect(packets.PUBCOMP).Content.(*packets.Pubcomp); c.PacketID != 7 || c.ReasonCode != 0 {
		t.Fatalf("PUBCOMP %d reason %#x", c.PacketID, c.ReasonCode)
	}
	// Released: 7 is a new message now.
	p.Publish(&packets.Publish{Topic: "in/x", QoS: 2, PacketID: 7, Payload: []byte("y")})
	p.Expect(packets.PUBREC)
	p.Ack(packets.PUBREL, 7)
	p.Expect(packets.PUBCOMP)

	watch = d.Raw(t)
	watch.Session("watch", false, 3600)
	var bodies []string
	for range 2 {
		m := watch.PublishOf()
		bodies = append(bodies, string(m.Payload))
		watch.Ack(packets.PUBACK, m.PacketID)
	}
	watch.Silent(100 * time.Millisecond)
	if strings.Join(bodies, ",") != "x,y" {
		t.Fatalf("delivered %v, want x once then y", bodies)
	}
}

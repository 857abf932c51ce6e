package mqtt_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"
	pahopackets "github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/mqtt"
	"github.com/junctionmq/junction/mqtt/mqtttest"
)

// strict accepts alice and carol (any password but "wrong"), refuses
// bob, and refuses anonymous clients.
type strict struct{}

func (strict) Authenticate(_ context.Context, login, pass string) (string, error) {
	if login == "" || login == "bob" || pass == "wrong" {
		return "", core.ErrAuthFailed
	}
	return login, nil
}

// connect311 is an MQTT 3.1.1 CONNECT (protocol level level) with the
// given flags, keep-alive 60, client id, and user name and password
// when their flags are set.
func connect311(level, flags byte, id, user, pass string) []byte {
	str := func(b []byte, s string) []byte { return append(append(b, byte(len(s)>>8), byte(len(s))), s...) }
	body := str(nil, "MQTT")
	body = append(body, level, flags, 0, 60)
	body = str(body, id)
	if flags&0x80 != 0 {
		body = str(body, user)
	}
	if flags&0x40 != 0 {
		body = str(body, pass)
	}
	return append([]byte{0x10, byte(len(body))}, body...)
}

// The CONNACK return codes of MQTT 3.1.1 (§3.2.2.3), each followed by
// the close where the spec asks for one.
func TestConnack311ReturnCodes(t *testing.T) {
	tb := mqtttest.StartFull(t, mqtt.Config{}, core.Config{Authenticator: strict{}})
	for _, tc := range []struct {
		name    string
		connect []byte
		want    string // CONNACK, hex
		closed  bool
	}{
		{"unacceptable protocol level", connect311(9, 0x02, "c", "", ""), "20020001", true},
		{"empty client id, clean session 0", connect311(4, 0xc0, "", "alice", "pw"), "20020002", true},
		{"bad user name or password", connect311(4, 0xc2, "c", "alice", "wrong"), "20020004", true},
		{"refused user", connect311(4, 0xc2, "c", "bob", "pw"), "20020004", true},
		{"anonymous, not authorized", connect311(4, 0x02, "c", "", ""), "20020005", true},
		{"accepted", connect311(4, 0xc2, "c", "alice", "pw"), "20020000", false},
		{"empty client id, clean session 1: assigned", connect311(4, 0xc2, "", "alice", "pw"), "20020000", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", tb.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Write(tc.connect)
			if !tc.closed {
				ack := readPacket(t, nc)
				if got := fmt.Sprintf("%x", ack); got != tc.want {
					t.Fatalf("CONNACK %s, want %s", got, tc.want)
				}
				return
			}
			if got := fmt.Sprintf("%x", closedWithin(t, nc)); got != tc.want {
				t.Fatalf("broker sent %s before closing, want CONNACK %s", got, tc.want)
			}
		})
	}
	// And as a 3.1.1 client library sees them.
	for user, want := range map[string]error{"bob": pahopackets.ErrorRefusedBadUsernameOrPassword, "": pahopackets.ErrorRefusedNotAuthorised} {
		o := paho.NewClientOptions().AddBroker("tcp://" + tb.Addr).SetClientID("x").SetProtocolVersion(4).
			SetAutoReconnect(false).SetConnectRetry(false)
		if user != "" {
			o.SetUsername(user).SetPassword("pw")
		}
		tok := paho.NewClient(o).Connect()
		if !tok.WaitTimeout(10*time.Second) || !errors.Is(tok.Error(), want) {
			t.Fatalf("user %q: %v, want %v", user, tok.Error(), want)
		}
	}
}

// MQTT 5 refusals: CONNACK reason codes, then the close.
func TestConnack5ReasonCodes(t *testing.T) {
	tb := mqtttest.StartFull(t, mqtt.Config{}, core.Config{Authenticator: strict{}})
	for _, tc := range []struct {
		name string
		c    *packets.Connect
		want byte
	}{
		{"bad user name or password", &packets.Connect{ClientID: "c", UsernameFlag: true, Username: "alice", PasswordFlag: true, Password: []byte("wrong")}, 0x86},
		{"not authorized", &packets.Connect{ClientID: "c"}, 0x87},
		{"bad authentication method", &packets.Connect{ClientID: "c", UsernameFlag: true, Username: "alice",
			Properties: &packets.Properties{AuthMethod: "SCRAM-SHA-1"}}, 0x8c},
		{"will topic invalid", &packets.Connect{ClientID: "c", UsernameFlag: true, Username: "alice",
			WillFlag: true, WillTopic: "a/#", WillMessage: []byte("x"), WillProperties: &packets.Properties{}}, 0x90},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tb.Raw(t)
			if ack := r.Connect(tc.c); ack.ReasonCode != tc.want || ack.SessionPresent {
				t.Fatalf("CONNACK %#x (session present %v), want %#x", ack.ReasonCode, ack.SessionPresent, tc.want)
			}
			if got := r.Closed(); len(got) != 0 {
				t.Fatalf("%d packets after the refusal", len(got))
			}
		})
	}
}

// An MQTT 5 connection the broker ends gets DISCONNECT with the reason,
// then the close.
func TestDisconnectReasons(t *testing.T) {
	tb := mqtttest.StartWith(t, mqtt.Config{TopicAliasMaximum: 2, ReceiveMaximum: 2, MaxQoS: 1})
	for _, tc := range []struct {
		name string
		do   func(r *mqtttest.Raw)
		want byte
	}{
		{"malformed packet", func(r *mqtttest.Raw) { r.Conn.Write([]byte{0x30, 0x03, 0x00, 0x09, 'a'}) }, 0x81},
		{"protocol error: a second CONNECT", func(r *mqtttest.Raw) {
			cp := packets.NewControlPacket(packets.CONNECT)
			cp.Content = &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, ClientID: "again"}
			r.Send(cp)
		}, 0x82},
		{"topic alias invalid", func(r *mqtttest.Raw) {
			alias := uint16(3)
			r.Publish(&packets.Publish{Topic: "a", Payload: []byte("x"), Properties: &packets.Properties{TopicAlias: &alias}})
		}, 0x94},
		{"QoS not supported", func(r *mqtttest.Raw) {
			r.Publish(&packets.Publish{Topic: "a", QoS: 2, PacketID: 1, Payload: []byte("x")})
		}, 0x9b},
		{"receive maximum exceeded", func(r *mqtttest.Raw) {
			// QoS 1 publishes nobody journals are answered at once; an
			// unreleased QoS 2 one is not (MaxQoS 1 refuses QoS 2, so a
			// broker with the default for this case).
		}, 0},
	} {
		if tc.want == 0 {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			r := tb.Raw(t)
			r.Session("c-"+strconv.Itoa(int(tc.want)), true, 0)
			tc.do(r)
			got := r.Closed()
			if len(got) != 1 || got[0].FixedHeader.Type != packets.DISCONNECT || got[0].Content.(*packets.Disconnect).ReasonCode != tc.want {
				t.Fatalf("got %v before the close, want DISCONNECT %#x", names(got), tc.want)
			}
		})
	}
	t.Run("receive maximum exceeded", func(t *testing.T) {
		tb := mqtttest.StartWith(t, mqtt.Config{ReceiveMaximum: 2})
		r := tb.Raw(t)
		if ack := r.Session("rm", true, 0); ack.Properties == nil || ack.Properties.ReceiveMaximum == nil || *ack.Properties.ReceiveMaximum != 2 {
			t.Fatal("Receive Maximum 2 not advertised")
		}
		for id := uint16(1); id <= 2; id++ {
			r.Publish(&packets.Publish{Topic: "a", QoS: 2, PacketID: id, Payload: []byte("x")})
			r.Expect(packets.PUBREC) // not released: both still count
		}
		r.Publish(&packets.Publish{Topic: "a", QoS: 2, PacketID: 3, Payload: []byte("x")})
		got := r.Closed()
		if len(got) != 1 || got[0].FixedHeader.Type != packets.DISCONNECT || got[0].Content.(*packets.Disconnect).ReasonCode != 0x93 {
			t.Fatalf("got %v, want DISCONNECT 0x93", names(got))
		}
	})
	t.Run("session taken over", func(t *testing.T) {
		r := tb.Raw(t)
		r.Session("same", true, 0)
		tb.Raw(t).Session("same", true, 0)
		if got := r.Closed(); len(got) != 1 || got[0].Content.(*packets.Disconnect).ReasonCode != 0x8e {
			t.Fatalf("got %v, want DISCONNECT 0x8E", names(got))
		}
	})
	t.Run("administrative action", func(t *testing.T) {
		r := tb.Raw(t)
		r.Session("admin-closed", true, 0)
		for _, c := range tb.Core.Connections() {
			if c.ClientID == "mqtt/admin-closed" {
				tb.Core.CloseConnection(c.ID)
			}
		}
		if got := r.Closed(); len(got) != 1 || got[0].Content.(*packets.Disconnect).ReasonCode != 0x98 {
			t.Fatalf("got %v, want DISCONNECT 0x98", names(got))
		}
	})
	t.Run("server shutting down", func(t *testing.T) {
		tb := mqtttest.Start(t)
		r := tb.Raw(t)
		r.Session("down", true, 0)
		tb.Server.Close()
		if got := r.Closed(); len(got) != 1 || got[0].Content.(*packets.Disconnect).ReasonCode != 0x8b {
			t.Fatalf("got %v, want DISCONNECT 0x8B", names(got))
		}
	})
}

// The keep-alive: a Server Keep Alive imposed on a client that asked for
// none, then DISCONNECT 0x8D when it stays silent past 1.5 times it.
func TestServerKeepAlive(t *testing.T) {
	tb := mqtttest.StartWith(t, mqtt.Config{MaxKeepAlive: time.Second})
	r := tb.Raw(t)
	start := time.Now()
	ack := r.Connect(&packets.Connect{ClientID: "ka", CleanStart: true, KeepAlive: 0})
	if ack.ReasonCode != 0 || ack.Properties.ServerKeepAlive == nil || *ack.Properties.ServerKeepAlive != 1 {
		t.Fatalf("CONNACK %#x, Server Keep Alive %v, want 1", ack.ReasonCode, ack.Properties.ServerKeepAlive)
	}
	got := r.Closed()
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Fatalf("closed after %v, before 1.5 times the keep-alive", d)
	}
	if len(got) != 1 || got[0].Content.(*packets.Disconnect).ReasonCode != 0x8d {
		t.Fatalf("got %v, want DISCONNECT 0x8D", names(got))
	}
}

func names(cps []*packets.ControlPacket) []string {
	var out []string
	for _, cp := range cps {
		s := cp.PacketType()
		if d, ok := cp.Content.(*packets.Disconnect); ok {
			s += fmt.Sprintf("(%#x)", d.ReasonCode)
		}
		out = append(out, s)
	}
	return out
}

// MQTT 5 CONNACK advertises what the broker enforces.
func TestConnackProperties(t *testing.T) {
	tb := mqtttest.StartWith(t, mqtt.Config{MaxPacketSize: 4096, ReceiveMaximum: 100, TopicAliasMaximum: 10,
		MaxSessionExpiry: time.Hour, MaxKeepAlive: time.Minute, MaxQoS: 1})
	r := tb.Raw(t)
	want := uint32(7200)
	ack := r.Connect(&packets.Connect{ClientID: "", CleanStart: true, KeepAlive: 120,
		Properties: &packets.Properties{SessionExpiryInterval: &want}})
	p := ack.Properties
	if ack.ReasonCode != 0 || p == nil {
		t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	u16 := func(v *uint16) string {
		if v == nil {
			return "absent"
		}
		return strconv.Itoa(int(*v))
	}
	u32 := func(v *uint32) string {
		if v == nil {
			return "absent"
		}
		return strconv.Itoa(int(*v))
	}
	b := func(v *byte) string {
		if v == nil {
			return "absent"
		}
		return strconv.Itoa(int(*v))
	}
	got := fmt.Sprintf("expiry=%s recvmax=%s maxpacket=%s aliasmax=%s keepalive=%s maxqos=%s retain=%s wildcard=%s subid=%s shared=%s assigned=%v",
		u32(p.SessionExpiryInterval), u16(p.ReceiveMaximum), u32(p.MaximumPacketSize), u16(p.TopicAliasMaximum),
		u16(p.ServerKeepAlive), b(p.MaximumQOS), b(p.RetainAvailable), b(p.WildcardSubAvailable), b(p.SubIDAvailable),
		b(p.SharedSubAvailable), strings.HasPrefix(p.AssignedClientID, "auto-"))
	if want := "expiry=3600 recvmax=100 maxpacket=4096 aliasmax=10 keepalive=60 maxqos=1 retain=1 wildcard=1 subid=1 shared=1 assigned=true"; got != want {
		t.Fatalf("CONNACK properties\n got %s\nwant %s", got, want)
	}
	// And they hold: a subscription is granted QoS 1 at most.
	if sa := r.Subscribe(1, nil, packets.SubOptions{Topic: "q", QoS: 2}); len(sa.Reasons) != 1 || sa.Reasons[0] != 1 {
		t.Fatalf("SUBACK %v, want granted QoS 1", sa.Reasons)
	}
	// A client that asks for nothing beyond the broker's gets no Server
	// Keep Alive nor Session Expiry Interval back.
	r2 := tb.Raw(t)
	ack = r2.Session("plain", true, 60)
	if ack.Properties.ServerKeepAlive != nil || ack.Properties.SessionExpiryInterval != nil || ack.Properties.AssignedClientID != "" {
		t.Fatalf("CONNACK of a plain client: %+v", ack.Properties)
	}
}

// Outbound QoS 2 through a client library: exactly once.
func TestQoS2ToSubscribers(t *testing.T) {
	tb := mqtttest.Start(t)
	sub := tb.Client5(t, "s2", 0)
	if code := sub.Subscribe(t, "e/+", 2); code != 2 {
		t.Fatalf("SUBACK %#x", code)
	}
	pub := tb.Client5(t, "p2", 0)
	for i := range 10 {
		pub.Publish(t, &paho5.Publish{Topic: "e/x", QoS: 2, Payload: []byte{byte(i)}})
	}
	for i := range 10 {
		if p := sub.Next(t); p.QoS != 2 || p.Payload[0] != byte(i) {
			t.Fatalf("message %d: %v qos %d", i, p.Payload, p.QoS)
		}
	}
	select {
	case p := <-sub.Inbox:
		t.Fatalf("again: %v", p.Payload)
	case <-time.After(100 * time.Millisecond):
	}
}

// Message expiry: a retained message past its expiry is never
// delivered; one not yet expired carries the time it has left.
func TestRetainedMessageExpiry(t *testing.T) {
	tb := mqtttest.Start(t)
	pub := tb.Client5(t, "p", 0)
	one, long := uint32(1), uint32(30)
	pub.Publish(t, &paho5.Publish{Topic: "exp/short", QoS: 1, Retain: true, Payload: []byte("short"), Properties: &paho5.PublishProperties{MessageExpiry: &one}})
	pub.Publish(t, &paho5.Publish{Topic: "exp/long", QoS: 1, Retain: true, Payload: []byte("long"), Properties: &paho5.PublishProperties{MessageExpiry: &long}})
	time.Sleep(1100 * time.Millisecond)
	sub := tb.Client5(t, "s", 0)
	sub.Subscribe(t, "exp/#", 1)
	p := sub.Next(t)
	if string(p.Payload) != "long" || !p.Retain || p.Properties.MessageExpiry == nil || *p.Properties.MessageExpiry > 29 || *p.Properties.MessageExpiry < 20 {
		t.Fatalf("got %q retain %v expiry %v, want long with at most 29s left", p.Payload, p.Retain, p.Properties.MessageExpiry)
	}
	select {
	case p := <-sub.Inbox:
		t.Fatalf("expired retained message delivered: %q", p.Payload)
	case <-time.After(100 * time.Millisecond):
	}
}

// Retain handling, retain-as-published, subscription identifiers, user
// properties in order with repeats, the payload format indicator.
func TestSubscriptionOptionsAndProperties(t *testing.T) {
	tb := mqtttest.Start(t)
	pub := tb.Client5(t, "p", 0)
	pub.Publish(t, &paho5.Publish{Topic: "rh/a", QoS: 1, Retain: true, Payload: []byte("kept")})
	r := tb.Raw(t)
	r.Session("opts", true, 0)
	id := 7
	r.Subscribe(1, &packets.Properties{SubscriptionIdentifier: &id}, packets.SubOptions{Topic: "rh/#", QoS: 1, RetainHandling: 0})
	m := r.PublishOf()
	if string(m.Payload) != "kept" || !m.Retain || m.Properties.SubscriptionIdentifier == nil || *m.Properties.SubscriptionIdentifier != 7 {
		t.Fatalf("retained at subscribe: %v", m)
	}
	r.Ack(packets.PUBACK, m.PacketID)
	// Again, retain handling 1: the subscription exists, no retained
	// message. And retain handling 2 on a new one: none either.
	r.Subscribe(2, nil, packets.SubOptions{Topic: "rh/#", QoS: 1, RetainHandling: 1, RetainAsPublished: true})
	r.Subscribe(3, nil, packets.SubOptions{Topic: "rh/+", QoS: 0, RetainHandling: 2})
	r.Silent(100 * time.Millisecond)
	// A live retained publish: rh/# (retain-as-published) keeps the flag,
	// rh/+ does not; rh/# no longer has a subscription identifier.
	format := byte(1)
	pub.Publish(t, &paho5.Publish{Topic: "rh/a", QoS: 1, Retain: true, Payload: []byte("live"),
		Properties: &paho5.PublishProperties{PayloadFormat: &format,
			User: paho5.UserProperties{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}, {Key: "a", Value: "3"}}}})
	got := map[bool]*packets.Publish{}
	for range 2 {
		m := r.PublishOf()
		got[m.QoS == 1] = m
		if m.QoS == 1 {
			r.Ack(packets.PUBACK, m.PacketID)
		}
	}
	rap, plain := got[true], got[false]
	if rap == nil || plain == nil {
		t.Fatalf("copies %v", got)
	}
	if !rap.Retain || plain.Retain || rap.Properties.SubscriptionIdentifier != nil {
		t.Fatalf("retain-as-published copy retain=%v subid=%v, plain copy retain=%v", rap.Retain, rap.Properties.SubscriptionIdentifier, plain.Retain)
	}
	for _, m := range []*packets.Publish{rap, plain} {
		var users []string
		for _, u := range m.Properties.User {
			users = append(users, u.Key+"="+u.Value)
		}
		if strings.Join(users, ",") != "a=1,b=2,a=3" || m.Properties.PayloadFormat == nil || *m.Properties.PayloadFormat != 1 {
			t.Fatalf("user properties %v, payload format %v", users, m.Properties.PayloadFormat)
		}
	}
}

// Will delay [MQTT-3.1.3-9]: the will is published once the delay has
// passed, not if the client is back before.
func TestWillDelay(t *testing.T) {
	tb := mqtttest.Start(t)
	watcher := tb.Client5(t, "watcher", 0)
	watcher.Subscribe(t, "will/#", 1)
	connect := func(id string) *mqtttest.Raw {
		r := tb.Raw(t)
		expiry, delay := uint32(60), uint32(1)
		ack := r.Connect(&packets.Connect{ClientID: id, CleanStart: true,
			Properties: &packets.Properties{SessionExpiryInterval: &expiry},
			WillFlag:   true, WillTopic: "will/" + id, WillMessage: []byte("gone " + id), WillQOS: 1,
			WillProperties: &packets.Properties{WillDelayInterval: &delay}})
		if ack.ReasonCode != 0 {
			t.Fatalf("CONNACK %#x", ack.ReasonCode)
		}
		return r
	}
	start := time.Now()
	connect("late").Conn.Close()
	back := connect("back")
	back.Conn.Close()
	r := tb.Raw(t)
	expiry := uint32(60)
	r.Connect(&packets.Connect{ClientID: "back", CleanStart: false, Properties: &packets.Properties{SessionExpiryInterval: &expiry}})
	p := watcher.Next(t)
	if string(p.Payload) != "gone late" || time.Since(start) < 900*time.Millisecond {
		t.Fatalf("will %q after %v", p.Payload, time.Since(start))
	}
	select {
	case p := <-watcher.Inbox:
		t.Fatalf("will of a client that came back: %q", p.Payload)
	case <-time.After(1500 * time.Millisecond):
	}
}

// Session expiry: an MQTT 5 session ends once its interval has passed
// without a connection; its subscription's messages go with it.
func TestSessionExpiry(t *testing.T) {
	tb := mqtttest.Start(t)
	r := tb.Raw(t)
	r.Session("short", true, 1)
	r.Subscribe(1, nil, packets.SubOptions{Topic: "x", QoS: 1})
	r.Disconnect()
	if tb.Core.Queue("mqtt/short.x") == nil {
		t.Fatal("no durable subscription")
	}
	testserve.Eventually(t, "the session to expire", func() bool { return tb.Core.Queue("mqtt/short.x") == nil })
	if ack := tb.Raw(t).Session("short", false, 1); ack.SessionPresent {
		t.Fatal("expired session present")
	}
}

// The $SYS topics carry core's statistics, every protocol's; a filter
// beginning with a wildcard does not receive them [MQTT-4.7.2-1].
func TestSysTopics(t *testing.T) {
	tb := mqtttest.StartWith(t, mqtt.Config{SysInterval: 20 * time.Millisecond, Version: "9.9"})
	stomp, err := tb.Core.NewSession(core.SessionOptions{Protocol: "stomp"})
	if err != nil {
		t.Fatal(err)
	}
	defer stomp.Close()
	if err := stomp.Send(context.Background(), &core.Message{Address: "s", RoutingType: core.Multicast, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	all := tb.Client5(t, "all", 0)
	all.Subscribe(t, "#", 0)
	sys := tb.Client5(t, "sys", 0)
	sys.Subscribe(t, "$SYS/broker/#", 0)
	want := map[string]string{
		"$SYS/broker/version":                 "Junction 9.9",
		"$SYS/broker/clients/mqtt/connected":  "2",
		"$SYS/broker/clients/stomp/connected": "1",
		"$SYS/broker/clients/connected":       "3",
		"$SYS/broker/messages/stomp/received": "1",
		"$SYS/broker/subscriptions/count":     "2",
	}
	got := map[string]string{}
	matches := func() bool {
		for topic, v := range want {
			if got[topic] != v {
				return false
			}
		}
		_, ok := got["$SYS/broker/retained messages/count"]
		return ok
	}
	deadline := time.After(5 * time.Second)
	for !matches() {
		select {
		case p := <-sys.Inbox:
			got[p.Topic] = string(p.Payload) // the latest value of each
		case <-deadline:
			t.Fatalf("$SYS values\n got %v\nwant %v", got, want)
		}
	}
	if !strings.HasSuffix(got["$SYS/broker/uptime"], " seconds") {
		t.Errorf("uptime %q", got["$SYS/broker/uptime"])
	}
	select {
	case p := <-all.Inbox:
		t.Fatalf("# received %s", p.Topic)
	case <-time.After(100 * time.Millisecond):
	}
}

// A PUBLISH from a client to a $ topic is refused: those are the
// broker's.
func TestPublishToSysRefused(t *testing.T) {
	tb := mqtttest.Start(t)
	sys := tb.Client5(t, "sys", 0)
	sys.Subscribe(t, "$SYS/own", 0)
	r := tb.Client5(t, "p", 0).Publish(t, &paho5.Publish{Topic: "$SYS/own", QoS: 1, Payload: []byte("x")})
	if r == nil || r.ReasonCode != 0x87 {
		t.Fatalf("PUBACK %+v, want 0x87", r)
	}
	select {
	case p := <-sys.Inbox:
		t.Fatalf("delivered %q", p.Payload)
	case <-time.After(50 * time.Millisecond):
	}
	_ = bytes.Equal
}

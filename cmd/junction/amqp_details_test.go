package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho5 "github.com/eclipse/paho.golang/paho"
	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/core"
)

// A message recovered after a restart may have been delivered before
// the broker stopped: an AMQP receiver is told so by delivery-count ≥ 1
// (what Qpid JMS reads for JMSRedelivered) as well as first-acquirer
// false. A message sent after the restart is not flagged.
func TestAMQPRecoveredMessageHasDeliveryCount(t *testing.T) {
	cfg := testConfig(t)
	_, stop := startServe(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, s := amqpSession(t, nil)
	snd := must[*goamqp.Sender](t)(s.NewSender(ctx, "queue://recovered", nil))
	// Delivered once, not settled, when the broker stops: the typical
	// possible duplicate.
	for _, body := range []string{"delivered-before", "never-delivered"} {
		if err := snd.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte(body)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	r := must[*goamqp.Receiver](t)(s.NewReceiver(ctx, "queue://recovered", &goamqp.ReceiverOptions{Credit: 1}))
	if m, err := r.Receive(ctx, nil); err != nil || string(m.GetData()) != "delivered-before" ||
		m.Header.DeliveryCount != 0 || !m.Header.FirstAcquirer {
		t.Fatalf("first delivery: %v %+v", err, m)
	}
	conn.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	cfg.AMQP.Listen = "127.0.0.1:0"
	startServe(t, cfg)
	_, s = amqpSession(t, nil)
	snd = must[*goamqp.Sender](t)(s.NewSender(ctx, "queue://recovered", nil))
	if err := snd.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte("after-restart")}}, nil); err != nil {
		t.Fatal(err)
	}
	r = must[*goamqp.Receiver](t)(s.NewReceiver(ctx, "queue://recovered", &goamqp.ReceiverOptions{Credit: 10}))
	for _, want := range []struct {
		body      string
		recovered bool
	}{{"delivered-before", true}, {"never-delivered", true}, {"after-restart", false}} {
		m := amqpReceive(t, r)
		if string(m.GetData()) != want.body {
			t.Fatalf("got %q, want %q", m.GetData(), want.body)
		}
		if want.recovered && (m.Header.DeliveryCount < 1 || m.Header.FirstAcquirer) {
			t.Errorf("recovered %q: delivery-count %d, first-acquirer %v; want ≥ 1 and false", want.body, m.Header.DeliveryCount, m.Header.FirstAcquirer)
		}
		if !want.recovered && (m.Header.DeliveryCount != 0 || !m.Header.FirstAcquirer) {
			t.Errorf("fresh %q: delivery-count %d, first-acquirer %v; want 0 and true", want.body, m.Header.DeliveryCount, m.Header.FirstAcquirer)
		}
	}
}

// goAMQPTypes are the AMQP types go-amqp can send and tell apart on
// receipt (it reads a symbol as a string and has no char, decimal or
// described values: the raw-frame test in package amqp and the interop
// suite's Qpid Proton scenario cover those).
func goAMQPTypes() map[string]any {
	return map[string]any{
		"boolean": true, "ubyte": uint8(200), "ushort": uint16(60000), "uint": uint32(4000000000),
		"ulong": uint64(7), "ulong-big": uint64(1<<63 + 5), "byte": int8(-7), "short": int16(-300), "int": int32(-7),
		"long": int64(-9_000_000_000_000), "float": float32(1.5), "double": -2.25,
		"time": time.UnixMilli(1_700_000_000_123), "uuid": goamqp.UUID{0xf8, 0x1d, 0x4f, 0xae, 15: 0xf6},
		"binary": []byte{0, 1, 2, 0xff}, "string": "grüße 日本", "null": nil,
		"list": []any{int32(1), "two", nil}, "map": map[string]any{"k": int16(3)},
	}
}

// checkGoAMQPTypes compares what go-amqp decoded with what it sent:
// same Go type (so same AMQP type), same value.
func checkGoAMQPTypes(t *testing.T, what string, got map[string]any) {
	t.Helper()
	for k, want := range goAMQPTypes() {
		v, ok := got[k]
		switch w := want.(type) {
		case time.Time:
			if tv, isTime := v.(time.Time); isTime && tv.Equal(w) {
				continue
			}
		default:
			if ok && reflect.DeepEqual(v, want) {
				continue
			}
		}
		t.Errorf("%s: %q is %T %#v, want %T %#v", what, k, v, v, want, want)
	}
}

// Application properties, message annotations and the footer keep their
// AMQP types for AMQP receivers through the journal, page files and a
// restart.
func TestAMQPTypesSurviveRestartAndPaging(t *testing.T) {
	cfg := testConfig(t)
	cfg.Persistence.PageSegmentSize = 64 << 10
	cfg.AddressSettings = []core.AddressSettings{{Match: "typed.paged", MaxSizeBytes: ptrTo(int64(4096))}}
	_, stop := startServe(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, s := amqpSession(t, nil)
	const paged = 30
	message := func(i int) *goamqp.Message {
		return &goamqp.Message{
			Header:                &goamqp.MessageHeader{Durable: true},
			Annotations:           goamqp.Annotations{"x-opt-int": int32(-7), "x-opt-list": []any{uint8(1)}},
			ApplicationProperties: goAMQPTypes(),
			Footer:                goamqp.Annotations{"x-opt-sig": []byte{byte(i)}},
			Data:                  [][]byte{bytes.Repeat([]byte{'p'}, 512)},
		}
	}
	for _, q := range []struct {
		addr string
		n    int
	}{{"queue://typed.journal", 1}, {"queue://typed.paged", paged}} {
		snd := must[*goamqp.Sender](t)(s.NewSender(ctx, q.addr, nil))
		for i := range q.n {
			if err := snd.Send(ctx, message(i), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if st, err := lastInstance.broker.QueueStat("typed.paged"); err != nil || st.Paged == 0 {
		t.Fatalf("typed.paged did not page: %+v %v", st, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	cfg.AMQP.Listen = "127.0.0.1:0"
	startServe(t, cfg)
	_, s = amqpSession(t, nil)
	for _, q := range []struct {
		addr string
		n    int
	}{{"queue://typed.journal", 1}, {"queue://typed.paged", paged}} {
		r := must[*goamqp.Receiver](t)(s.NewReceiver(ctx, q.addr, &goamqp.ReceiverOptions{Credit: 10}))
		for i := range q.n {
			m := amqpReceive(t, r)
			what := fmt.Sprintf("%s message %d after the restart", q.addr, i)
			checkGoAMQPTypes(t, what, m.ApplicationProperties)
			if m.Annotations["x-opt-int"] != int32(-7) || !reflect.DeepEqual(m.Annotations["x-opt-list"], []any{uint8(1)}) {
				t.Errorf("%s: annotations %#v", what, m.Annotations)
			}
			if sig, _ := m.Footer["x-opt-sig"].([]byte); len(sig) != 1 || sig[0] != byte(i) {
				t.Errorf("%s: footer %#v", what, m.Footer)
			}
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// The documented mapping of AMQP values for the other protocols, with
// real clients: a STOMP subscriber gets every value core can carry as a
// header in text (numbers in decimal, booleans, binary in base64, a
// timestamp in ms, null empty); an MQTT 5 subscriber gets those that are
// strings in core as user properties (strings, symbols, chars, uuids, an
// unsigned long above 2^63-1); lists, maps, arrays, decimals and
// described values reach neither.
func TestAMQPTypesToStompAndMQTT(t *testing.T) {
	stompAddr, _ := startServe(t, testConfig(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	st, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Disconnect()
	sub, err := st.Subscribe("/topic/typed.map", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send("/queue/barrier", "", nil, gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", lastInstance.addrs["mqtt"].String())
	if err != nil {
		t.Fatal(err)
	}
	mqttGot := make(chan *paho5.Publish, 1)
	m5 := paho5.NewClient(paho5.ClientConfig{Conn: nc, OnPublishReceived: []func(paho5.PublishReceived) (bool, error){
		func(r paho5.PublishReceived) (bool, error) { mqttGot <- r.Packet; return true, nil },
	}})
	if _, err := m5.Connect(ctx, &paho5.Connect{ClientID: "typed", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	defer m5.Disconnect(&paho5.Disconnect{})
	if _, err := m5.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: "typed/map", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}

	_, s := amqpSession(t, nil)
	props := goAMQPTypes()
	props["symbol"] = goamqp.Symbol("a-symbol")
	snd := must[*goamqp.Sender](t)(s.NewSender(ctx, "topic://typed.map", nil))
	if err := snd.Send(ctx, &goamqp.Message{ApplicationProperties: props, Data: [][]byte{[]byte("x")}}, nil); err != nil {
		t.Fatal(err)
	}

	asText := map[string]string{
		"boolean": "true", "ubyte": "200", "ushort": "60000", "uint": "4000000000", "ulong": "7",
		"ulong-big": "9223372036854775813", "byte": "-7", "short": "-300", "int": "-7", "long": "-9000000000000",
		"float": "1.5", "double": "-2.25", "time": "1700000000123", "uuid": "f81d4fae-0000-0000-0000-0000000000f6",
		"binary": "AAEC/w==", "string": "grüße 日本", "null": "", "symbol": "a-symbol",
	}
	select {
	case m := <-sub.C:
		for k, want := range asText {
			if got, ok := m.Header.Contains(k); !ok || got != want {
				t.Errorf("STOMP header %q: %q (present %v), want %q", k, got, ok, want)
			}
		}
		for _, k := range []string{"list", "map"} {
			if v, ok := m.Header.Contains(k); ok {
				t.Errorf("STOMP header %q: %q; want none", k, v)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("STOMP subscriber got nothing")
	}
	select {
	case p := <-mqttGot:
		got := map[string]string{}
		for _, u := range p.Properties.User {
			got[u.Key] = u.Value
		}
		want := map[string]string{"string": "grüße 日本", "symbol": "a-symbol", "ulong-big": "9223372036854775813",
			"uuid": "f81d4fae-0000-0000-0000-0000000000f6"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("MQTT 5 user properties %v, want %v", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("MQTT subscriber got nothing")
	}
}

// The properties a front-end keeps for itself (core.InternalPropertyPrefix)
// are its own: a STOMP client's header of such a name is dropped, so it
// cannot make an AMQP consumer read its body as encoded AMQP sections
// (and so forge their header, properties or user-id).
func TestClientCannotSetInternalProperties(t *testing.T) {
	stompAddr, _ := startServe(t, testConfig(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, s := amqpSession(t, nil)
	r := must[*goamqp.Receiver](t)(s.NewReceiver(ctx, "queue://forged", nil))
	st, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Disconnect()
	// A body that is a valid properties section naming another user.
	forged := []byte("\x00\x53\x73\xc0\x09\x02\x40\xa0\x05admin")
	if err := st.Send("/queue/forged", "", forged, gostomp.SendOpt.Receipt,
		gostomp.SendOpt.Header("_JUNCTION_AMQP_BODY", "raw"), gostomp.SendOpt.Header("_JUNCTION_ORIGIN", "mqtt"),
		gostomp.SendOpt.Header("region", "eu")); err != nil {
		t.Fatal(err)
	}
	m := amqpReceive(t, r)
	if !bytes.Equal(m.GetData(), forged) || (m.Properties != nil && len(m.Properties.UserID) > 0) {
		t.Fatalf("AMQP consumer got body %q, user-id %q", m.GetData(), m.Properties.UserID)
	}
	for k := range m.ApplicationProperties {
		if strings.HasPrefix(k, core.InternalPropertyPrefix) {
			t.Errorf("application property %q", k)
		}
	}
	if m.ApplicationProperties["region"] != "eu" {
		t.Errorf("application properties %v", m.ApplicationProperties)
	}

	// The same through MQTT 5 user properties; the MQTT publish reaches
	// the queue because the address has one (QueueElseTopic).
	nc, err := net.Dial("tcp", lastInstance.addrs["mqtt"].String())
	if err != nil {
		t.Fatal(err)
	}
	m5 := paho5.NewClient(paho5.ClientConfig{Conn: nc})
	if _, err := m5.Connect(ctx, &paho5.Connect{ClientID: "forger", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	defer m5.Disconnect(&paho5.Disconnect{})
	if _, err := m5.Publish(ctx, &paho5.Publish{Topic: "forged", QoS: 1, Payload: forged, Properties: &paho5.PublishProperties{
		User: paho5.UserProperties{{Key: "_JUNCTION_AMQP_BODY", Value: "raw"}, {Key: "mqtt.retain", Value: "true"}, {Key: "region", Value: "us"}},
	}}); err != nil {
		t.Fatal(err)
	}
	m = amqpReceive(t, r)
	if !bytes.Equal(m.GetData(), forged) || (m.Properties != nil && len(m.Properties.UserID) > 0) {
		t.Fatalf("AMQP consumer got body %q, user-id %q from MQTT", m.GetData(), m.Properties.UserID)
	}
	for k := range m.ApplicationProperties {
		if strings.HasPrefix(k, core.InternalPropertyPrefix) || k == "mqtt.retain" {
			t.Errorf("application property %q from MQTT", k)
		}
	}
	if m.ApplicationProperties["region"] != "us" {
		t.Errorf("application properties from MQTT %v", m.ApplicationProperties)
	}
}

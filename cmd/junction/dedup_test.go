package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho5 "github.com/eclipse/paho.golang/paho"
	gostomp "github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/junctionmq/junction/core"
)

// Duplicate detection from every protocol, through real clients: a
// message sent twice with one _AMQ_DUPL_ID (a STOMP header, an AMQP
// application property, an MQTT 5 user property; an AMQP message-id
// where the address says so) is confirmed both times, delivered once
// and counted for its address in the API and the metrics; in a STOMP
// transaction a duplicate fails the commit.

func artemisConfig(t *testing.T, settings ...core.AddressSettings) Config {
	t.Helper()
	cfg := testConfig(t)
	cfg.AddressSettings = settings
	return cfg
}

func ptr[T any](v T) *T { return &v }

// drainStomp collects the bodies delivered on sub until it has been quiet
// for quiet (bounded by 10 s).
func drainStomp(t *testing.T, sub *gostomp.Subscription, quiet time.Duration) []string {
	t.Helper()
	var out []string
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatalf("receive: %v", m.Err)
			}
			out = append(out, string(m.Body))
		case <-time.After(quiet):
			return out
		case <-deadline:
			return out
		}
	}
}

// apiAddresses returns the API's addresses by name.
func apiAddresses(t *testing.T, console string) map[string]map[string]any {
	t.Helper()
	_, body := httpGet(t, "http://"+console+"/api/v1/addresses")
	var res struct {
		Addresses []map[string]any `json:"addresses"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatalf("addresses: %v: %s", err, body)
	}
	out := map[string]map[string]any{}
	for _, a := range res.Addresses {
		out[a["name"].(string)] = a
	}
	return out
}

func TestDuplicateDetectionFromEveryProtocol(t *testing.T) {
	stompAddr, _ := startServe(t, artemisConfig(t, core.AddressSettings{Match: "dd.msgid", DuplicateIDFromMessageID: ptr(true)}))
	in := lastInstance
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sc, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Disconnect()
	// The MQTT part's subscriber, in place before MQTT publishes (the
	// receipts below come after it).
	sub, err := sc.Subscribe("/topic/dd.mqtt", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}

	// STOMP: both sends get their RECEIPT; one is delivered.
	for _, body := range []string{"s1", "s1 again", "s2"} {
		id := "stomp-1"
		if body == "s2" {
			id = "stomp-2"
		}
		if err := sc.Send("/queue/dd.stomp", "text/plain", []byte(body), gostomp.SendOpt.Receipt,
			gostomp.SendOpt.Header("persistent", "true"), gostomp.SendOpt.Header(core.PropDuplicateID, id)); err != nil {
			t.Fatalf("stomp send %q: %v", body, err)
		}
	}

	// AMQP: the application property, and the message-id where the
	// address setting says so; every send is accepted.
	ac, err := goamqp.Dial(ctx, "amqp://"+in.addrs["amqp"].String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	as, err := ac.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	send := func(to string, m *goamqp.Message) {
		t.Helper()
		snd, err := as.NewSender(ctx, to, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer snd.Close(ctx)
		if err := snd.Send(ctx, m, nil); err != nil {
			t.Fatalf("amqp send to %s: %v", to, err)
		}
	}
	for _, body := range []string{"a1", "a1 again"} {
		send("queue://dd.amqp", &goamqp.Message{Data: [][]byte{[]byte(body)},
			ApplicationProperties: map[string]any{core.PropDuplicateID: "amqp-1"}, Header: &goamqp.MessageHeader{Durable: true}})
	}
	for _, body := range []string{"m1", "m1 again"} {
		send("queue://dd.msgid", &goamqp.Message{Data: [][]byte{[]byte(body)}, Properties: &goamqp.MessageProperties{MessageID: "order-17"}})
		// Without the setting a message-id is no duplicate id.
		send("queue://dd.amqp.plain", &goamqp.Message{Data: [][]byte{[]byte(body)}, Properties: &goamqp.MessageProperties{MessageID: "order-17"}})
	}

	// MQTT 5: a user property; both PUBACKs come, a subscriber of the
	// topic gets one message.
	mc := paho5.NewClient(paho5.ClientConfig{ClientID: "dd-mqtt5", Conn: dialTCP(t, in.addrs["mqtt"].String())})
	if _, err := mc.Connect(ctx, &paho5.Connect{ClientID: "dd-mqtt5", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	defer mc.Disconnect(&paho5.Disconnect{})
	for _, body := range []string{"q1", "q1 again"} {
		p := &paho5.Publish{Topic: "dd/mqtt", QoS: 1, Payload: []byte(body), Properties: &paho5.PublishProperties{}}
		p.Properties.User.Add(core.PropDuplicateID, "mqtt-1")
		res, err := mc.Publish(ctx, p)
		if err != nil || res.ReasonCode != 0 {
			t.Fatalf("mqtt publish %q: %v %+v", body, err, res)
		}
	}
	if got := drainStomp(t, sub, 500*time.Millisecond); strings.Join(got, ",") != "q1" {
		t.Errorf("MQTT 5: delivered %q, want [q1]", got)
	}

	for dest, want := range map[string]string{
		"/queue/dd.stomp": "s1,s2", "/queue/dd.amqp": "a1", "/queue/dd.msgid": "m1", "/queue/dd.amqp.plain": "m1,m1 again",
	} {
		s, err := sc.Subscribe(dest, gostomp.AckAuto)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(drainStomp(t, s, 300*time.Millisecond), ","); got != want {
			t.Errorf("%s: delivered %q, want %q", dest, got, want)
		}
		s.Unsubscribe()
	}

	// Counted per address, in the API and the metrics.
	addrs := apiAddresses(t, in.addrs["console"].String())
	for name, want := range map[string]float64{"dd.stomp": 1, "dd.amqp": 1, "dd.msgid": 1, "dd.mqtt": 1, "dd.amqp.plain": 0} {
		if got := addrs[name]["duplicates"]; got != want {
			t.Errorf("API: address %s duplicates = %v, want %v", name, got, want)
		}
	}
	_, metrics := httpGet(t, "http://"+in.addrs["console"].String()+"/metrics")
	if !strings.Contains(metrics, `junction_address_duplicates_total{address="dd.stomp"} 1`) {
		t.Errorf("metrics lack junction_address_duplicates_total for dd.stomp")
	}

	// A transaction with a duplicate fails its commit with an ERROR
	// that names the id, and stores none of its messages.
	// (go-stomp does not wait for a COMMIT's receipt: raw frames.)
	raw := dialTCP(t, stompAddr)
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	w, r := frame.NewWriter(raw), frame.NewReader(raw)
	for _, f := range []*frame.Frame{
		frame.New(frame.CONNECT, frame.AcceptVersion, "1.2", frame.Host, "localhost"),
		frame.New(frame.BEGIN, frame.Transaction, "t1"),
		frame.New(frame.SEND, frame.Destination, "/queue/dd.stomp", frame.Transaction, "t1", core.PropDuplicateID, "stomp-3"),
		frame.New(frame.SEND, frame.Destination, "/queue/dd.stomp", frame.Transaction, "t1", core.PropDuplicateID, "stomp-1"),
		frame.New(frame.COMMIT, frame.Transaction, "t1", frame.Receipt, "c1"),
	} {
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	var answer *frame.Frame
	for answer == nil || answer.Command == frame.CONNECTED {
		if answer, err = r.Read(); err != nil || answer == nil {
			t.Fatalf("reading the COMMIT's answer: %v", err)
		}
	}
	if answer.Command != frame.ERROR || !strings.Contains(answer.Header.Get(frame.Message)+string(answer.Body), "duplicate id") ||
		!strings.Contains(string(answer.Body), "stomp-1") {
		t.Fatalf("COMMIT with a duplicate: %s %v %q, want an ERROR naming the duplicate id", answer.Command, answer.Header, answer.Body)
	}
	t.Logf("COMMIT with a duplicate: ERROR %q: %s", answer.Header.Get(frame.Message), answer.Body)
	s, _ := sc.Subscribe("/queue/dd.stomp", gostomp.AckAuto)
	if got := drainStomp(t, s, 300*time.Millisecond); len(got) != 0 {
		t.Errorf("the failed transaction stored %q", got)
	}
	// Its fresh id was not kept: sent again, it is taken.
	if err := sc.Send("/queue/dd.stomp", "text/plain", []byte("tx fresh"), gostomp.SendOpt.Receipt,
		gostomp.SendOpt.Header(core.PropDuplicateID, "stomp-3")); err != nil {
		t.Fatal(err)
	}
	if got := drainStomp(t, s, 300*time.Millisecond); strings.Join(got, ",") != "tx fresh" {
		t.Errorf("after the failed commit, the fresh id's resend delivered %q", got)
	}
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

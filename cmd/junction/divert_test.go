package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/core"
)

// stompDrain reads what a queue holds through STOMP until it has been
// quiet for a while, and returns the bodies sorted.
func stompDrain(t *testing.T, addr, dest string, want int) []string {
	t.Helper()
	c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	sub, err := c.Subscribe(dest, gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	quietFor := 300 * time.Millisecond
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatalf("%s: %v", dest, m.Err)
			}
			got = append(got, string(m.Body))
			continue
		case <-time.After(quietFor):
			if len(got) < want {
				continue
			}
		case <-deadline:
		}
		sort.Strings(got)
		return got
	}
}

// Composite destinations from STOMP, AMQP and the API, diverts with a
// selector (copy and move) and virtual topics fan a send out; the
// durable copies survive a restart.
func TestCompositeDivertsAndVirtualTopicsDurableAcrossRestart(t *testing.T) {
	cfg := testConfig(t)
	cfg.VirtualTopics = true
	cfg.Diverts = []core.Divert{
		{Name: "audit", Address: "orders", ForwardingAddress: "audit", RoutingType: "ANYCAST"},
		{Name: "big", Address: "orders", ForwardingAddress: "queue://big,topic://big.feed", Filter: "tier = 'gold'"},
		{Name: "move", Address: "legacy", ForwardingAddress: "queue://modern", Exclusive: true},
	}
	stompAddr, stop := startServe(t, cfg)
	console := "http://" + lastInstance.addrs["console"].String()

	st, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	// Live topic subscribers see their part at once.
	feed, err := st.Subscribe("/topic/big.feed", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	news, err := st.Subscribe("/topic/news", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	// A subscriber whose selector the composite's message does not
	// match gets nothing; one it matches gets it.
	newsEU, err := st.Subscribe("/topic/news", gostomp.AckAuto, gostomp.SubscribeOpt.Header("selector", "region = 'eu'"))
	if err != nil {
		t.Fatal(err)
	}
	newsUS, err := st.Subscribe("/topic/news", gostomp.AckAuto, gostomp.SubscribeOpt.Header("selector", "region = 'us'"))
	if err != nil {
		t.Fatal(err)
	}
	// The virtual topic's consumer queues exist once their consumers
	// have come (ActiveMQ's rule).
	for _, q := range []string{"/queue/Consumer.A.VirtualTopic.prices", "/queue/Consumer.B.VirtualTopic.prices"} {
		s, err := st.Subscribe(q, gostomp.AckAuto)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send("/queue/barrier", "", nil, gostomp.SendOpt.Receipt); err != nil {
			t.Fatal(err)
		}
		s.Unsubscribe()
	}

	durable := gostomp.SendOpt.Header("persistent", "true")
	// STOMP: a composite of two queues and a topic; diverted orders.
	if err := st.Send("/queue/c1,/queue/c2,/topic/news", "text/plain", []byte("stomp-composite"), gostomp.SendOpt.Receipt, durable,
		gostomp.SendOpt.Header("region", "eu")); err != nil {
		t.Fatal(err)
	}
	for amount, tier := range map[int]string{50: "silver", 500: "gold"} {
		if err := st.Send("/queue/orders", "text/plain", []byte(fmt.Sprint("order-", amount)), gostomp.SendOpt.Receipt, durable,
			gostomp.SendOpt.Header("tier", tier)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Send("/queue/legacy", "text/plain", []byte("moved"), gostomp.SendOpt.Receipt, durable); err != nil {
		t.Fatal(err)
	}
	if err := st.Send("/topic/VirtualTopic.prices", "text/plain", []byte("price"), gostomp.SendOpt.Receipt, durable); err != nil {
		t.Fatal(err)
	}
	// AMQP: a composite target.
	_, as := amqpSession(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snd := must[*goamqp.Sender](t)(as.NewSender(ctx, "queue://c1,queue://c3", nil))
	if err := snd.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Value: "amqp-composite"}, nil); err != nil {
		t.Fatal(err)
	}
	// The API: a bare list with its routing type.
	body, _ := json.Marshal(map[string]any{"address": "c2,c3", "routingType": "anycast", "body": "api-composite", "durable": true})
	res, err := http.Post(console+"/api/v1/send", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("API send: %d", res.StatusCode)
	}
	for name, sub := range map[string]*gostomp.Subscription{"big.feed": feed, "news": news, "news (region = 'eu')": newsEU} {
		select {
		case m := <-sub.C:
			if m.Err != nil || (name == "big.feed") != (string(m.Body) == "order-500") {
				t.Fatalf("%s got %q %v", name, m.Body, m.Err)
			}
			if name == "big.feed" && m.Header.Get("_AMQ_ORIG_ADDRESS") != "orders" {
				t.Fatalf("diverted copy headers %v", m.Header)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no message on /topic/%s", name)
		}
	}
	select {
	case m := <-newsUS.C:
		t.Fatalf("selector region = 'us' let through %q", m.Body)
	case <-time.After(100 * time.Millisecond):
	}
	st.Disconnect()

	// The API lists the diverts, and the queues never named as lists.
	res, err = http.Get(console + "/api/v1/diverts")
	if err != nil {
		t.Fatal(err)
	}
	var dl struct {
		VirtualTopics bool
		Diverts       []core.Divert
	}
	json.NewDecoder(res.Body).Decode(&dl)
	res.Body.Close()
	if !dl.VirtualTopics || len(dl.Diverts) != 3 {
		t.Fatalf("GET /diverts: %+v", dl)
	}
	// A divert made through the API is kept across the restart.
	body, _ = json.Marshal(map[string]any{"name": "api-audit", "address": "payments", "forwardingAddress": "queue://payments.audit"})
	res, err = http.Post(console+"/api/v1/diverts", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("POST /diverts: %d", res.StatusCode)
	}
	// An invalid one is a 400 that says what is wrong with it, not
	// "invalid address" when no address is at fault.
	body, _ = json.Marshal(map[string]any{"name": "bad", "address": "payments", "forwardingAddress": "audit", "routingType": "sideways"})
	res, err = http.Post(console+"/api/v1/diverts", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(answer), `invalid divert \"bad\": routing-type must be`) ||
		strings.Contains(string(answer), "invalid address") {
		t.Fatalf("POST /diverts with a bad routing type: %d %s", res.StatusCode, answer)
	}
	for _, st := range lastInstance.broker.QueueStats() {
		if strings.Contains(st.Name, ",") {
			t.Fatalf("a queue named %q", st.Name)
		}
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	stompAddr, _ = startServe(t, cfg)
	for dest, want := range map[string][]string{
		"/queue/c1":                             {"amqp-composite", "stomp-composite"},
		"/queue/c2":                             {"api-composite", "stomp-composite"},
		"/queue/c3":                             {"amqp-composite", "api-composite"},
		"/queue/orders":                         {"order-50", "order-500"},
		"/queue/audit":                          {"order-50", "order-500"},
		"/queue/big":                            {"order-500"},
		"/queue/legacy":                         nil,
		"/queue/modern":                         {"moved"},
		"/queue/Consumer.A.VirtualTopic.prices": {"price"},
		"/queue/Consumer.B.VirtualTopic.prices": {"price"},
	} {
		if got := stompDrain(t, stompAddr, dest, len(want)); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s after the restart: %q, want %q", dest, got, want)
		}
	}
	st, err = gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send("/queue/payments", "text/plain", []byte("paid"), gostomp.SendOpt.Receipt, durable); err != nil {
		t.Fatal(err)
	}
	st.Disconnect()
	for dest, want := range map[string]string{"/queue/payments": "paid", "/queue/payments.audit": "paid"} {
		if got := stompDrain(t, stompAddr, dest, 1); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %q, want the API divert's copy %q after the restart", dest, got, want)
		}
	}
}

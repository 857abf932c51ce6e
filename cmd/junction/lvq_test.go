package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho5 "github.com/eclipse/paho.golang/paho"
	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/core"
)

// Last-value and ring queues through real clients: concurrent STOMP,
// AMQP and MQTT 5 producers on one last-value queue leave one message
// per key, the last each key was given; a ring queue keeps its newest
// ring-size messages and counts the ones it drops; both hold across a
// restart.

// apiQueue returns the API's view of queue name.
func apiQueue(t *testing.T, console, name string) map[string]any {
	t.Helper()
	status, body := httpGet(t, "http://"+console+"/api/v1/queues/"+name)
	if status != 200 {
		t.Fatalf("GET queue %s: %d %s", name, status, body)
	}
	var q map[string]any
	if err := json.Unmarshal([]byte(body), &q); err != nil {
		t.Fatal(err)
	}
	return q
}

func TestLastValueQueueConcurrentProducers(t *testing.T) {
	stompAddr, _ := startServe(t, artemisConfig(t, core.AddressSettings{Match: "lvq.#", LastValueKey: ptr("symbol")}))
	in := lastInstance
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const keys, perProducer = 8, 120

	// last[key] holds, per producer, the body it last sent for the key:
	// whichever producer the broker took last, one of them survives.
	var mu sync.Mutex
	last := map[string][]string{}
	sent := func(key, body string) {
		mu.Lock()
		last[key] = append(slices.DeleteFunc(last[key], func(b string) bool { return strings.HasPrefix(b, strings.SplitN(body, "/", 2)[0]+"/") }), body)
		mu.Unlock()
	}
	_, as := amqpSession(t, nil)
	// Two STOMP producers, _AMQ_LVQ_NAME as a header, and an AMQP one,
	// the key under the address's last-value-key property, "symbol".
	lastValueProducers{stompAddr: stompAddr, amqp: as, queue: "lvq.prices", stompKey: core.PropLastValue,
		keys: keys, n: perProducer, amqpStep: 3, sent: func(amqp bool, key, body string) {
			if amqp {
				key = "symbol\x00" + key
			}
			sent(key, body)
		}}.run(ctx, t)

	// One message per key: _AMQ_LVQ_NAME keys and "symbol" keys are
	// distinct keys (a message is keyed by the first it has).
	q := apiQueue(t, in.addrs["console"].String(), "lvq.prices")
	if q["depth"] != float64(2*keys) || q["replaced"] != float64(3*perProducer-2*keys) {
		t.Fatalf("queue after %d sends on %d+%d keys: depth %v, replaced %v", 3*perProducer, keys, keys, q["depth"], q["replaced"])
	}
	c, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	sub, err := c.Subscribe("/queue/lvq.prices", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	got := drainStomp(t, sub, 500*time.Millisecond)
	if len(got) != 2*keys {
		t.Fatalf("delivered %d messages, want %d (one per key): %q", len(got), 2*keys, got)
	}
	seen := map[string]bool{}
	for _, body := range got {
		key := body[strings.LastIndexByte(body, '/')+1:]
		if strings.HasPrefix(body, "amqp/") {
			key = "symbol\x00" + key
		}
		if seen[key] {
			t.Errorf("key %q delivered twice", key)
		}
		seen[key] = true
		if !slices.Contains(last[key], body) {
			t.Errorf("key %q: delivered %q, which is not the last any producer sent for it (%q)", key, body, last[key])
		}
	}
	sub.Unsubscribe()

	// MQTT 5: an offline device's subscription keeps the latest value of
	// each key (user property _AMQ_LVQ_NAME) while it is away.
	got5 := make(chan string, 100)
	expiry := uint32(300)
	dev := func(clean bool) *paho5.Client {
		mc := paho5.NewClient(paho5.ClientConfig{ClientID: "lvq-device", Conn: dialTCP(t, in.addrs["mqtt"].String()),
			OnPublishReceived: []func(paho5.PublishReceived) (bool, error){func(r paho5.PublishReceived) (bool, error) {
				got5 <- string(r.Packet.Payload)
				return true, nil
			}}})
		if _, err := mc.Connect(ctx, &paho5.Connect{ClientID: "lvq-device", KeepAlive: 30, CleanStart: clean,
			Properties: &paho5.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil {
			t.Fatal(err)
		}
		return mc
	}
	mc := dev(true)
	if _, err := mc.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: "lvq/device/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	mc.Disconnect(&paho5.Disconnect{})
	pub := paho5.NewClient(paho5.ClientConfig{ClientID: "lvq-pub", Conn: dialTCP(t, in.addrs["mqtt"].String())})
	if _, err := pub.Connect(ctx, &paho5.Connect{ClientID: "lvq-pub", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	defer pub.Disconnect(&paho5.Disconnect{})
	for i := range 30 {
		p := &paho5.Publish{Topic: fmt.Sprintf("lvq/device/%d", i%3), QoS: 1, Payload: []byte(fmt.Sprintf("v%d", i)), Properties: &paho5.PublishProperties{}}
		p.Properties.User.Add(core.PropLastValue, fmt.Sprint(i%3))
		if _, err := pub.Publish(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	mc = dev(false)
	defer mc.Disconnect(&paho5.Disconnect{})
	var back []string
	for done := false; !done; {
		select {
		case b := <-got5:
			back = append(back, b)
		case <-time.After(700 * time.Millisecond):
			done = true
		}
	}
	slices.Sort(back)
	if strings.Join(back, ",") != "v27,v28,v29" {
		t.Errorf("MQTT 5 device back online got %q, want the last value of each key [v27 v28 v29]", back)
	}
}

// lastValueProducers is the load of the last-value tests: two STOMP
// producers (stomp0, stomp1) and an AMQP one (amqp, on session amqp)
// send n persistent messages each to one queue, at once. Producer
// stomp<p>'s i-th message has key k<(i+p) mod keys>, under the STOMP
// header stompKey; the AMQP producer's has key k<i*amqpStep mod keys>,
// under the application property "symbol". A body is "producer/i/key".
type lastValueProducers struct {
	stompAddr string
	amqp      *goamqp.Session
	queue     string
	stompKey  string
	keys, n   int
	amqpStep  int
	// sent, if set, is told of each send once it is confirmed, from the
	// producer's goroutine.
	sent func(amqp bool, key, body string)
}

// run sends the messages and waits for all of them; it fails t on an
// error.
func (l lastValueProducers) run(ctx context.Context, t *testing.T) {
	t.Helper()
	if l.sent == nil {
		l.sent = func(bool, string, string) {}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := gostomp.Dial("tcp", l.stompAddr, gostomp.ConnOpt.HeartBeat(0, 0))
			if err != nil {
				errs <- err
				return
			}
			defer c.Disconnect()
			for i := range l.n {
				key := fmt.Sprint("k", (i+p)%l.keys)
				body := fmt.Sprintf("stomp%d/%d/%s", p, i, key)
				if err := c.Send("/queue/"+l.queue, "text/plain", []byte(body), gostomp.SendOpt.Receipt,
					gostomp.SendOpt.Header("persistent", "true"), gostomp.SendOpt.Header(l.stompKey, key)); err != nil {
					errs <- err
					return
				}
				l.sent(false, key, body)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		snd, err := l.amqp.NewSender(ctx, "queue://"+l.queue, nil)
		if err != nil {
			errs <- err
			return
		}
		for i := range l.n {
			key := fmt.Sprint("k", (i*l.amqpStep)%l.keys)
			body := fmt.Sprintf("amqp/%d/%s", i, key)
			if err := snd.Send(ctx, &goamqp.Message{Data: [][]byte{[]byte(body)}, Header: &goamqp.MessageHeader{Durable: true},
				ApplicationProperties: map[string]any{"symbol": key}}, nil); err != nil {
				errs <- err
				return
			}
			l.sent(true, key, body)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestRingQueueAndLastValuesAcrossRestart(t *testing.T) {
	cfg := artemisConfig(t, core.AddressSettings{Match: "ring.#", RingSize: ptr(int64(5))})
	stompAddr, stop := startServe(t, cfg)
	console := lastInstance.addrs["console"].String()
	c, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := c.Send("/queue/ring.q", "text/plain", []byte(fmt.Sprint("r", i)), gostomp.SendOpt.Receipt,
			gostomp.SendOpt.Header("persistent", "true")); err != nil {
			t.Fatal(err)
		}
		// A last-value queue beside it, durable too.
		if err := c.Send("/queue/lv.q", "text/plain", []byte(fmt.Sprint("v", i)), gostomp.SendOpt.Receipt,
			gostomp.SendOpt.Header("persistent", "true"), gostomp.SendOpt.Header(core.PropLastValue, fmt.Sprint(i%2))); err != nil {
			t.Fatal(err)
		}
	}
	q := apiQueue(t, console, "ring.q")
	if q["depth"] != float64(5) || q["dropped"] != float64(15) {
		t.Fatalf("ring of 5 after 20 sends: depth %v, dropped %v", q["depth"], q["dropped"])
	}
	if _, metrics := httpGet(t, "http://"+console+"/metrics"); !strings.Contains(metrics, `reason="ring_full"} 15`) {
		t.Errorf("metrics lack 15 drops for ring_full")
	}
	c.Disconnect()
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	stompAddr, _ = startServe(t, cfg)
	c, err = gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	for dest, want := range map[string]string{"/queue/ring.q": "r15,r16,r17,r18,r19", "/queue/lv.q": "v18,v19"} {
		sub, err := c.Subscribe(dest, gostomp.AckAuto)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(drainStomp(t, sub, 500*time.Millisecond), ","); got != want {
			t.Errorf("%s after a restart: %q, want %q", dest, got, want)
		}
	}
}

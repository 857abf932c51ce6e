package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho5 "github.com/eclipse/paho.golang/paho"
	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/core"
)

// A non-destructive last-value queue through real clients: consumers
// attached while STOMP and AMQP producers replace values concurrently
// end with the latest value of each key; a consumer that acked
// everything and comes back is given the current values again; an
// expired value leaves; the values survive a restart.

// ndWatch is a consumer that keeps the last body it was given per key
// (a body is "producer/i/key").
type ndWatch struct {
	mu   sync.Mutex
	last map[string]string
	n    int
}

func (w *ndWatch) got(body string) {
	w.mu.Lock()
	w.last[body[strings.LastIndexByte(body, '/')+1:]] = body
	w.n++
	w.mu.Unlock()
}

func (w *ndWatch) snapshot() (map[string]string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.last), w.n
}

// ndStompConsumer subscribes with client-individual acks and a small
// window, acking every message from the goroutine that reads it (the
// window stays within go-stomp's channel, so the ack is never stuck
// behind a delivery).
func ndStompConsumer(t *testing.T, addr, dest string) (*ndWatch, func()) {
	t.Helper()
	c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(dest, gostomp.AckClientIndividual, gostomp.SubscribeOpt.Header("activemq.prefetchSize", "8"))
	if err != nil {
		t.Fatal(err)
	}
	w := &ndWatch{last: map[string]string{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range sub.C {
			if m.Err != nil {
				return
			}
			w.got(string(m.Body))
			if c.Ack(m) != nil {
				return
			}
		}
	}()
	return w, func() {
		c.Disconnect()
		<-done
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// snapshotStomp subscribes a new STOMP consumer (auto ack) and returns
// what it is given, keyed, failing on a key given twice.
func snapshotStomp(t *testing.T, addr, dest string, n int) map[string]string {
	t.Helper()
	c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	sub, err := c.Subscribe(dest, gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	got := drainStomp(t, sub, 400*time.Millisecond)
	out := map[string]string{}
	for _, body := range got {
		key := body[strings.LastIndexByte(body, '/')+1:]
		if _, dup := out[key]; dup {
			t.Errorf("key %q given twice to one consumer: %q", key, got)
		}
		out[key] = body
	}
	if len(got) != n {
		t.Fatalf("a new consumer was given %d messages, want %d (one per key): %q", len(got), n, got)
	}
	return out
}

func TestNonDestructiveLastValueQueue(t *testing.T) {
	cfg := artemisConfig(t, core.AddressSettings{Match: "nd.#", NonDestructive: ptr(true), LastValueKey: ptr("symbol")})
	stompAddr, stop := startServe(t, cfg)
	in := lastInstance
	console := in.addrs["console"].String()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const dest, keys, perProducer = "/queue/nd.prices", 6, 100

	// Two consumers attached throughout: STOMP, acking each message, and
	// AMQP, accepting each.
	sw, stopSW := ndStompConsumer(t, stompAddr, dest)
	aw := &ndWatch{last: map[string]string{}}
	ac, err := goamqp.Dial(ctx, "amqp://"+in.addrs["amqp"].String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	as, err := ac.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := as.NewReceiver(ctx, "queue://nd.prices", &goamqp.ReceiverOptions{Credit: 20})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			m, err := rcv.Receive(ctx, nil)
			if err != nil {
				return
			}
			aw.got(string(m.GetData()))
			if rcv.AcceptMessage(ctx, m) != nil {
				return
			}
		}
	}()
	waitFor(t, "both consumers attached", func() bool { return apiQueue(t, console, "nd.prices")["consumers"] == float64(2) })

	// Two STOMP producers and an AMQP one on the same keys, under the
	// address's last-value-key "symbol".
	lastValueProducers{stompAddr: stompAddr, amqp: as, queue: "nd.prices", stompKey: "symbol",
		keys: keys, n: perProducer, amqpStep: 5}.run(ctx, t)

	// One value per key waits; it is the last one each key was given.
	q := apiQueue(t, console, "nd.prices")
	if q["depth"] != float64(keys) || q["replaced"] != float64(3*perProducer-keys) || q["nonDestructive"] != true {
		t.Fatalf("queue after %d sends on %d keys: %v", 3*perProducer, keys, q)
	}
	want := snapshotStomp(t, stompAddr, dest, keys)
	for key, body := range want {
		// Each producer sends its values in order, so the survivor is
		// the last value of whichever producer the broker took last.
		prod, rest, _ := strings.Cut(body, "/")
		i, _ := strconv.Atoi(strings.SplitN(rest, "/", 2)[0])
		if i+keys < perProducer {
			t.Errorf("key %s: %q survived, though %s sent the key again later", key, body, prod)
		}
	}
	// The consumers attached throughout were given every replacement as
	// a new message, so the last each got per key is the survivor.
	for name, w := range map[string]*ndWatch{"stomp": sw, "amqp": aw} {
		waitFor(t, name+" consumer given the latest values", func() bool {
			last, _ := w.snapshot()
			return maps.Equal(last, want)
		})
		if _, n := w.snapshot(); n < keys || n > 3*perProducer {
			t.Errorf("%s consumer was given %d messages", name, n)
		}
	}
	// Acks removed nothing; the STOMP consumer comes back and is given
	// the current values again.
	stopSW()
	if q := apiQueue(t, console, "nd.prices"); q["depth"] != float64(keys) || q["dequeued"].(float64) < float64(2*keys) {
		t.Fatalf("after the acks: %v", q)
	}
	sw, stopSW = ndStompConsumer(t, stompAddr, dest)
	waitFor(t, "the consumer back given the current values", func() bool {
		last, n := sw.snapshot()
		return n == keys && maps.Equal(last, want)
	})

	// An expiring value: given to the consumers, then gone.
	c, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(300 * time.Millisecond).UnixMilli()
	if err := c.Send(dest, "text/plain", []byte("exp/0/kexp"), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true"),
		gostomp.SendOpt.Header("symbol", "kexp"), gostomp.SendOpt.Header("expires", strconv.FormatInt(exp, 10))); err != nil {
		t.Fatal(err)
	}
	c.Disconnect()
	waitFor(t, "the expiring value given", func() bool { last, _ := sw.snapshot(); return last["kexp"] != "" })
	waitFor(t, "the value expired", func() bool { return apiQueue(t, console, "nd.prices")["expired"] == float64(1) })
	if got := snapshotStomp(t, stompAddr, dest, keys); !maps.Equal(got, want) {
		t.Fatalf("after the expiry a new consumer got %v, want %v", got, want)
	}
	stopSW()
	rcv.Close(ctx)

	// A restart: the journal kept the values (acks wrote no deletes).
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	stompAddr, _ = startServe(t, cfg)
	for range 2 {
		if got := snapshotStomp(t, stompAddr, dest, keys); !maps.Equal(got, want) {
			t.Fatalf("after a restart a consumer got %v, want %v", got, want)
		}
	}
}

// MQTT 5: a device's persistent subscription on a non-destructive
// last-value topic is given the latest value of each key each time it
// comes back, though it acknowledged them before. (A topic's new
// subscription starts empty as usual: non-destructive keeps what a
// queue holds, and a subscription's queue holds what was published
// since it was made.)
func TestNonDestructiveMQTT(t *testing.T) {
	startServe(t, artemisConfig(t, core.AddressSettings{Match: "nd.#", NonDestructive: ptr(true)}))
	in := lastInstance
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	expiry := uint32(300)
	dev := func(id string, clean bool) (*paho5.Client, chan string) {
		got := make(chan string, 100)
		mc := paho5.NewClient(paho5.ClientConfig{ClientID: id, Conn: dialTCP(t, in.addrs["mqtt"].String()),
			OnPublishReceived: []func(paho5.PublishReceived) (bool, error){func(r paho5.PublishReceived) (bool, error) {
				got <- string(r.Packet.Payload)
				return true, nil
			}}})
		if _, err := mc.Connect(ctx, &paho5.Connect{ClientID: id, KeepAlive: 30, CleanStart: clean,
			Properties: &paho5.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil {
			t.Fatal(err)
		}
		if clean {
			if _, err := mc.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: "nd/device/#", QoS: 1}}}); err != nil {
				t.Fatal(err)
			}
		}
		return mc, got
	}
	collect := func(got chan string) []string {
		var out []string
		for {
			select {
			case b := <-got:
				out = append(out, b)
			case <-time.After(500 * time.Millisecond):
				slices.Sort(out)
				return out
			}
		}
	}
	d1, got1 := dev("nd-dev1", true)
	pub := paho5.NewClient(paho5.ClientConfig{ClientID: "nd-pub", Conn: dialTCP(t, in.addrs["mqtt"].String())})
	if _, err := pub.Connect(ctx, &paho5.Connect{ClientID: "nd-pub", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	defer pub.Disconnect(&paho5.Disconnect{})
	for i := range 12 {
		p := &paho5.Publish{Topic: fmt.Sprintf("nd/device/%d", i%3), QoS: 1, Payload: []byte(fmt.Sprint("v", i)), Properties: &paho5.PublishProperties{}}
		p.Properties.User.Add(core.PropLastValue, fmt.Sprint(i%3))
		if _, err := pub.Publish(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// The device online was given all twelve (each replacement is a new
	// message), and acknowledged them.
	if got := collect(got1); len(got) != 12 {
		t.Fatalf("device online got %q, want the 12 values", got)
	}
	d1.Disconnect(&paho5.Disconnect{})
	d1, got1 = dev("nd-dev1", false)
	defer d1.Disconnect(&paho5.Disconnect{})
	if got := strings.Join(collect(got1), ","); got != "v10,v11,v9" {
		t.Errorf("device back got %q, want the latest value of each key again [v10 v11 v9]", got)
	}
	// A device subscribing afterwards has only what comes next: a topic
	// subscription starts empty; non-destructive is per queue.
	d2, got2 := dev("nd-dev2", true)
	defer d2.Disconnect(&paho5.Disconnect{})
	if got := collect(got2); len(got) != 0 {
		t.Errorf("a new subscription got %q, want nothing", got)
	}
}

// junction config reload switches an existing queue to non-destructive
// and back; the API shows the setting in force.
func TestNonDestructiveReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "junction.yaml")
	conf := func(nd bool) {
		t.Helper()
		y := fmt.Sprintf(`data-dir: %s
config-watch-interval: 0s
stomp: {listen: "127.0.0.1:0", heart-beat-min: 0s}
mqtt: {listen: ""}
amqp: {listen: ""}
websocket: {listen: ""}
all: {listen: ""}
console: {listen: "127.0.0.1:0"}
address-settings:
  - {match: "nd.#", non-destructive: %v}
`, filepath.Join(dir, "data"), nd)
		if err := os.WriteFile(file, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf(false)
	cfg, err := loadConfig([]string{"--config", file}, noEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	stompAddr, _ := startServe(t, cfg)
	console := lastInstance.addrs["console"].String()
	reload := func() {
		t.Helper()
		var out bytes.Buffer
		if err := run(context.Background(), []string{"config", "reload", "--console", console}, noEnv, &out, &out); err != nil ||
			!strings.Contains(out.String(), "address-settings") {
			t.Fatalf("junction config reload: %v\n%s", err, out.String())
		}
	}
	c, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	for i := range 3 {
		if err := c.Send("/queue/nd.q", "text/plain", []byte(fmt.Sprint("m", i)), gostomp.SendOpt.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	take := func() []string {
		t.Helper()
		sub, err := c.Subscribe("/queue/nd.q", gostomp.AckAuto)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		return drainStomp(t, sub, 400*time.Millisecond)
	}
	// Destructive: m0 is consumed for good (acked; what the window lets
	// through after it goes back when the subscription ends).
	sub, err := c.Subscribe("/queue/nd.q", gostomp.AckClientIndividual, gostomp.SubscribeOpt.Header("activemq.prefetchSize", "1"))
	if err != nil {
		t.Fatal(err)
	}
	m := <-sub.C
	if m.Err != nil || string(m.Body) != "m0" {
		t.Fatalf("got %v %q", m.Err, m.Body)
	}
	if err := c.Ack(m); err != nil {
		t.Fatal(err)
	}
	sub.Unsubscribe()
	waitFor(t, "m0 consumed", func() bool {
		q := apiQueue(t, console, "nd.q")
		return q["depth"] == float64(2) && q["consumers"] == float64(0)
	})
	conf(true)
	reload()
	if q := apiQueue(t, console, "nd.q"); q["nonDestructive"] != true {
		t.Fatalf("after the reload: %v", q)
	}
	for range 2 {
		if got := take(); !slices.Equal(got, []string{"m1", "m2"}) {
			t.Fatalf("non-destructive consumer got %q, want [m1 m2]", got)
		}
	}
	conf(false)
	reload()
	if got := take(); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("got %q", got)
	}
	if q := apiQueue(t, console, "nd.q"); q["depth"] != float64(0) || q["nonDestructive"] != nil {
		t.Fatalf("switched back and consumed: %v", q)
	}
}

package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"
	gws "github.com/gorilla/websocket"

	"github.com/junctionmq/junction/internal/stompclient"
	"github.com/junctionmq/junction/websocket/wstest"
)

// liveHeap returns the bytes of live heap objects, after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// mqttHeader is an MQTT fixed header: first byte, remaining length.
func mqttHeader(first byte, remaining int) []byte {
	h := []byte{first}
	for {
		b := byte(remaining % 128)
		remaining /= 128
		if remaining > 0 {
			h = append(h, b|0x80)
			continue
		}
		return append(h, b)
	}
}

// preauthClient is one connection that has not authenticated: it says
// hello and then records what the broker answers until it closes.
type preauthClient struct {
	name  string
	dial  func() (io.ReadWriteCloser, error)
	hello [][]byte // written in order; the broker may close before the end

	got    []byte
	closed bool
}

func (c *preauthClient) run(wg *sync.WaitGroup, mu *sync.Mutex, stop <-chan struct{}) {
	defer wg.Done()
	conn, err := c.dial()
	if err != nil {
		mu.Lock()
		c.got = []byte("dial: " + err.Error())
		mu.Unlock()
		return
	}
	go func() {
		<-stop
		conn.Close()
	}()
	go func() {
		for _, b := range c.hello {
			if _, err := conn.Write(b); err != nil {
				return
			}
		}
	}()
	got, _ := io.ReadAll(conn) // until the broker closes (or the test stops)
	mu.Lock()
	c.got, c.closed = got, true
	mu.Unlock()
}

// runPreauth runs clients at once and waits until the broker has closed
// each of them, sampling the live heap meanwhile; it returns the largest
// growth seen over base. It fails the test as soon as the growth passes
// bound, or if the broker has not closed every client within 20s.
func runPreauth(t *testing.T, clients []*preauthClient, bound uint64) uint64 {
	t.Helper()
	base := liveHeap()
	var wg sync.WaitGroup
	var mu sync.Mutex
	stop := make(chan struct{})
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for _, c := range clients {
		wg.Add(1)
		go c.run(&wg, &mu, stop)
	}
	peak := uint64(0)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if h := liveHeap(); h > base && h-base > peak {
			peak = h - base
		}
		if peak > bound {
			t.Fatalf("the live heap grew by %d MiB with %d clients not logged in (bound %d MiB)", peak>>20, len(clients), bound>>20)
		}
		mu.Lock()
		open := 0
		for _, c := range clients {
			if !c.closed {
				open++
			}
		}
		mu.Unlock()
		if open == 0 {
			return peak
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d clients not closed by the broker within 20s (heap grew by at most %d KiB)", open, len(clients), peak>>10)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metric returns the value of a /metrics line that starts with prefix.
func metric(t *testing.T, in *instance, prefix string) string {
	t.Helper()
	res, err := http.Get("http://" + in.addrs["console"].String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix+" "); ok {
			return v
		}
	}
	return ""
}

// rawTCP returns a dialer of in's listener of that name.
func (in *instance) rawTCP(listener string) func() (io.ReadWriteCloser, error) {
	return func() (io.ReadWriteCloser, error) { return net.Dial("tcp", in.addrs[listener].String()) }
}

// rawWS returns a dialer of in's WebSocket listener offering subprotocol
// sub: a connection of binary messages.
func (in *instance) rawWS(sub string) func() (io.ReadWriteCloser, error) {
	return func() (io.ReadWriteCloser, error) {
		d := gws.Dialer{Subprotocols: []string{sub}, HandshakeTimeout: 10 * time.Second}
		c, _, err := d.Dial("ws://"+in.addrs["websocket"].String()+"/", nil)
		if err != nil {
			return nil, err
		}
		return wstest.NewConn(c), nil
	}
}

// 200 connections that each declare a frame of about 10 MiB before
// authenticating (MQTT and STOMP, on their ports and over WebSockets;
// AMQP SASL) make the broker hold next to nothing: each is refused with
// its protocol's error as soon as its declaration is read, before its
// body is, and the refusals are counted in /metrics. (Before the
// pre-authentication limits, mochi allocated each MQTT packet's declared
// length at once: 50 clients took the heap up by 450 MiB.) A client that
// logs in is unaffected.
func TestPreAuthHugeDeclarations(t *testing.T) {
	cfg := testConfig(t)
	cfg.LogLevel = "info"
	cfg.Limits.HandshakeTimeout = 30 * time.Second // the broker, not the timeout, must close them
	in, _, _ := startLimited(t, cfg)
	tcp, ws := in.rawTCP, in.rawWS
	const declared = 9 << 20 // under every protocol's own maximum
	body := bytes.Repeat([]byte{'x'}, 256<<10)
	stompHello := [][]byte{[]byte(fmt.Sprintf("CONNECT\naccept-version:1.2\ncontent-length:%d\n\n", declared)), body}
	stompStream := [][]byte{[]byte("CONNECT\naccept-version:1.2\n\n"), body, body}
	mqttHello := [][]byte{mqttHeader(0x10, declared)}
	mqtt5Hello := [][]byte{append(mqttHeader(0x10, declared), "\x00\x04MQTT\x05\x02\x00\x3c"...), body}
	var saslFrame [8]byte
	binary.BigEndian.PutUint32(saslFrame[:], declared)
	saslFrame[4], saslFrame[5] = 2, 1
	amqpHello := [][]byte{[]byte("AMQP\x03\x01\x00\x00"), saslFrame[:], body}

	var clients []*preauthClient
	for i := range 25 {
		clients = append(clients,
			&preauthClient{name: "mqtt", dial: tcp("mqtt"), hello: mqttHello},
			&preauthClient{name: "mqtt5", dial: tcp("mqtt"), hello: mqtt5Hello},
			&preauthClient{name: "stomp", dial: tcp("stomp"), hello: stompHello},
			&preauthClient{name: "stomp", dial: tcp("stomp"), hello: stompStream},
			&preauthClient{name: "amqp", dial: tcp("amqp"), hello: amqpHello},
			&preauthClient{name: "amqp", dial: tcp("amqp"), hello: amqpHello},
		)
		if i%2 == 0 {
			clients = append(clients,
				&preauthClient{name: "stomp-ws", dial: ws("v12.stomp"), hello: stompHello},
				&preauthClient{name: "stomp-ws", dial: ws("v12.stomp"), hello: stompStream},
				&preauthClient{name: "mqtt-ws", dial: ws("mqtt"), hello: mqttHello},
				&preauthClient{name: "mqtt5-ws", dial: ws("mqtt"), hello: mqtt5Hello},
				&preauthClient{name: "amqp-ws", dial: ws("amqp"), hello: amqpHello},
			)
		}
	}
	clients = clients[:200]
	peak := runPreauth(t, clients, 32<<20)
	t.Logf("%d clients, each declaring %d MiB: live heap grew by at most %d KiB", len(clients), declared>>20, peak>>10)

	for _, c := range clients {
		var want string
		switch c.name {
		case "stomp", "stomp-ws":
			want = "ERROR\nmessage:malformed frame"
		case "mqtt5", "mqtt5-ws":
			want = "\x20\x03\x00\x95\x00"
		case "amqp", "amqp-ws": // the SASL header and mechanisms, then sasl-outcome sys-perm (3)
			want = "AMQP\x03\x01\x00\x00"
		}
		if !strings.HasPrefix(string(c.got), want) {
			t.Fatalf("%s client got %q, want it to start with %q", c.name, c.got, want)
		}
		if strings.HasPrefix(c.name, "amqp") && !bytes.HasSuffix(c.got, []byte("\x00\x53\x44\xc0\x03\x01\x50\x03")) {
			t.Fatalf("amqp client got % x, want a sasl-outcome with code 3 at the end", c.got)
		}
		if (c.name == "mqtt" || c.name == "mqtt-ws") && len(c.got) > 0 {
			t.Fatalf("MQTT 3.1.1 client got % x, want a plain close", c.got)
		}
	}
	counts := map[string]int{}
	for _, c := range clients {
		counts[strings.TrimSuffix(strings.TrimSuffix(c.name, "-ws"), "5")]++
	}
	for proto, n := range counts {
		line := fmt.Sprintf(`junction_preauth_refused_total{protocol="%s",reason="frame_too_large"}`, proto)
		if got := metric(t, in, line); got != fmt.Sprint(n) {
			t.Errorf("%s = %q, want %d", line, got, n)
		}
	}
	if got := metric(t, in, "junction_preauth_bytes"); got != "0" {
		t.Errorf("junction_preauth_bytes = %q with every client gone", got)
	}

	good, err := gostomp.Dial("tcp", in.addrs["stomp"].String(), gostomp.ConnOpt.HeartBeat(0, 0), stompclient.Quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Disconnect()
	if err := good.Send("/queue/after", "text/plain", []byte("fine"), gostomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
}

// 200 MQTT clients that each send most of a CONNECT under the
// pre-authentication frame limit, and then wait, are held to the
// broker's pre-authentication budget: past it they get CONNACK server
// unavailable, and the live heap stays near the budget instead of
// growing with every client (before the budget: 200 x 250 KiB).
func TestPreAuthBudgetBoundsHeap(t *testing.T) {
	cfg := testConfig(t)
	cfg.LogLevel = "info"
	cfg.Limits.HandshakeTimeout = 30 * time.Second
	cfg.Limits.PreAuthMaxFrameSize = 256 << 10
	cfg.Limits.PreAuthBudget = 2 << 20
	in, _, _ := startLimited(t, cfg)
	const declared = 250 << 10
	hello := [][]byte{append(mqttHeader(0x10, declared), "\x00\x04MQTT\x04\x02\x00\x3c"...), make([]byte, 200<<10)}
	dial := func() (io.ReadWriteCloser, error) { return net.Dial("tcp", in.addrs["mqtt"].String()) }
	var clients []*preauthClient
	for range 200 {
		clients = append(clients, &preauthClient{name: "mqtt", dial: dial, hello: hello})
	}
	// The clients the budget admits are closed at the handshake timeout;
	// stop waiting for them once the others have been refused.
	refused := func() int {
		n := 0
		for _, c := range clients {
			if c.closed && bytes.Equal(c.got, []byte{0x20, 0x02, 0x00, 0x03}) {
				n++
			}
		}
		return n
	}
	base := liveHeap()
	var wg sync.WaitGroup
	var mu sync.Mutex
	stop := make(chan struct{})
	for _, c := range clients {
		wg.Add(1)
		go c.run(&wg, &mu, stop)
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	const bound = 16 << 20
	peak := uint64(0)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if h := liveHeap(); h > base && h-base > peak {
			peak = h - base
		}
		if peak > bound {
			t.Fatalf("the live heap grew by %d MiB (bound %d MiB, budget 2 MiB)", peak>>20, bound>>20)
		}
		mu.Lock()
		n := refused()
		mu.Unlock()
		// 250 KiB each: at most 8 fit in 2 MiB.
		if n >= 200-8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of 200 clients refused for the budget within 20s (heap grew by at most %d KiB)", n, peak>>10)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("200 clients, each sending 200 KiB of a 250 KiB CONNECT: live heap grew by at most %d KiB", peak>>10)
	if got := metric(t, in, `junction_preauth_refused_total{protocol="mqtt",reason="budget"}`); got == "" || got == "0" {
		t.Fatalf("budget refusals in /metrics: %q", got)
	}
	if got := metric(t, in, "junction_preauth_budget_bytes"); got != "2.097152e+06" {
		t.Fatalf("junction_preauth_budget_bytes = %q", got)
	}
}

// --frame-timeout and --frame-min-rate reach every protocol, on its own
// port and over WebSockets: after login, a frame trickled a byte at a
// time is cut with the protocol's error, and counted in /metrics.
func TestFrameTimeoutFlags(t *testing.T) {
	cfg := testConfig(t)
	cfg.LogLevel = "info"
	cfg.Limits.FrameTimeout = 300 * time.Millisecond
	cfg.Limits.FrameMinRate = 64 << 10
	cfg.AMQP.IdleTimeout = 0
	in, _, _ := startLimited(t, cfg)
	tcp, ws := in.rawTCP, in.rawWS
	stompHello := "CONNECT\naccept-version:1.2\nheart-beat:0,0\n\n\x00"
	stompSend := "SEND\ndestination:/queue/slow\n\n" + strings.Repeat("z", 200) + "\x00"
	mqttHello := "\x10\x0f\x00\x04MQTT\x05\x02\x00\x00\x00\x00\x02v5"
	mqttPublish := "\x30\xc8\x01\x00\x06slow/t\x00" + strings.Repeat("z", 200-9) // remaining length 200
	// The AMQP header and an open (container "x", no SASL).
	amqpHello := "AMQP\x00\x01\x00\x00" + "\x00\x00\x00\x17\x02\x00\x00\x00\x00\x53\x10\xc0\x0a\x03\xa1\x01x\x40\x70\x00\x01\x00\x00"
	amqpBegin := "\x00\x00\x00\x1a\x02\x00\x00\x01\x00\x53\x11\xc0\x0d\x04\x40\x43\x70\x00\x00\x03\xe8\x70\x00\x00\x03\xe8"
	for _, tc := range []struct {
		name, proto   string
		dial          func() (io.ReadWriteCloser, error)
		hello, slowly string
		want          string
	}{
		{"stomp", "stomp", tcp("stomp"), stompHello, stompSend, "message:frame timeout"},
		{"stomp over websocket", "stomp", ws("v12.stomp"), stompHello, stompSend, "message:frame timeout"},
		{"mqtt", "mqtt", tcp("mqtt"), mqttHello, mqttPublish, "\xe0\x02\x8d\x00"},
		{"mqtt over websocket", "mqtt", ws("mqtt"), mqttHello, mqttPublish, "\xe0\x02\x8d\x00"},
		{"amqp", "amqp", tcp("amqp"), amqpHello, amqpBegin, "amqp:resource-limit-exceeded"},
		{"amqp over websocket", "amqp", ws("amqp"), amqpHello, amqpBegin, "amqp:resource-limit-exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.dial()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(tc.hello)); err != nil {
				t.Fatal(err)
			}
			first := make(chan error, 1)
			go func() {
				_, err := c.Read(make([]byte, 1))
				first <- err
			}()
			select {
			case err := <-first: // logged in
				if err != nil {
					t.Fatalf("no answer to the login: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no answer to the login within 10s")
			}
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for i := 0; i < len(tc.slowly); i++ {
					select {
					case <-stop:
						return
					case <-time.After(30 * time.Millisecond):
					}
					if _, err := c.Write([]byte{tc.slowly[i]}); err != nil {
						return
					}
				}
			}()
			done := make(chan []byte, 1)
			go func() {
				got, _ := io.ReadAll(c)
				done <- got
			}()
			select {
			case got := <-done:
				if !strings.Contains(string(got), tc.want) {
					t.Fatalf("closed after %q, want %q in it", got, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a trickled frame was not cut within 10s")
			}
		})
	}
	for proto, n := range map[string]int{"stomp": 2, "mqtt": 2, "amqp": 2} {
		line := fmt.Sprintf(`junction_frame_timeouts_total{protocol="%s"}`, proto)
		if got := metric(t, in, line); got != fmt.Sprint(n) {
			t.Errorf("%s = %q, want %d", line, got, n)
		}
	}
}

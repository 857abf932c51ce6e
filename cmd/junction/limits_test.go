package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/internal/stompclient"
	"github.com/junctionmq/junction/transports"
)

// startLimited starts a broker with cfg and returns it with its log.
func startLimited(t *testing.T, cfg Config) (*instance, *lockedWriter, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	lw := &lockedWriter{w: &logs}
	in, err := start(cfg, lw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		in.stop(ctx)
	})
	return in, lw, &logs
}

func (in *instance) server(name string) *transports.Server {
	for _, s := range in.servers {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// 10,000 connection attempts from one address are mostly turned away by
// the per-IP rate, while a client from another address goes on sending
// and receiving; the rejections are logged a line per interval, not a
// line each.
func TestConnectionFloodFromOneIP(t *testing.T) {
	cfg := testConfig(t)
	cfg.LogLevel = "info"
	cfg.Limits.ConnectionRatePerIP = 100
	cfg.Limits.ConnectionBurstPerIP = 200
	in, lw, logs := startLimited(t, cfg)
	addr := in.addrs["stomp"].String()

	probe := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	if c, err := probe.Dial("tcp", addr); err != nil {
		t.Skipf("cannot dial from 127.0.0.2: %v", err)
	} else {
		c.Close()
	}

	good, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0), stompclient.Quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Disconnect()
	sub, err := good.Subscribe("/queue/flood", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}

	const attempts, workers, messages = 10000, 32, 300
	start := time.Now()
	var next, dialErrs atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
			for next.Add(1) <= attempts-1 { // the probe was the first
				c, err := d.Dial("tcp", addr)
				if err != nil {
					dialErrs.Add(1)
					continue
				}
				c.Close()
			}
		}()
	}
	// Meanwhile the other client sends and receives, every message
	// confirmed by a receipt.
	sendErr := make(chan error, 1)
	go func() {
		for i := range messages {
			if err := good.Send("/queue/flood", "text/plain", []byte(fmt.Sprint(i)), gostomp.SendOpt.Receipt); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	for i := range messages {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatalf("message %d: %v", i, m.Err)
			}
			if string(m.Body) != fmt.Sprint(i) {
				t.Fatalf("message %d is %q", i, m.Body)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("message %d did not arrive", i)
		}
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	elapsed := time.Since(start)

	// Every attempt the kernel completed reaches the accept loop; wait
	// for the last ones to be counted.
	srv := in.server("stomp")
	made := uint64(attempts - dialErrs.Load())
	deadline := time.Now().Add(10 * time.Second)
	for srv.Stats().Accepted < made+1 && time.Now().Before(deadline) { // +1: the go-stomp client
		time.Sleep(10 * time.Millisecond)
	}
	st := srv.Stats()
	// At most the burst plus the rate over the time the flood took (and
	// a second of slack) can have been admitted.
	maxAdmitted := uint64(200 + 100*(elapsed.Seconds()+1))
	t.Logf("%d attempts in %v: %d rejected by rate, %d dial errors; stats %+v", attempts, elapsed, st.RejectedRate, dialErrs.Load(), st)
	if st.RejectedRate+maxAdmitted < made || st.RejectedRate < made/2 {
		t.Fatalf("%d of %d attempts rejected by rate, want at least %d and most", st.RejectedRate, made, made-min(made, maxAdmitted))
	}
	if st.RejectedMaxConns != 0 || st.RejectedMaxConnsPerIP != 0 {
		t.Fatalf("rejected for other reasons: %+v", st)
	}
	// The console's /metrics reports the same count.
	res, err := http.Get("http://" + in.addrs["console"].String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if want := fmt.Sprintf(`junction_connections_rejected_total{listener="stomp",reason="rate"} %d`, st.RejectedRate); !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s", want)
	}

	// Another source is still welcome.
	c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0), stompclient.Quiet)
	if err != nil {
		t.Fatalf("a new client from 127.0.0.1 after the flood: %v", err)
	}
	c.Disconnect()

	lw.mu.Lock()
	log := logs.String()
	lw.mu.Unlock()
	lines := strings.Count(log, "connections rejected by limits")
	if lines < 1 || lines > 2+int(elapsed/(10*time.Second)) {
		t.Fatalf("%d log lines about rejections over %v, want a line per 10s at most:\n%s", lines, elapsed, log)
	}
}

// --handshake-timeout reaches every protocol, on its own port and on
// the one port: a client that says nothing is closed.
func TestHandshakeTimeoutFlag(t *testing.T) {
	cfg := testConfig(t)
	cfg.Limits.HandshakeTimeout = 300 * time.Millisecond
	in, _, _ := startLimited(t, cfg)
	for _, tc := range []struct {
		listener, hello, want string
	}{
		{"stomp", "", "ERROR\nmessage:connect timeout"},
		{"mqtt", "", ""},
		{"amqp", "", ""},
		{"amqp", "AMQP\x00\x01\x00\x00", "AMQP\x00\x01\x00\x00"}, // header, then no open
		{"all", "CONNECT\n", "ERROR\nmessage:connect timeout"},   // detected as STOMP, never finished
		{"all", "\x10\x0c\x00\x04MQTT", ""},                      // detected as MQTT, never finished
	} {
		t.Run(tc.listener, func(t *testing.T) {
			nc, err := net.Dial("tcp", in.addrs[tc.listener].String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			io.WriteString(nc, tc.hello)
			nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(nc)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("not closed within 5s (read %q)", got)
			}
			if !strings.HasPrefix(string(got), tc.want) {
				t.Fatalf("read %q, want it to start with %q", got, tc.want)
			}
		})
	}
}

// --max-subscriptions-per-connection reaches the protocols.
func TestMaxSubscriptionsFlag(t *testing.T) {
	cfg := testConfig(t)
	cfg.Limits.MaxSubscriptions = 2
	addr, _ := startServe(t, cfg)
	c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0), stompclient.Quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	for i := range 2 {
		if _, err := c.Subscribe(fmt.Sprintf("/queue/s%d", i), gostomp.AckAuto); err != nil {
			t.Fatal(err)
		}
	}
	s3, err := c.Subscribe("/queue/s2", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-s3.C:
		if m.Err == nil || !strings.Contains(m.Err.Error(), "too many subscriptions") {
			t.Fatalf("third subscription got %v, want the ERROR", m.Err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no ERROR for the subscription past the limit")
	}
}

// The size flags reach each protocol: an oversize frame or packet is
// refused with the protocol's own error and closes only its connection.
func TestOversizeRefusedPerProtocol(t *testing.T) {
	cfg := testConfig(t)
	cfg.Stomp.MaxFrameSize, cfg.Stomp.MaxHeaderLength = 1024, 512
	cfg.MQTT.MaxPacketSize = 1024
	cfg.AMQP.MaxFrameSize, cfg.AMQP.MaxMessageSize = 512, 4096
	in, _, _ := startLimited(t, cfg)

	good, err := gostomp.Dial("tcp", in.addrs["stomp"].String(), gostomp.ConnOpt.HeartBeat(0, 0), stompclient.Quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Disconnect()
	sub, err := good.Subscribe("/queue/good", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	// AMQP: the header, an open (no SASL), then a frame header claiming
	// 1 MiB.
	amqpOpen := []byte("AMQP\x00\x01\x00\x00" +
		"\x00\x00\x00\x17\x02\x00\x00\x00\x00\x53\x10\xc0\x0a\x03\xa1\x01x\x40\x70\x00\x01\x00\x00" +
		"\x00\x10\x00\x00\x02\x00\x00\x00")
	for _, tc := range []struct {
		name, listener string
		hello          []byte
		want           string
	}{
		{"stomp", "stomp", []byte("CONNECT\naccept-version:1.2\n\n\x00SEND\ndestination:/queue/x\n\n" + strings.Repeat("x", 2000) + "\x00"), "message:malformed frame"},
		{"mqtt 5", "mqtt", []byte("\x10\x0f\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x02v5" + "\x30\xd0\x0f\x00"), "\xe0\x02\x95\x00"},
		{"amqp", "amqp", amqpOpen, "amqp:connection:framing-error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", in.addrs[tc.listener].String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Write(tc.hello)
			nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(nc)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("not closed within 5s (read %q)", got)
			}
			if !strings.Contains(string(got), tc.want) {
				t.Fatalf("read %q, want %q in it", got, tc.want)
			}
			if err := good.Send("/queue/good", "text/plain", []byte(tc.name), gostomp.SendOpt.Receipt); err != nil {
				t.Fatal(err)
			}
			select {
			case m := <-sub.C:
				if m.Err != nil || string(m.Body) != tc.name {
					t.Fatalf("good client got %q, %v", m.Body, m.Err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("good client got nothing")
			}
		})
	}
}

func TestLimitsConfig(t *testing.T) {
	cfg, errs := parseConfig([]byte("limits:\n  max-connections-per-ip: 5\n  connection-rate-per-ip: 2.5\n  connection-burst-per-ip: 3\n  handshake-timeout: 2s\n  max-subscriptions-per-connection: 0\n  max-auto-created-queues-per-user: 7\n" +
		"  preauth-max-frame-size: 16KiB\n  preauth-budget: 1MiB\n  frame-timeout: 5s\n  frame-min-rate: 1KiB\n"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := LimitsConfig{MaxConnectionsPerIP: 5, ConnectionRatePerIP: 2.5, ConnectionBurstPerIP: 3,
		HandshakeTimeout: 2 * time.Second, MaxSubscriptions: 0, MaxAutoCreatedQueues: 7,
		PreAuthMaxFrameSize: 16 << 10, PreAuthBudget: 1 << 20, FrameTimeout: 5 * time.Second, FrameMinRate: 1 << 10}
	if cfg.Limits != want {
		t.Fatalf("limits %+v, want %+v", cfg.Limits, want)
	}
	cfg, err := loadConfig([]string{"--max-connections-per-ip", "9", "--handshake-timeout", "3s", "--preauth-budget", "2MiB", "--frame-timeout", "0"},
		func(k string) string {
			switch k {
			case "JUNCTION_CONNECTION_RATE_PER_IP":
				return "7"
			case "JUNCTION_PREAUTH_MAX_FRAME_SIZE":
				return "8KiB"
			case "JUNCTION_FRAME_MIN_RATE":
				return "100"
			}
			return ""
		}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.Limits; l.MaxConnectionsPerIP != 9 || l.HandshakeTimeout != 3*time.Second || l.ConnectionRatePerIP != 7 || l.ConnectionBurstPerIP != 500 ||
		l.PreAuthBudget != 2<<20 || l.PreAuthMaxFrameSize != 8<<10 || l.FrameTimeout != 0 || l.FrameMinRate != 100 {
		t.Fatalf("limits from flags and env: %+v", l)
	}
	if d := cfg.Limits.frameTimeout(); d >= 0 {
		t.Fatalf("--frame-timeout 0 reaches the protocols as %v, want negative (off)", d)
	}
	_, errs = parseConfig([]byte("limits:\n  handshake-timeout: 0s\n  connection-burst-per-ip: 0\n  max-connections-per-ip: -1\n" +
		"  preauth-max-frame-size: 100\n  preauth-budget: 512\n  frame-timeout: -1s\n  frame-min-rate: 0\n"))
	report := fmt.Sprint(errs)
	for _, want := range []string{"line 2: limits.handshake-timeout", "line 3: limits.connection-burst-per-ip", "line 4: limits.max-connections-per-ip",
		"line 5: limits.preauth-max-frame-size", "line 7: limits.frame-timeout", "line 8: limits.frame-min-rate"} {
		if !strings.Contains(report, want) {
			t.Errorf("errors lack %q: %s", want, report)
		}
	}
	if _, errs := parseConfig([]byte("limits:\n  preauth-budget: 1KiB\n")); !strings.Contains(fmt.Sprint(errs), "line 2: limits.preauth-budget") {
		t.Errorf("a budget smaller than one pre-auth frame: %v", errs)
	}
}

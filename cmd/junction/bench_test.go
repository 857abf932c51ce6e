package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/bench"
	"github.com/junctionmq/junction/internal/freeport"
)

// TestBenchAgainstJunction runs `junction bench` briefly over each
// protocol against an in-process broker and checks the result is sane.
func TestBenchAgainstJunction(t *testing.T) {
	startServe(t, testConfig(t))
	addrs := lastInstance.addrs
	broker := lastInstance.broker
	env := func(k string) string {
		if k == "JUNCTION_CONSOLE" {
			return addrs["console"].String()
		}
		return ""
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"stomp-durable", []string{"--url", "stomp://" + addrs["stomp"].String(), "--durable", "--duration", "1500ms"}},
		// More unacknowledged messages than go-stomp's channels hold: the
		// consumer once acknowledged from the goroutine reading them and
		// deadlocked inside the client.
		{"stomp-durable-window", []string{"--url", "stomp://" + addrs["stomp"].String(), "--durable", "--producers", "2", "--window", "100", "--duration", "1500ms"}},
		{"mqtt-durable", []string{"--url", "mqtt://" + addrs["mqtt"].String(), "--durable", "--duration", "1500ms", "--consumers", "2"}},
		{"amqp-durable", []string{"--url", "amqp://" + addrs["amqp"].String(), "--durable", "--duration", "1500ms", "--producers", "2"}},
		{"stomp-rate", []string{"--protocol", "stomp", "--url", addrs["stomp"].String(), "--rate", "2000", "--count", "1000", "--size", "64"}},
		{"amqp-settled", []string{"--url", "amqp://" + addrs["amqp"].String(), "--duration", "1s", "--rate", "5000"}},
		{"mqtt-qos0", []string{"--url", "mqtt://" + addrs["mqtt"].String(), "--duration", "1s", "--rate", "5000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			args := append([]string{"bench", "--json", "--drain", "5s"}, tc.args...)
			if err := run(ctx, args, env, &out, &errb); err != nil {
				t.Fatalf("junction %s: %v\n%s", strings.Join(args, " "), err, errb.String())
			}
			var r bench.Result
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("JSON output %q: %v", out.String(), err)
			}
			// The run's fresh destination is gone with it.
			if name := benchAddress(r.Destination); !strings.HasPrefix(name, "bench.") {
				t.Errorf("destination %q: address %q", r.Destination, name)
			} else if _, _, ok := broker.AddressRoutingTypes(name); ok || broker.Queue(name) != nil || errb.Len() > 0 {
				t.Errorf("after the run: address %q still there %v, stderr %q", name, ok, errb.String())
			}
			t.Logf("%s: sent %d received %d send %.0f/s e2e p50 %.0fus p99 %.0fus max %.0fus",
				tc.name, r.Sent, r.Received, r.SendRate, r.E2E.P50, r.E2E.P99, r.E2E.Max)
			if r.Sent == 0 || r.SendRate <= 0 || r.ReceiveRate <= 0 {
				t.Errorf("no throughput: %+v", r)
			}
			if r.Durable {
				if r.Received != r.Expected || r.Confirmed != r.Sent {
					t.Errorf("durable run: sent %d confirmed %d received %d expected %d", r.Sent, r.Confirmed, r.Received, r.Expected)
				}
				checkLatency(t, "confirm", r.Confirm)
			}
			if r.Received < r.Expected {
				t.Errorf("received %d of %d", r.Received, r.Expected)
			}
			if strings.HasPrefix(tc.name, "mqtt") && r.Expected != r.Sent*int64(r.Consumers) {
				t.Errorf("mqtt expected %d, want sent %d x consumers %d", r.Expected, r.Sent, r.Consumers)
			}
			if strings.Contains(tc.name, "rate") && r.Sent != 1000 {
				t.Errorf("--count 1000 sent %d", r.Sent)
			}
			checkLatency(t, "e2e", r.E2E)
		})
	}

	// The text summary.
	var out bytes.Buffer
	args := []string{"bench", "--url", "stomp://" + addrs["stomp"].String(), "--count", "200", "--durable"}
	if err := run(context.Background(), args, env, &out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"sent", "received", "p50", "p99.9", "end-to-end", "confirm"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, out.String())
		}
	}
}

func checkLatency(t *testing.T, name string, l bench.Latency) {
	t.Helper()
	if l.Count == 0 || l.P50 < 0 {
		t.Errorf("%s latency not measured: %+v", name, l)
		return
	}
	if !(l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Errorf("%s percentiles out of order: %+v", name, l)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{
		{"bench", "--protocol", "kafka"},
		{"bench", "--url", "mqtt://127.0.0.1:1", "--protocol", "stomp"},
		{"bench", "--size", "4"},
		{"bench", "extra"},
	} {
		var out bytes.Buffer
		if err := run(ctx, args, func(string) string { return "" }, &out, &out); exitCode(err) != exitUsage {
			t.Errorf("junction %v: %v, want a usage error (exit status 2)", args, err)
		}
	}
}

// TestBenchBacklogThenDrain builds a backlog with a send-only run and
// drains it with a receive-only run (--producers 0), as the memory
// figures in docs/benchmarks.md do.
func TestBenchBacklogThenDrain(t *testing.T) {
	startServe(t, testConfig(t))
	url := "amqp://" + lastInstance.addrs["amqp"].String()
	runJSON := func(args ...string) bench.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		args = append([]string{"bench", "--json", "--url", url, "--destination", "queue://backlog", "--durable"}, args...)
		if err := run(ctx, args, func(string) string { return "" }, &out, &errb); err != nil {
			t.Fatalf("junction %s: %v\n%s", strings.Join(args, " "), err, errb.String())
		}
		var r bench.Result
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("JSON output %q: %v", out.String(), err)
		}
		return r
	}
	fill := runJSON("--consumers", "0", "--count", "3000")
	if fill.Sent != 3000 || fill.Confirmed != 3000 || fill.Received != 0 {
		t.Fatalf("send-only run: %+v", fill)
	}
	drain := runJSON("--producers", "0", "--count", "3000", "--drain", "5s")
	if drain.Received != 3000 || drain.Sent != 0 || drain.ReceiveRate <= 0 {
		t.Fatalf("receive-only run: %+v", drain)
	}
	if drain.E2E.Count != 0 {
		t.Fatalf("a receive-only run measured end-to-end latency from another run's stamps: %+v", drain.E2E)
	}
}

// TestBenchAMQPScenarios runs every AMQP scenario of `junction bench amqp`
// briefly against a Junction broker served in-process on loopback, and checks the figures are plausible.
func TestBenchAMQPScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker")
	}
	startServe(t, testConfig(t))
	addr := lastInstance.addrs["amqp"].String()

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"durable-pipelined", []string{"-scenario", "durable-pipelined", "-inflight", "20"}},
		{"durable-wait", []string{"-scenario", "durable-wait"}},
		{"settled", []string{"-scenario", "settled", "-credit", "50"}},
		{"fanout", []string{"-scenario", "fanout", "-subscribers", "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			args := append([]string{"amqp", "-addr", addr, "-duration", "300ms",
				"-warmup", "100ms", "-drain", "5s", "-size", "64", "-json", "-runs", "2", "-pid", "1"}, tc.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := run(ctx, append([]string{"bench"}, args...), func(string) string { return "" }, &out, io.Discard); err != nil {
				t.Fatal(err)
			}
			t.Log(out.String())
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 3 {
				t.Fatalf("want 3 lines, got %q", out.String())
			}
			for _, line := range lines {
				var r struct {
					Protocol      string   `json:"protocol"`
					AddrStyle     string   `json:"addr_style"`
					Scenario      string   `json:"scenario"`
					Ack           string   `json:"ack"`
					SentPerS      float64  `json:"sent_per_s"`
					DeliveredPerS float64  `json:"delivered_per_s"`
					ConfirmedPerS float64  `json:"confirmed_per_s"`
					E2EP50us      float64  `json:"e2e_p50_us"`
					ConfirmP99us  float64  `json:"confirm_p99_us"`
					CPUCores      *float64 `json:"broker_cpu_cores"`
					Undrained     int64    `json:"undrained"`
				}
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatal(err)
				}
				if r.Protocol != "amqp" || r.AddrStyle != "junction" || r.SentPerS <= 0 || r.DeliveredPerS <= 0 ||
					r.E2EP50us < 0 || r.Undrained != 0 || r.CPUCores == nil {
					t.Errorf("implausible result: %s", line)
				}
				if strings.HasPrefix(r.Scenario, "durable") && (r.ConfirmedPerS <= 0 || r.ConfirmP99us < 0 || r.Ack != "accept") {
					t.Errorf("no confirms: %s", line)
				}
			}
		})
	}

	// The text line names the protocol and the address style.
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, []string{"bench", "amqp", "-addr", addr, "-scenario", "durable-wait", "-producers", "1",
		"-duration", "200ms", "-warmup", "0s", "-size", "16"}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"amqp-durable-wait ", "confirmed=", "consumed=", "ack=accept", "addr_style=junction", "undrained=0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in %q", want, out.String())
		}
	}
}

// TestBenchSignalPrintsFigures: `junction bench` against a broker that
// stops answering (CONNECTED, then silence) ends at once on a signal
// (the context's end), printing what it measured, and fails.
func TestBenchSignalPrintsFigures(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { l.Close(); conns.Wait() })
	conns.Go(func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				if _, err := br.ReadBytes(0); err != nil {
					return
				}
				nc.Write([]byte("CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00"))
				io.Copy(io.Discard, br)
			})
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	var out bytes.Buffer
	start := time.Now()
	err = run(ctx, []string{"bench", "--url", "stomp://" + l.Addr().String(), "--durable", "--duration", "1m", "--json", "--console", "127.0.0.1:1"},
		func(string) string { return "" }, &out, io.Discard)
	if !errors.Is(err, bench.ErrInterrupted) {
		t.Fatalf("bench: %v, want interrupted", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("bench took %v, a second after the signal was due", took)
	}
	var r bench.Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("no figures printed: %q: %v", out.String(), err)
	}
	if r.Stopped != "interrupted" || r.SendS < 0.5 {
		t.Errorf("figures %+v, want a run stopped by the signal after about a second", r)
	}
}

// TestBenchLeavesNoQueueUnlessItCannotDelete: a run that cannot delete
// its fresh queue (no console there) still succeeds and says so on
// stderr; a send-only run keeps its messages on purpose and says where.
func TestBenchLeavesNoQueueUnlessItCannotDelete(t *testing.T) {
	startServe(t, testConfig(t))
	broker := lastInstance.broker
	stompURL := "stomp://" + lastInstance.addrs["stomp"].String()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	benchRun := func(args ...string) (bench.Result, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		args = append([]string{"bench", "--json", "--url", stompURL, "--count", "50", "--durable"}, args...)
		if err := run(ctx, args, func(string) string { return "" }, &out, &errb); err != nil {
			t.Fatalf("junction %s: %v\n%s", strings.Join(args, " "), err, errb.String())
		}
		var r bench.Result
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("JSON output %q: %v", out.String(), err)
		}
		return r, errb.String()
	}
	r, stderr := benchRun("--console", closed)
	name := benchAddress(r.Destination)
	if broker.Queue(name) == nil || !strings.Contains(stderr, "could not delete "+name+" through the console at "+closed+" (it stays on the broker if the run made it)") {
		t.Errorf("console unreachable: queue %q kept %v, stderr %q", name, broker.Queue(name) != nil, stderr)
	}
	// A run that failed before making its queue: nothing to say about it.
	var errb bytes.Buffer
	err = run(context.Background(), []string{"bench", "--url", "stomp://" + closed, "--count", "1", "--console", lastInstance.addrs["console"].String()},
		func(string) string { return "" }, io.Discard, &errb)
	if err == nil || errb.Len() > 0 {
		t.Errorf("bench against nothing: %v, stderr %q", err, errb.String())
	}
	r, stderr = benchRun("--consumers", "0", "--console", lastInstance.addrs["console"].String())
	name = benchAddress(r.Destination)
	if q := broker.Queue(name); q == nil || q.Stats().Depth != 50 || !strings.Contains(stderr, "the messages stay on the broker in "+r.Destination) {
		t.Errorf("send-only run: queue %q, stderr %q", name, stderr)
	}
}

// TestBenchDeletesItsQueueOnACluster: against a cluster node, the
// console's API deletes the run's fresh queue in the group that holds
// it, as on a single broker.
func TestBenchDeletesItsQueueOnACluster(t *testing.T) {
	addrs, err := freeport.Addrs(1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("bench-cluster-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Cluster = ClusterConfig{NodeID: 1, Listen: addrs[0], Peers: "1=" + addrs[0], Groups: 2, ElectionTimeout: 300 * time.Millisecond,
		Insecure: true, SecretFile: secret}
	startServe(t, cfg)
	console := lastInstance.addrs["console"].String()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	args := []string{"bench", "--json", "--url", "stomp://" + lastInstance.addrs["stomp"].String(), "--count", "50", "--durable", "--console", console}
	if err := run(ctx, args, func(string) string { return "" }, &out, &errb); err != nil {
		t.Fatalf("junction %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	var r bench.Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("JSON output %q: %v", out.String(), err)
	}
	if r.Received != 50 || errb.Len() > 0 {
		t.Fatalf("bench on a cluster node: %+v, stderr %q", r, errb.String())
	}
	name := benchAddress(r.Destination)
	var st bytes.Buffer
	err = run(ctx, []string{"queue", "stat", name, "--console", console}, func(string) string { return "" }, &st, &st)
	if ae := (*apiError)(nil); !errors.As(err, &ae) || ae.status != http.StatusNotFound {
		t.Fatalf("queue %s after the run: %v\n%s", name, err, st.String())
	}
}

// The bench logs in to a console it guessed (port 8161 of the --url
// host) only when that host is this machine: elsewhere the credentials
// would cross the network in clear HTTP to whatever listens there
// (ActiveMQ's and Artemis's consoles use the port too). A console the
// user named gets them.
func TestBenchConsoleCredentials(t *testing.T) {
	for _, tc := range []struct {
		url, console, wantConsole, wantUser string
	}{
		{"stomp://app:secret@127.0.0.1:61613", "", "127.0.0.1:8161", "app"},
		{"amqp://app:secret@localhost:5672", "", "localhost:8161", "app"},
		{"stomp://app:secret@[::1]:61613", "", "[::1]:8161", "app"},
		{"stomp://app:secret@broker.example.com:61613", "", "broker.example.com:8161", ""},
		{"amqps://app:secret@10.0.0.5:5671", "", "10.0.0.5:8161", ""},
		{"stomp://app:secret@broker.example.com:61613", "https://broker.example.com:8443", "https://broker.example.com:8443", "app"},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		af := benchConsole(u, tc.console)
		if af.console != tc.wantConsole || af.user != tc.wantUser || (tc.wantUser == "") != (af.password == "") {
			t.Errorf("%s, console %q: console %q, user %q, password set %v; want %q, %q",
				tc.url, tc.console, af.console, af.user, af.password != "", tc.wantConsole, tc.wantUser)
		}
	}
}

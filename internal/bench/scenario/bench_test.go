package scenario

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// The command name may contain spaces and parentheses.
	stat := "6145 (java) (x y) S 1 6140 6140 0 -1 1077936384 123 0 4 0 250 75 0 0 20 0 50 0 1234 0\n"
	got, err := parseProcStat([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if want := 325 * clockTick; got != want {
		t.Errorf("cpu = %v, want %v", got, want)
	}
	if _, err := parseProcStat([]byte("1 (x) S 1 2")); err == nil {
		t.Error("short stat: no error")
	}
	self, err := procCPU(1)
	if err != nil || self < 0 {
		t.Errorf("procCPU(1) = %v, %v", self, err)
	}
	if m, err := machineCPU(); err != nil || m <= 0 {
		t.Errorf("machineCPU() = %v, %v", m, err)
	}
}

func TestLoopbackAddr(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"127.0.0.1:61613", "127.0.0.1:61613", true},
		{"127.1.2.3:1", "127.1.2.3:1", true},
		{"[::1]:61613", "[::1]:61613", true},
		{"localhost:61613", "", true}, // resolves to 127.0.0.1 and/or ::1
		{"10.0.0.1:61613", "", false},
		{"192.168.1.1:61613", "", false},
		{"8.8.8.8:53", "", false},
		{"[2001:db8::1]:61613", "", false},
		{":61613", "", false},
		{"0.0.0.0:61613", "", false},
		{"127.0.0.1", "", false},
	} {
		got, err := loopbackAddr(ctx, tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("loopbackAddr(%q) err = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && tc.want != "" && got != tc.want {
			t.Errorf("loopbackAddr(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	body := []byte("a\x00b\nc")
	if err := writeFrame(w, "SEND", []string{"destination", "/queue/a:b", "x", "l1\nl2\\"}, body); err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(w, "CONNECT", []string{"host", "a:b"}, nil); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if !strings.Contains(buf.String(), `destination:/queue/a\cb`) || !strings.Contains(buf.String(), "host:a:b\n") {
		t.Fatalf("escaping wrong: %q", buf.String())
	}
	// Heart-beat EOLs before and between frames are skipped.
	r := bufio.NewReaderSize(io.MultiReader(strings.NewReader("\n\r\n"), &buf), rawMaxLine)
	f, err := readFrame(r)
	if err != nil {
		t.Fatal(err)
	}
	if f.command != "SEND" || !bytes.Equal(f.body, body) {
		t.Fatalf("got %s %q", f.command, f.body)
	}
	if v, _ := f.get("destination"); v != "/queue/a:b" {
		t.Errorf("destination = %q", v)
	}
	if v, _ := f.get("x"); v != "l1\nl2\\" {
		t.Errorf("x = %q", v)
	}
	f, err = readFrame(r)
	if err != nil || f.command != "CONNECT" {
		t.Fatalf("second frame: %v %v", f, err)
	}
	if _, err := readFrame(r); err != io.EOF {
		t.Errorf("at end: err = %v, want EOF", err)
	}
}

func TestReadFrame(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		check    func(*rawFrame) bool
		wantErr  bool
	}{
		{"no content-length", "RECEIPT\nreceipt-id:7\n\n\x00", func(f *rawFrame) bool {
			v, _ := f.get("receipt-id")
			return f.command == "RECEIPT" && v == "7" && len(f.body) == 0
		}, false},
		{"CRLF and first header wins", "ERROR\r\nmessage:a\r\nmessage:b\r\n\r\nbody\x00", func(f *rawFrame) bool {
			v, _ := f.get("message")
			return v == "a" && string(f.body) == "body"
		}, false},
		{"CONNECTED not unescaped", "CONNECTED\nserver:a\\cb\n\n\x00", func(f *rawFrame) bool {
			v, _ := f.get("server")
			return v == `a\cb`
		}, false},
		{"undefined escape", "RECEIPT\nreceipt-id:a\\tb\n\n\x00", nil, true},
		{"no colon", "RECEIPT\nbad\n\n\x00", nil, true},
		{"content-length too big", "MESSAGE\ncontent-length:500000000\n\n", nil, true},
		{"missing NUL", "MESSAGE\ncontent-length:2\n\nabc", nil, true},
		{"truncated", "MESSAGE\ndest", nil, true},
		{"long line", "MESSAGE\nx:" + strings.Repeat("a", rawMaxLine) + "\n\n\x00", nil, true},
	} {
		f, err := readFrame(bufio.NewReaderSize(strings.NewReader(tc.in), rawMaxLine))
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s: no error", tc.name)
			}
			continue
		}
		if err != nil || !tc.check(f) {
			t.Errorf("%s: got %+v, %v", tc.name, f, err)
		}
	}
}

func TestMedianResult(t *testing.T) {
	one, three := 1.0, 3.0
	rs := []*result{
		{Scenario: scQueue, SentPerS: 10, E2EP50us: 5, CPUusPerMsg: &three, Undrained: 0},
		{Scenario: scQueue, SentPerS: 30, E2EP50us: -1, CPUusPerMsg: &one, Undrained: 7},
		{Scenario: scQueue, SentPerS: 20, E2EP50us: 9},
	}
	m := medianResult(rs)
	if m.Run != "median" || m.SentPerS != 20 || m.E2EP50us != 5 || *m.CPUusPerMsg != 2 || m.Undrained != 7 {
		t.Errorf("median = %+v", m)
	}
}

func TestValidate(t *testing.T) {
	for _, args := range [][]string{
		{"-scenario", "nope"},
		{"-size", "4"},
		{"-duration", "0s"},
		{"-scenario", "fanout", "-producers", "2"},
		{"-scenario", "queue", "-inflight", "5"},
		{"-scenario", "durable-pipelined", "-producers", "10", "-inflight", "5"},
		{"-scenario", "durable-wait", "-ack", "auto", "-ack", "client"},
		{"-addr", "10.1.1.1:61613"},
		{"extra"},
	} {
		if _, err := parseSTOMPFlags(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	cfg, err := parseSTOMPFlags([]string{"-scenario", "durable-pipelined"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.producers != 2 || cfg.consumers != 1 || cfg.inflight != 200 || cfg.ack != ackIndiv {
		t.Errorf("defaults: %+v", cfg)
	}
	cfg, err = parseSTOMPFlags([]string{"-scenario", "fanout"}, io.Discard)
	if err != nil || cfg.consumers != 10 || cfg.producers != 1 {
		t.Errorf("fanout defaults: %+v, %v", cfg, err)
	}
}

// TestScenarios runs every scenario briefly against an in-process fake
// broker on loopback, and checks the figures are plausible.
func TestScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker")
	}
	fb := startFakeBroker(t)
	cases := []struct {
		name string
		args []string
	}{
		{"queue", []string{"-scenario", "queue"}},
		{"queue-ack-1.1", []string{"-scenario", "queue", "-ack", "client-individual", "-consumers", "2", "-prefetch", "50", "-stomp-version", "1.1"}},
		{"fanout", []string{"-scenario", "fanout", "-subscribers", "3"}},
		{"durable-wait", []string{"-scenario", "durable-wait"}},
		{"durable-pipelined", []string{"-scenario", "durable-pipelined", "-producers", "3", "-inflight", "20"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			args := append([]string{"stomp", "-addr", fb.l.Addr().String(), "-duration", "300ms",
				"-warmup", "100ms", "-drain", "5s", "-size", "64", "-json", "-runs", "2", "-pid", "1"}, tc.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := Main(ctx, args, &out, io.Discard); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 3 {
				t.Fatalf("want 3 lines, got %q", out.String())
			}
			for _, line := range lines {
				var r result
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatal(err)
				}
				if r.SentPerS <= 0 || r.DeliveredPerS <= 0 || r.E2EP50us < 0 || r.Undrained != 0 || r.CPUCores == nil {
					t.Errorf("implausible result: %s", line)
				}
				if strings.HasPrefix(r.Scenario, "durable") && (r.ConfirmedPerS <= 0 || r.ConfirmP99us < 0) {
					t.Errorf("no confirms: %s", line)
				}
			}
		})
	}
}

func TestTextOutput(t *testing.T) {
	cpu := 12.5
	r := &result{Scenario: scDurPipe, Run: "1", Size: 1024, Producers: 2, Consumers: 1, Inflight: 200,
		Ack: ackIndiv, WindowS: 10, ConfirmedPerS: 3000, SentPerS: 3000, DeliveredPerS: 2999,
		E2EP50us: 1500, E2EP99us: 25e6, ConfirmP50us: 800, ConfirmP99us: -1, CPUusPerMsg: &cpu, CPUBasis: "confirmed"}
	var b bytes.Buffer
	if err := r.write(&b, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"confirmed=3000/s", "consumed=2999/s", "e2e_p50=1.5ms", "e2e_p99=25.0s",
		"confirm_p50=800us", "confirm_p99=-", "broker_cpu=12.50us/confirmed", "inflight=200"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in %q", want, b.String())
		}
	}
}

func TestRunUsage(t *testing.T) {
	if err := Main(context.Background(), nil, io.Discard, io.Discard); !errors.Is(err, ErrUsage) {
		t.Errorf("no args: %v", err)
	}
	if err := Main(context.Background(), []string{"amqp091"}, io.Discard, io.Discard); !errors.Is(err, ErrUsage) {
		t.Errorf("unknown protocol: %v", err)
	}
}

// TestSignalEndsTheWindow: a signal (the context's end) during the
// measured window ends the run at once, printing its figures so far,
// marked interrupted, and no median.
func TestSignalEndsTheWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker")
	}
	fb := startFakeBroker(t)
	for _, sc := range []string{"queue", "durable-pipelined"} {
		t.Run(sc, func(t *testing.T) {
			var out bytes.Buffer
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(1500*time.Millisecond, cancel) // in the window of run 1
			start := time.Now()
			err := Main(ctx, []string{"stomp", "-addr", fb.l.Addr().String(), "-scenario", sc, "-duration", "1m",
				"-warmup", "500ms", "-size", "64", "-json", "-runs", "3"}, &out, io.Discard)
			took := time.Since(start)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Main: %v, want context.Canceled", err)
			}
			if took > 1500*time.Millisecond+2*closeTimeout+time.Second {
				t.Errorf("took %v after the signal", took-1500*time.Millisecond)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("want the interrupted run's line alone, got %q", out.String())
			}
			var r result
			if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
				t.Fatal(err)
			}
			if !r.Interrupted || r.SentPerS <= 0 || r.WindowS <= 0 || r.WindowS > 5 {
				t.Errorf("interrupted run: %s", lines[0])
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	jamqp "github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
)

// The import table of internal/lint (docs/architecture.md) gives
// cmd/junction-bench no imports of ours; like the protocol packages'
// tests, which import internal/testserve outside their rows, this test
// imports the broker only from a _test file, which the table (checked with
// go list -deps, without -test) does not cover: the tool itself stays
// free of them.

func TestAMQPValidate(t *testing.T) {
	for _, args := range [][]string{
		{"-scenario", "nope"},
		{"-addr-style", "artemis"},
		{"-pass", "x"},
		{"-scenario", "settled", "-inflight", "5"},
		{"-scenario", "durable-pipelined", "-producers", "3"},
		{"-scenario", "durable-wait", "-subscribers", "3"},
		{"-credit", "-1"},
		{"-addr", "10.0.0.1:5672"},
	} {
		if _, err := parseAMQPFlags(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	for _, tc := range []struct {
		scenario                 string
		senders, receivers, infl int
	}{
		{scDurPipe, 1, 1, 200},
		{scDurWait, 2, 1, 0},
		{amSettled, 1, 1, 0},
		{scFanout, 1, 10, 0},
	} {
		cfg, err := parseAMQPFlags([]string{"-scenario", tc.scenario}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.senders() != tc.senders || cfg.receivers() != tc.receivers || cfg.inflight != tc.infl || cfg.credit != 500 || cfg.addrStyle != styleJunction {
			t.Errorf("%s defaults: %+v", tc.scenario, cfg)
		}
	}
}

func TestAMQPAddress(t *testing.T) {
	for _, tc := range []struct{ style, scenario, prefix string }{
		{styleJunction, scDurWait, "queue://bench.durable-wait."},
		{styleJunction, scFanout, "topic://bench.fanout."},
		{styleRabbitMQ, amSettled, "/queue/bench.settled."},
		{styleRabbitMQ, scFanout, "/topic/bench.fanout."},
	} {
		cfg := &amqpConfig{addrStyle: tc.style}
		cfg.scenario = tc.scenario
		a, b := newAMQPAddress(cfg), newAMQPAddress(cfg)
		if !strings.HasPrefix(a, tc.prefix) || a == b {
			t.Errorf("%s %s: %q, %q", tc.style, tc.scenario, a, b)
		}
	}
}

// TestAMQPScenarios runs every scenario briefly against a Junction broker
// served in-process on loopback, and checks the figures are plausible.
func TestAMQPScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker")
	}
	b, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	srv := jamqp.New(jamqp.Config{}, b)
	addr, _ := testserve.Serve(t, srv.ServeConn)

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
			if err := run(ctx, args, &out, io.Discard); err != nil {
				t.Fatal(err)
			}
			t.Log(out.String())
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 3 {
				t.Fatalf("want 3 lines, got %q", out.String())
			}
			for _, line := range lines {
				r := amqpResult{result: &result{}}
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatal(err)
				}
				if r.Protocol != "amqp" || r.AddrStyle != styleJunction || r.SentPerS <= 0 || r.DeliveredPerS <= 0 ||
					r.E2EP50us < 0 || r.Undrained != 0 || r.CPUCores == nil {
					t.Errorf("implausible result: %s", line)
				}
				if strings.HasPrefix(r.Scenario, "durable") && (r.ConfirmedPerS <= 0 || r.ConfirmP99us < 0 || r.Ack != amAccept) {
					t.Errorf("no confirms: %s", line)
				}
			}
		})
	}

	// The text line names the protocol and the address style.
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, []string{"amqp", "-addr", addr, "-scenario", "durable-wait", "-producers", "1",
		"-duration", "200ms", "-warmup", "0s", "-size", "16"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"amqp-durable-wait ", "confirmed=", "consumed=", "ack=accept", "addr_style=junction", "undrained=0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in %q", want, out.String())
		}
	}
}

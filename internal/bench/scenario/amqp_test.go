package scenario

import (
	"io"
	"strings"
	"testing"
)

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

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/junctionmq/junction/internal/bench"
	"github.com/junctionmq/junction/internal/bench/scenario"
)

const benchUsage = `usage: junction bench [flags]
       junction bench stomp|mqtt|amqp --scenario S [flags]
       junction bench conns [flags]

Runs producers and consumers against any broker speaking STOMP, MQTT or
AMQP 1.0 and prints throughput and end-to-end latency percentiles.

  junction bench --url stomp://127.0.0.1:61613 --durable --duration 30s
  junction bench --protocol mqtt --producers 4 --consumers 4 --rate 10000
  junction bench --url amqp://127.0.0.1:5672 --count 100000 --json

The second form runs the fixed scenarios of docs/benchmarks.md, each
with a warm-up, a measured window, repetitions with their median, and
the broker's CPU per message (--pid) (junction bench stomp -h):

  stomp: queue, fanout, durable-wait, durable-pipelined (raw STOMP)
  mqtt:  qos1, fanout, connect (connect rate), idle (resident memory
         per idle connection; --churn: after connecting and closing)
  amqp:  durable-pipelined, durable-wait, settled, fanout

flags of the first form:
`

// runBench is `junction bench`: a load generator for any broker.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (slices.Contains(bench.Protocols, args[0]) || args[0] == "conns") {
		return scenario.Main(ctx, args, stdout, stderr)
	}
	fs := flag.NewFlagSet("junction bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o bench.Options
	fs.StringVar(&o.Protocol, "protocol", "", "stomp, mqtt or amqp (default: the --url scheme, else stomp)")
	fs.StringVar(&o.URL, "url", "", "broker `URL`: stomp://HOST:PORT, mqtt://HOST:PORT or amqp://HOST:PORT; user:password@ for credentials (default: the protocol's port on 127.0.0.1)")
	fs.StringVar(&o.Destination, "destination", "", "queue (STOMP, AMQP) or topic (MQTT) (default: a fresh bench.<random> name)")
	fs.IntVar(&o.Producers, "producers", 1, "producer connections (0: receive a backlog of --count messages already waiting)")
	fs.IntVar(&o.Consumers, "consumers", 1, "consumer connections (0: send only)")
	fs.IntVar(&o.Size, "size", 1024, "message body `bytes` (at least 8)")
	fs.BoolVar(&o.Durable, "durable", false, "persistent messages confirmed by the broker, consumers acknowledging")
	fs.Float64Var(&o.Rate, "rate", 0, "total send rate in `msg/s` (0: as fast as possible)")
	fs.DurationVar(&o.Duration, "duration", 0, "sending time (default 10s unless --count is set)")
	fs.Int64Var(&o.Count, "count", 0, "total messages to send (0: no limit)")
	fs.IntVar(&o.Window, "window", 0, "unconfirmed sends per producer (default 16 durable, 1 otherwise)")
	fs.DurationVar(&o.Drain, "drain", 0, "wait for outstanding messages after sending (default 10s)")
	fs.DurationVar(&o.DialTimeout, "dial-timeout", 0, "connect and attach timeout (default 5s)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), benchUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return usagef("bench: unexpected arguments %q", fs.Args())
	}
	o.ReceiveOnly, o.SendOnly = o.Producers == 0, o.Consumers == 0
	if o.Protocol == "" && o.URL == "" {
		o.Protocol = "stomp"
	}
	var mu sync.Mutex
	shown := false
	if isTerminal(stdout) && !*asJSON {
		o.Progress = func(p bench.Progress) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(stdout, "\r\033[K%s", bench.ProgressLine(p))
			shown = true
		}
	}
	res, err := bench.Run(ctx, o)
	mu.Lock()
	if shown {
		fmt.Fprint(stdout, "\r\033[K")
	}
	mu.Unlock()
	if err != nil && res.Stopped == "" {
		return fmt.Errorf("bench: %w", err)
	}
	// A run stopped early (a signal, or stuck) still prints what it
	// measured, then fails.
	write := bench.WriteText
	if *asJSON {
		write = bench.WriteJSON
	}
	if werr := write(stdout, res); werr != nil {
		return werr
	}
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// isTerminal reports whether w is a terminal (not merely a character
// device: /dev/null is one too) that is not TERM=dumb.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTTY(f) && !strings.EqualFold(os.Getenv("TERM"), "dumb")
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/junctionmq/junction/core"
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

Without --destination the first form uses a fresh bench.<random> queue
(topic for MQTT) and deletes it at the end through Junction's console
API (--console); where it cannot (another broker, no console, no manage
permission) it says so on stderr and the run still succeeds. A
send-only run (--consumers 0) keeps its messages for a later
--producers 0 run.

flags of the first form:
`

// runBench is `junction bench`: a load generator for any broker.
func runBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
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
	console := fs.String("console", getenv("JUNCTION_CONSOLE"), "Junction's console `URL` or HOST:PORT, to delete the bench.<random> destination at the end "+
		"($JUNCTION_CONSOLE; default port 8161 of the --url host); the --url credentials log in (to the default one only when the --url host is this machine)")
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
	fresh := o.Destination == ""
	if err := o.Normalize(); err != nil {
		return usagef("bench: %v", err) // the options, before any connection
	}
	if fresh && o.SendOnly {
		fmt.Fprintf(stderr, "junction bench: the messages stay on the broker in %s (--consumers 0): a later run with --producers 0 --destination %s receives them\n",
			o.Destination, o.Destination)
	} else if fresh {
		// The run made the destination: remove it at the end, whatever
		// the outcome, through the console's API (the protocols have
		// no way to delete a queue).
		defer deleteBenchDestination(ctx, o, *console, stderr)
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

// deleteBenchDestination deletes the address (and so its queue) that a
// run created under a fresh bench.<random> name, through the console's
// API of the broker (Junction's; on a cluster node the API deletes it
// in the group that holds it). It never fails the run: what it cannot
// do it says on stderr, for other brokers have no such API or another
// one. Junction's answer that the address does not exist (a run that
// failed before making it) is not worth a word.
func deleteBenchDestination(ctx context.Context, o bench.Options, console string, stderr io.Writer) {
	name := benchAddress(o.Destination)
	u, err := url.Parse(o.URL)
	if err != nil {
		return // Normalize checked it
	}
	af := benchConsole(u, console)
	console = af.console
	// Bounded, and done after a signal too (the run's context is over).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for {
		err = af.call(ctx, http.MethodDelete, "/addresses/"+url.PathEscape(name), nil, nil)
		// The broker may not have seen the consumers' connections close
		// yet: their queue is still in use for a moment.
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != http.StatusConflict || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusNotFound && strings.Contains(ae.msg, core.ErrAddressNotFound.Error()) {
		return // Junction has no such address: the run never made it (it failed first), or it is gone
	}
	if err != nil {
		fmt.Fprintf(stderr, "junction bench: could not delete %s through the console at %s (it stays on the broker if the run made it): %v\n", name, console, err)
	}
}

// benchConsole is how the bench reaches the console of the broker at u:
// at console if given, else port 8161 of u's host. A console the user
// named, or one on this machine, gets u's credentials; a guessed one
// elsewhere (ActiveMQ's and Artemis's consoles use port 8161 too) gets
// none: they would cross the network in clear HTTP to whatever listens
// there.
func benchConsole(u *url.URL, console string) *adminFlags {
	af := &adminFlags{console: console}
	guessed := console == ""
	if guessed {
		af.console = net.JoinHostPort(u.Hostname(), "8161")
	}
	if !guessed || isLoopback(af.console) {
		af.user = u.User.Username()
		af.password, _ = u.User.Password()
	}
	return af
}

// benchAddress is the address of a fresh bench destination:
// bench.<random> for /queue/bench.<random> (STOMP), queue://bench.<random>
// (AMQP) and bench/<random> (MQTT).
func benchAddress(dest string) string {
	dest = strings.TrimPrefix(strings.TrimPrefix(dest, "/queue/"), "queue://")
	return strings.ReplaceAll(dest, "/", ".")
}

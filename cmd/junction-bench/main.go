package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "junction-bench:", err)
		os.Exit(1)
	}
}

// errUsage reports bad command-line usage; the usage text has already been
// printed.
var errUsage = errors.New("junction-bench: usage")

const topUsage = `usage: junction-bench <protocol> [flags]

protocols:
  stomp   measure a STOMP broker with the go-stomp client (junction-bench stomp -h)
  mqtt    measure an MQTT broker with the paho client (junction-bench mqtt -h)
  amqp    measure an AMQP 1.0 broker with the go-amqp client (junction-bench amqp -h)
  conns   what a STOMP or AMQP connection costs: idle memory, connects/s (junction-bench conns -h)
`

// run is the whole program, with its I/O passed in so tests can call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return errUsage
	}
	switch args[0] {
	case "stomp":
		cfg, err := parseSTOMPFlags(args[1:], stderr)
		if err != nil {
			return err
		}
		return runSTOMP(ctx, cfg, stdout, stderr)
	case "mqtt":
		cfg, err := parseMQTTFlags(args[1:], stderr)
		if err != nil {
			return err
		}
		return runMQTT(ctx, cfg, stdout, stderr)
	case "amqp":
		cfg, err := parseAMQPFlags(args[1:], stderr)
		if err != nil {
			return err
		}
		return runAMQP(ctx, cfg, stdout, stderr)
	case "conns":
		cfg, err := parseConnsFlags(args[1:], stderr)
		if err != nil {
			return err
		}
		return runConns(ctx, cfg, stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, topUsage)
		return nil
	default:
		fmt.Fprintf(stderr, "unknown protocol %q\n%s", args[0], topUsage)
		return errUsage
	}
}

package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ErrUsage reports bad command-line usage (errors.Is: a bad flag value
// is reported with its own message); the usage text has already been
// printed. junction exits 2 for it.
var ErrUsage = errors.New("bench: bad command line (usage above)")

// usageErr is a bad flag value: its own message, and errors.Is ErrUsage.
type usageErr struct{ error }

func (e usageErr) Unwrap() error        { return e.error }
func (e usageErr) Is(target error) bool { return target == ErrUsage }

const topUsage = `usage: junction bench <protocol> --scenario S [flags]

protocols:
  stomp   measure a STOMP broker with the go-stomp client (junction bench stomp -h)
  mqtt    measure an MQTT broker with the paho client (junction bench mqtt -h)
  amqp    measure an AMQP 1.0 broker with the go-amqp client (junction bench amqp -h)
  conns   what a STOMP or AMQP connection costs: idle memory, connects/s (junction bench conns -h)
`

// Main runs the fixed scenarios of one protocol: args are
// "stomp|mqtt|amqp [flags]", as after `junction bench`. A help request
// returns flag.ErrHelp, bad usage an error wrapping ErrUsage, both with
// the usage printed.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return ErrUsage
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
		return ErrUsage
	}
}

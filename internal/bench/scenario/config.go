package scenario

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
)

// Scenario names accepted by -scenario.
const (
	scQueue     = "queue"
	scFanout    = "fanout"
	scDurWait   = "durable-wait"
	scDurPipe   = "durable-pipelined"
	ackAuto     = "auto"
	ackIndiv    = "client-individual"
	minBodySize = 8 // the send timestamp
	maxBodySize = 16 << 20
)

var scenarios = []string{scQueue, scFanout, scDurWait, scDurPipe}

var stompSpec = &commonSpec{
	name:            "stomp",
	addr:            "127.0.0.1:61613",
	scenarios:       scenarios,
	sizeHelp:        "message body size in bytes (at least 8: the first 8 carry the send time)",
	durationHelp:    "measured window",
	warmupHelp:      "load before the measured window",
	drainHelp:       "at most this long after the window to let consumers catch up and receipts arrive",
	pidHelp:         "broker process id: report its CPU time per message from /proc/PID/stat",
	dialTimeoutHelp: "TCP connect plus STOMP CONNECT timeout",
}

// config is one validated "stomp" command line.
type config struct {
	common
	producers int
	consumers int // consumers, or subscribers for fanout
	inflight  int // durable-pipelined: receipts outstanding in total
	ack       string
	prefetch  int
	login     string
	passcode  string
	host      string
	version   string // STOMP version asked for in CONNECT
}

// persistent reports whether the scenario sends persistent:true.
func (c *config) persistent() bool { return c.scenario == scDurWait || c.scenario == scDurPipe }

// parseSTOMPFlags parses and validates the flags of the stomp subcommand.
// Zero for -producers, -consumers and -inflight means the scenario's default.
func parseSTOMPFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	err := parseCommand(stompSpec, &c.common, args, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&c.producers, "producers", 0, "producer connections (default 1 for queue, 2 for durable-*; fanout always 1)")
		fs.IntVar(&c.consumers, "consumers", 0, "consumer connections (default 1)")
		fs.IntVar(&c.consumers, "subscribers", 0, "fanout: topic subscribers (default 10); same as -consumers")
		fs.IntVar(&c.inflight, "inflight", 0, "durable-pipelined: receipts outstanding in total over all producers (default 200)")
		fs.StringVar(&c.ack, "ack", ackAuto, "queue: consumer ack mode, auto or client-individual (durable-* always ack client-individual)")
		fs.IntVar(&c.prefetch, "prefetch", 0, "consumer prefetch, sent as activemq.prefetchSize and prefetch-count on SUBSCRIBE (0: broker default)")
		fs.StringVar(&c.login, "login", "", "STOMP login")
		fs.StringVar(&c.passcode, "passcode", "", "STOMP passcode")
		fs.StringVar(&c.host, "host", "/", "STOMP CONNECT host header (RabbitMQ: the vhost)")
		fs.StringVar(&c.version, "stomp-version", "1.2", "STOMP version to ask for, 1.1 or 1.2 (they differ in how ACK names the message)")
	}, c.validate)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// validate fills scenario defaults and checks ranges.
func (c *config) validate() error {
	if err := c.validateCommon(scenarios); err != nil {
		return err
	}
	if c.prefetch < 0 {
		return fmt.Errorf("-prefetch %d is negative", c.prefetch)
	}
	if c.version != "1.1" && c.version != "1.2" {
		return fmt.Errorf("-stomp-version %q: want 1.1 or 1.2", c.version)
	}
	switch c.ack {
	case ackAuto, ackIndiv:
	default:
		return fmt.Errorf("-ack %q: want %s or %s", c.ack, ackAuto, ackIndiv)
	}
	if c.producers < 0 || c.consumers < 0 || c.inflight < 0 {
		return errors.New("-producers, -consumers/-subscribers and -inflight must not be negative")
	}
	if c.producers > 1000 || c.consumers > 1000 || c.inflight > 100000 {
		return errors.New("-producers and -consumers are limited to 1000, -inflight to 100000")
	}
	if c.inflight != 0 && c.scenario != scDurPipe {
		return errors.New("-inflight applies to durable-pipelined only")
	}
	switch c.scenario {
	case scQueue:
		c.producers = cmp0(c.producers, 1)
		c.consumers = cmp0(c.consumers, 1)
	case scFanout:
		if c.producers > 1 {
			return errors.New("fanout has exactly one producer")
		}
		c.producers = 1
		c.consumers = cmp0(c.consumers, 10)
		if c.ack != ackAuto {
			return errors.New("-ack applies to queue only (fanout subscribers use auto)")
		}
	case scDurWait, scDurPipe:
		c.producers = cmp0(c.producers, 2)
		c.consumers = cmp0(c.consumers, 1)
		if c.ack != ackAuto {
			return errors.New("-ack applies to queue only (durable-* consumers ack client-individual)")
		}
		c.ack = ackIndiv
		if c.scenario == scDurPipe {
			c.inflight = cmp0(c.inflight, 200)
			if c.inflight < c.producers {
				return fmt.Errorf("-inflight %d is less than -producers %d", c.inflight, c.producers)
			}
		}
	}
	return nil
}

// cmp0 returns v, or def when v is zero.
func cmp0(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// loopbackAddr resolves addr (host:port) and returns ip:port to dial. It
// refuses any host that is not, or does not resolve only to, a loopback
// address: this workplace forbids load on any other address.
func loopbackAddr(ctx context.Context, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("-addr %q: %w", addr, err)
	}
	if host == "" {
		return "", fmt.Errorf("-addr %q: give an explicit loopback host, e.g. 127.0.0.1", addr)
	}
	if ip := net.ParseIP(host); ip != nil {
		if !ip.IsLoopback() {
			return "", fmt.Errorf("-addr %q: %s is not a loopback address; only loopback targets are allowed", addr, ip)
		}
		return net.JoinHostPort(ip.String(), port), nil
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return "", fmt.Errorf("-addr %q: %w", addr, err)
	}
	if len(ips) == 0 {
		return "", fmt.Errorf("-addr %q: host resolves to no address", addr)
	}
	var pick net.IP
	for _, ia := range ips {
		if !ia.IP.IsLoopback() {
			return "", fmt.Errorf("-addr %q: %s resolves to %s, which is not loopback; only loopback targets are allowed", addr, host, ia.IP)
		}
		if pick == nil || (pick.To4() == nil && ia.IP.To4() != nil) {
			pick = ia.IP // prefer IPv4, as brokers often listen on 127.0.0.1 only
		}
	}
	return net.JoinHostPort(pick.String(), port), nil
}

package scenario

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The conns command measures what a connection costs a STOMP or AMQP 1.0
// broker, with hand-written handshakes (no client library, so that the
// client's own cost stays small and the same for every broker):
//
//   - idle: -conns connections opened -concurrency at a time and left
//     idle (no heart-beats: STOMP heart-beat 0,0, AMQP no idle-time-out);
//     the broker's resident memory per connection (VmRSS of -pid before
//     and after, once -settle has passed). With -churn the connections
//     are first opened and closed that many times.
//   - connect: -clients workers connecting (STOMP CONNECT/CONNECTED, AMQP
//     SASL ANONYMOUS and open) and disconnecting (STOMP DISCONNECT with a
//     receipt, AMQP close), over and over, for -duration after -warmup.
const connsUsage = `usage: junction bench conns -proto stomp|amqp -scenario idle|connect -addr host:port [flags]
`

type connsConfig struct {
	proto, scenario, addr string
	login, passcode       string
	pid                   int
	conns, churn, conc    int
	clients               int
	duration, warmup      time.Duration
	settle, dialTimeout   time.Duration
	openTimeout           time.Duration // idle: bound of opening all; 0: 30 s + 1 ms per connection
	asJSON                bool
	goodbye               bool
}

func parseConnsFlags(args []string, stderr io.Writer) (*connsConfig, error) {
	c := &connsConfig{}
	fs := flag.NewFlagSet("conns", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, connsUsage); fs.PrintDefaults() }
	fs.StringVar(&c.proto, "proto", "stomp", "stomp or amqp")
	fs.StringVar(&c.scenario, "scenario", "idle", "idle or connect")
	fs.StringVar(&c.addr, "addr", "", "the broker's host:port")
	fs.StringVar(&c.login, "login", "", "STOMP login (AMQP uses SASL ANONYMOUS)")
	fs.StringVar(&c.passcode, "passcode", "", "STOMP passcode")
	fs.IntVar(&c.pid, "pid", 0, "the broker's process id (resident memory and CPU)")
	fs.IntVar(&c.conns, "conns", 1000, "idle: connections")
	fs.IntVar(&c.churn, "churn", 0, "idle: open and close all -conns this many times first")
	fs.IntVar(&c.conc, "concurrency", 32, "idle: connections opened at once")
	fs.IntVar(&c.clients, "clients", 8, "connect: workers")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "connect: measured time")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "connect: time before measuring")
	fs.DurationVar(&c.settle, "settle", 2*time.Second, "idle: wait before reading the broker's memory")
	fs.DurationVar(&c.dialTimeout, "dial-timeout", 10*time.Second, "bound of one dial and handshake")
	fs.DurationVar(&c.openTimeout, "open-timeout", 0, "idle: bound of opening all -conns (0: 30s plus 1ms per connection; a broker that accepts slowly needs more)")
	fs.BoolVar(&c.asJSON, "json", false, "print the result as JSON")
	fs.BoolVar(&c.goodbye, "goodbye", true, "idle: say goodbye (STOMP DISCONNECT, AMQP close) before closing a connection")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, ErrUsage
	}
	switch {
	case c.proto != "stomp" && c.proto != "amqp":
		fmt.Fprintf(stderr, "-proto must be stomp or amqp\n")
		return nil, ErrUsage
	case c.scenario != "idle" && c.scenario != "connect":
		fmt.Fprintf(stderr, "-scenario must be idle or connect\n")
		return nil, ErrUsage
	case c.addr == "":
		fmt.Fprintf(stderr, "-addr is required\n")
		return nil, ErrUsage
	case c.pid <= 0:
		fmt.Fprintf(stderr, "-pid is required (the broker's memory and CPU are read from /proc)\n")
		return nil, ErrUsage
	}
	return c, nil
}

type connsResult struct {
	Proto          string   `json:"proto"`
	Scenario       string   `json:"scenario"`
	Addr           string   `json:"addr"`
	Conns          int      `json:"conns,omitempty"`
	Churn          int      `json:"churn,omitempty"`
	RSSBeforeKiB   *float64 `json:"rss_before_kib,omitempty"`
	RSSAfterKiB    *float64 `json:"rss_after_kib,omitempty"`
	RSSKiBPerConn  *float64 `json:"rss_kib_per_conn,omitempty"`
	ClosedByBroker *int64   `json:"closed_by_broker,omitempty"`
	Clients        int      `json:"clients,omitempty"`
	ConnectsPerS   *float64 `json:"connects_per_s,omitempty"`
	CPUusPerConn   *float64 `json:"broker_cpu_us_per_connect,omitempty"`
	ClientCPUus    *float64 `json:"client_cpu_us_per_connect,omitempty"`
	ConnectP50us   *float64 `json:"connect_p50_us,omitempty"`
	ConnectP99us   *float64 `json:"connect_p99_us,omitempty"`
	Errors         *int64   `json:"errors,omitempty"`
}

func runConns(ctx context.Context, cfg *connsConfig, stdout io.Writer) error {
	if cfg.scenario == "idle" {
		if nofile, err := raiseNoFile(); err == nil && uint64(cfg.conns)+fdReserve > nofile {
			return fmt.Errorf("-conns %d needs more file descriptors than the limit %d", cfg.conns, nofile)
		}
	}
	var res *connsResult
	var err error
	if cfg.scenario == "idle" {
		res, err = connsIdle(ctx, cfg)
	} else {
		res, err = connsConnect(ctx, cfg)
	}
	if err != nil {
		return err
	}
	if cfg.asJSON {
		b, _ := json.Marshal(res)
		_, err = fmt.Fprintln(stdout, string(b))
		return err
	}
	f := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatFloat(*p, 'f', 2, 64)
	}
	if res.Scenario == "idle" {
		_, err = fmt.Fprintf(stdout, "%s idle: %d connections (churn %d): %s KiB per connection (RSS %s -> %s KiB), closed by broker %d\n",
			res.Proto, res.Conns, res.Churn, f(res.RSSKiBPerConn), f(res.RSSBeforeKiB), f(res.RSSAfterKiB), *res.ClosedByBroker)
	} else {
		_, err = fmt.Fprintf(stdout, "%s connect: %d workers: %s connects/s, %s µs broker CPU per connect (client %s µs), p50 %s µs p99 %s µs, errors %d\n",
			res.Proto, res.Clients, f(res.ConnectsPerS), f(res.CPUusPerConn), f(res.ClientCPUus), f(res.ConnectP50us), f(res.ConnectP99us), *res.Errors)
	}
	return err
}

// connsOpen dials and completes the protocol's handshake by hand.
// OpenIdle opens a STOMP or AMQP connection to addr and completes its
// handshake as the idle scenario does (STOMP without a login, AMQP with
// SASL ANONYMOUS and container id id), for tests that hold connections
// open and count what they cost.
func OpenIdle(ctx context.Context, proto, addr, id string) (net.Conn, error) {
	return connsOpen(ctx, &connsConfig{proto: proto, addr: addr, dialTimeout: 10 * time.Second}, id)
}

func connsOpen(ctx context.Context, cfg *connsConfig, id string) (net.Conn, error) {
	d := net.Dialer{Timeout: cfg.dialTimeout}
	nc, err := d.DialContext(ctx, "tcp", cfg.addr)
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(cfg.dialTimeout))
	if cfg.proto == "stomp" {
		nc = &bufConn{Conn: nc, r: bufio.NewReaderSize(nc, stompReadBuffer)}
		err = stompHandshake(nc, cfg)
	} else {
		err = amqpHandshake(nc, id)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}

// stompReadBuffer sizes a STOMP connection's read buffer: the answers
// (CONNECTED, RECEIPT) fit, and 10,000 idle connections hold 2.5 MB.
const stompReadBuffer = 256

// bufConn reads a STOMP connection through a buffer: readStompFrame
// reads a byte at a time, which on the bare connection is a system call
// per byte (about 90 per connect, more of the client's CPU than the
// broker's for the connect).
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connsClose says goodbye (waiting for the answer when wait is set) and
// closes nc.
func connsClose(nc net.Conn, proto string, wait bool) error {
	nc.SetDeadline(time.Now().Add(closeTimeout))
	defer nc.Close()
	if proto == "stomp" {
		if _, err := nc.Write([]byte("DISCONNECT\nreceipt:bye\n\n\x00")); err != nil || !wait {
			return err
		}
		f, err := readStompFrame(nc)
		if err == nil && !bytes.HasPrefix(f, []byte("RECEIPT\n")) {
			err = fmt.Errorf("DISCONNECT answered with %q", firstLine(f))
		}
		return err
	}
	// close: descriptor 0x18, an empty list.
	if _, err := nc.Write(amqpFrame(0, []byte{0x00, 0x53, 0x18, 0x45})); err != nil || !wait {
		return err
	}
	for {
		body, err := readAMQPFrame(nc)
		if err != nil {
			return err
		}
		if len(body) >= 3 && body[2] == 0x18 {
			return nil
		}
	}
}

func stompHandshake(nc net.Conn, cfg *connsConfig) error {
	req := "CONNECT\naccept-version:1.2\nhost:/\nheart-beat:0,0\n"
	if cfg.login != "" {
		req += "login:" + cfg.login + "\npasscode:" + cfg.passcode + "\n"
	}
	if _, err := io.WriteString(nc, req+"\n\x00"); err != nil {
		return fmt.Errorf("CONNECT: %w", err)
	}
	f, err := readStompFrame(nc)
	if err != nil {
		return fmt.Errorf("CONNECTED: %w", err)
	}
	if !bytes.HasPrefix(f, []byte("CONNECTED\n")) {
		return fmt.Errorf("CONNECT answered with %q", firstLine(f))
	}
	return nil
}

func firstLine(b []byte) string {
	l, _, _ := bytes.Cut(b, []byte("\n"))
	return string(l)
}

// readStompFrame reads up to a frame's NUL, one byte at a time (the
// answers are small), skipping heart-beat EOLs before it.
func readStompFrame(r io.Reader) ([]byte, error) {
	var f []byte
	var b [1]byte
	for len(f) < 64<<10 {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, err
		}
		if b[0] == 0 {
			return f, nil
		}
		if len(f) == 0 && (b[0] == '\n' || b[0] == '\r') {
			continue
		}
		f = append(f, b[0])
	}
	return nil, errors.New("STOMP frame too long")
}

// amqpFrame frames body (type 0, channel 0; 1 for SASL).
func amqpFrame(typ byte, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
	b = append(b, 2, typ, 0, 0)
	return append(b, body...)
}

// amqpList encodes a described list (list8) of the given encoded fields.
func amqpList(desc byte, fields ...[]byte) []byte {
	var content []byte
	for _, f := range fields {
		content = append(content, f...)
	}
	b := []byte{0x00, 0x53, desc, 0xc0, byte(1 + len(content)), byte(len(fields))}
	return append(b, content...)
}

func readAMQPFrame(r io.Reader) ([]byte, error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(h[:4])
	if size < 8 || size > 1<<20 {
		return nil, fmt.Errorf("AMQP frame of %d bytes", size)
	}
	b := make([]byte, size-8)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b[int(h[4])*4-8:], nil
}

var (
	amqpSASLHeader = []byte{'A', 'M', 'Q', 'P', 3, 1, 0, 0}
	amqpHeader     = []byte{'A', 'M', 'Q', 'P', 0, 1, 0, 0}
)

// amqpHandshake: SASL ANONYMOUS, then open with container-id id.
func amqpHandshake(nc net.Conn, id string) error {
	mech := append([]byte{0xa3, 9}, "ANONYMOUS"...)
	out := append([]byte(nil), amqpSASLHeader...)
	out = append(out, amqpFrame(1, amqpList(0x41, mech))...)
	out = append(out, amqpHeader...)
	out = append(out, amqpFrame(0, amqpList(0x10, append([]byte{0xa1, byte(len(id))}, id...)))...)
	// Pipelined, as clients may: SASL init, AMQP header and open at once.
	if _, err := nc.Write(out); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	var h [8]byte
	if _, err := io.ReadFull(nc, h[:]); err != nil || !bytes.Equal(h[:], amqpSASLHeader) {
		return fmt.Errorf("SASL header: % x %v", h, err)
	}
	for {
		body, err := readAMQPFrame(nc)
		if err != nil {
			return fmt.Errorf("SASL: %w", err)
		}
		if len(body) >= 3 && body[2] == 0x44 { // sasl-outcome: list, ubyte code
			if i := bytes.IndexByte(body[3:], 0x50); i < 0 || i+4 >= len(body) || body[3+i+1] != 0 {
				return fmt.Errorf("SASL refused: % x", body)
			}
			break
		}
	}
	if _, err := io.ReadFull(nc, h[:]); err != nil || !bytes.Equal(h[:], amqpHeader) {
		return fmt.Errorf("AMQP header: % x %v", h, err)
	}
	body, err := readAMQPFrame(nc)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	if len(body) < 3 || body[2] != 0x10 {
		return fmt.Errorf("expected open, got % x", body[:min(len(body), 8)])
	}
	return nil
}

func connsIdle(ctx context.Context, cfg *connsConfig) (*connsResult, error) {
	conns := make([]net.Conn, cfg.conns)
	closeAll := func() {
		parallel(len(conns), cfg.conc, time.Now().Add(time.Minute), func(i int) error {
			if nc := conns[i]; nc != nil {
				if cfg.goodbye {
					connsClose(nc, cfg.proto, false)
				} else {
					nc.Close()
				}
				conns[i] = nil
			}
			return nil
		})
	}
	defer closeAll()
	openAll := func(round string) error {
		bound := cfg.openTimeout
		if bound <= 0 {
			bound = 30*time.Second + time.Duration(len(conns))*time.Millisecond
		}
		deadline := time.Now().Add(bound)
		var opened atomic.Int64
		err := parallel(len(conns), cfg.conc, deadline, func(i int) error {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			nc, err := connsOpen(ctx, cfg, fmt.Sprintf("jb-idle-%d-%s%d", os.Getpid(), round, i))
			if err != nil {
				return err
			}
			conns[i] = nc
			opened.Add(1)
			return nil
		})
		if err != nil {
			return fmt.Errorf("after %d of %d connections: %w", opened.Load(), len(conns), err)
		}
		return nil
	}
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	before, err := procRSS(cfg.pid)
	if err != nil {
		return nil, err
	}
	for k := range cfg.churn {
		if err := openAll(fmt.Sprintf("c%d-", k)); err != nil {
			return nil, fmt.Errorf("churn round %d: %w", k+1, err)
		}
		closeAll()
		if err := sleep(cfg.settle); err != nil {
			return nil, err
		}
	}
	if err := openAll(""); err != nil {
		return nil, err
	}
	if err := sleep(cfg.settle); err != nil {
		return nil, err
	}
	after, err := procRSS(cfg.pid)
	if err != nil {
		return nil, err
	}
	// A read that times out means the connection is still open (the
	// broker sends nothing to an idle client without heart-beats), and so
	// does one that reads a byte: ActiveMQ and RabbitMQ end a STOMP frame
	// with an EOL after its NUL, left unread by the handshake. An end of
	// file or another error is a connection the broker closed.
	var closed atomic.Int64
	parallel(len(conns), cfg.conc, time.Now().Add(time.Minute), func(i int) error {
		nc := conns[i]
		nc.SetReadDeadline(time.Now().Add(time.Millisecond))
		var one [1]byte
		if n, err := nc.Read(one[:]); n == 0 && !errors.Is(err, os.ErrDeadlineExceeded) {
			closed.Add(1)
		}
		nc.SetReadDeadline(time.Time{})
		return nil
	})
	bf, af := float64(before), float64(after)
	per := (af - bf) / float64(cfg.conns)
	cl := closed.Load()
	return &connsResult{Proto: cfg.proto, Scenario: "idle", Addr: cfg.addr, Conns: cfg.conns, Churn: cfg.churn,
		RSSBeforeKiB: &bf, RSSAfterKiB: &af, RSSKiBPerConn: &per, ClosedByBroker: &cl}, nil
}

func connsConnect(ctx context.Context, cfg *connsConfig) (*connsResult, error) {
	var stop, measuring atomic.Bool
	var connects, errs atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for w := range cfg.clients {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				start := time.Now()
				nc, err := connsOpen(ctx, cfg, fmt.Sprintf("jb-c-%d-%d-%d", os.Getpid(), w, i))
				if err == nil {
					err = connsClose(nc, cfg.proto, true)
				}
				if err != nil {
					errs.Add(1)
					time.Sleep(connectBackoff) // a refusing broker must not make this spin
					continue
				}
				if measuring.Load() {
					d := time.Since(start)
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
				connects.Add(1)
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	wait := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := wait(cfg.warmup); err != nil {
		return nil, err
	}
	measuring.Store(true)
	c0, e0, t0 := connects.Load(), errs.Load(), time.Now()
	cpu0, err := procCPU(cfg.pid)
	if err != nil {
		return nil, err
	}
	self0, _ := procCPU(os.Getpid())
	if err := wait(cfg.duration); err != nil {
		return nil, err
	}
	cpu1, err := procCPU(cfg.pid)
	if err != nil {
		return nil, err
	}
	self1, _ := procCPU(os.Getpid())
	c1, e1, t1 := connects.Load(), errs.Load(), time.Now()
	measuring.Store(false)
	n := c1 - c0
	r := float64(n) / t1.Sub(t0).Seconds()
	e := e1 - e0
	res := &connsResult{Proto: cfg.proto, Scenario: "connect", Addr: cfg.addr, Clients: cfg.clients, ConnectsPerS: &r, Errors: &e}
	if n > 0 {
		cpu := float64(cpu1-cpu0) / float64(time.Microsecond) / float64(n)
		res.CPUusPerConn = &cpu
		self := float64(self1-self0) / float64(time.Microsecond) / float64(n)
		res.ClientCPUus = &self
	}
	mu.Lock()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		p50 := float64(lat[len(lat)/2]) / float64(time.Microsecond)
		p99 := float64(lat[len(lat)*99/100]) / float64(time.Microsecond)
		res.ConnectP50us, res.ConnectP99us = &p50, &p99
	}
	mu.Unlock()
	return res, nil
}

package scenario

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	ibench "github.com/junctionmq/junction/internal/bench"
)

// MQTT scenario names accepted by -scenario of the mqtt subcommand.
const (
	mqQoS1    = "qos1"
	mqFanout  = "fanout"
	mqConnect = "connect"
	mqIdle    = "idle"
)

var mqttScenarios = []string{mqQoS1, mqFanout, mqConnect, mqIdle}

// Fixed bounds of the MQTT scenarios that no flag controls.
const (
	mqttKeepAlive    = 60 * time.Second // paho clients: a PINGREQ at most every minute
	mqttPingTimeout  = 20 * time.Second // a loaded broker may answer a PINGREQ late
	mqttWriteTimeout = 10 * time.Second // paho: Publish hand-off and socket writes
	mqttQuiesce      = 250              // ms paho's Disconnect waits for DISCONNECT to be written
	idleKeepAlive    = 600              // seconds, in the idle scenario's raw CONNECT
	fdReserve        = 64               // descriptors kept free besides the idle connections
	connectBackoff   = 10 * time.Millisecond
)

var mqttSpec = &commonSpec{
	name:            "mqtt",
	addr:            "127.0.0.1:1883",
	scenarios:       mqttScenarios,
	sizeHelp:        "qos1, fanout: payload size in bytes (at least 8: the first 8 carry the send time)",
	durationHelp:    "measured window (not idle)",
	warmupHelp:      "load before the measured window (not idle)",
	drainHelp:       "qos1, fanout: at most this long after the window for PUBACKs and deliveries to arrive",
	pidHelp:         "broker process id: report its CPU time per message from /proc/PID/stat (idle: required, for VmRSS)",
	dialTimeoutHelp: "TCP connect plus MQTT CONNECT/CONNACK timeout",
}

// mqttConfig is one validated "mqtt" command line.
type mqttConfig struct {
	common
	settle      time.Duration // idle: wait before reading the broker's RSS
	inflight    int           // qos1: publishes unacknowledged at most
	subscribers int           // fanout
	clients     int           // connect: concurrent workers
	conns       int           // idle: connections held open
	churn       int           // idle: rounds of opening and closing every connection before the measured one
	concurrency int           // idle: connections being opened at once
	clientID    string        // qos1: the persistent subscriber's client id
	username    string
	password    string
}

// parseMQTTFlags parses and validates the flags of the mqtt subcommand.
// Zero for the scenario-specific counts means the scenario's default.
func parseMQTTFlags(args []string, stderr io.Writer) (*mqttConfig, error) {
	c := &mqttConfig{}
	err := parseCommand(mqttSpec, &c.common, args, stderr, func(fs *flag.FlagSet) {
		fs.DurationVar(&c.settle, "settle", 2*time.Second, "idle: wait after the last CONNACK before reading the broker's RSS")
		fs.IntVar(&c.inflight, "inflight", 0, "qos1: QoS 1 publishes outstanding (unacknowledged) at most (default 200)")
		fs.IntVar(&c.subscribers, "subscribers", 0, "fanout: QoS 0 subscriber connections (default 10)")
		fs.IntVar(&c.clients, "clients", 0, "connect: concurrent connect/disconnect workers (default 8)")
		fs.IntVar(&c.conns, "conns", 0, "idle: idle connections to hold open (default 10000)")
		fs.IntVar(&c.churn, "churn", 0, "idle: open and close all -conns this many times first (memory the broker reuses after disconnects); rss_before is read before them")
		fs.IntVar(&c.concurrency, "concurrency", 0, "idle: connections opened at once (default 64)")
		fs.StringVar(&c.clientID, "client-id", "junction-bench-qos1-sub", "qos1: client id of the persistent-session subscriber")
		fs.StringVar(&c.username, "username", "", "MQTT user name (empty: none)")
		fs.StringVar(&c.password, "password", "", "MQTT password")
	}, c.validate)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// validate fills scenario defaults and checks ranges.
func (c *mqttConfig) validate() error {
	if err := c.validateCommon(mqttScenarios); err != nil {
		return err
	}
	if c.settle < 0 || c.settle > 10*time.Minute {
		return fmt.Errorf("-settle %v out of range [0, 10m]", c.settle)
	}
	if c.clientID == "" || len(c.clientID) > 65535 {
		return errors.New("-client-id must be 1 to 65535 bytes")
	}
	if c.inflight < 0 || c.subscribers < 0 || c.clients < 0 || c.conns < 0 || c.concurrency < 0 || c.churn < 0 {
		return errors.New("-inflight, -subscribers, -clients, -conns, -concurrency and -churn must not be negative")
	}
	if c.churn > 10 {
		return errors.New("-churn is limited to 10")
	}
	// MQTT packet ids are 16 bits, so a client has at most 65535 publishes in flight.
	if c.inflight > 65535 || c.subscribers > 1000 || c.clients > 1000 || c.conns > 1000000 || c.concurrency > 1024 {
		return errors.New("-inflight is limited to 65535, -subscribers and -clients to 1000, -conns to 1000000, -concurrency to 1024")
	}
	for _, f := range []struct {
		name     string
		set      bool
		scenario string
	}{
		{"-inflight", c.inflight != 0, mqQoS1},
		{"-subscribers", c.subscribers != 0, mqFanout},
		{"-clients", c.clients != 0, mqConnect},
		{"-conns", c.conns != 0, mqIdle},
		{"-concurrency", c.concurrency != 0, mqIdle},
		{"-churn", c.churn != 0, mqIdle},
	} {
		if f.set && c.scenario != f.scenario {
			return fmt.Errorf("%s applies to %s only", f.name, f.scenario)
		}
	}
	switch c.scenario {
	case mqQoS1:
		c.inflight = cmp0(c.inflight, 200)
	case mqFanout:
		c.subscribers = cmp0(c.subscribers, 10)
	case mqConnect:
		c.clients = cmp0(c.clients, 8)
	case mqIdle:
		c.conns = cmp0(c.conns, 10000)
		c.concurrency = min(cmp0(c.concurrency, 64), c.conns)
		if c.pid == 0 {
			return errors.New("idle needs -pid (the broker's process id) to read its resident memory")
		}
	}
	return nil
}

// raiseNoFile raises this process's RLIMIT_NOFILE soft limit to the hard
// limit and returns the soft limit now in force.
func raiseNoFile() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("getrlimit NOFILE: %w", err)
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return 0, fmt.Errorf("setrlimit NOFILE to %d: %w", rl.Max, err)
		}
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return 0, fmt.Errorf("getrlimit NOFILE: %w", err)
		}
	}
	return rl.Cur, nil
}

// runMQTT runs cfg.runs repetitions, printing a line for each and then,
// with more than one, a line with the medians.
func runMQTT(ctx context.Context, cfg *mqttConfig, stdout, stderr io.Writer) error {
	nofile, err := raiseNoFile()
	if err != nil {
		return err
	}
	if cfg.scenario == mqIdle && uint64(cfg.conns)+fdReserve > nofile {
		return fmt.Errorf("-conns %d exceeds this tool's open-file limit %d (less %d kept free); raise the hard limit (ulimit -Hn)", cfg.conns, nofile, fdReserve)
	}
	once := func(ctx context.Context, run string) (*mqttResult, error) { return runMQTTOnce(ctx, cfg, run) }
	return runRepeated(ctx, &cfg.common, "mqtt "+cfg.scenario, once, medianMQTT, stdout)
}

// mqttBench is the state of one MQTT run. Clients update the counters;
// the scenario function owns everything else.
type mqttBench struct {
	cfg   *mqttConfig
	topic string
	tag   string    // random, makes client ids unique to the run
	base  time.Time // send stamps are time.Since(base)
	runState

	published atomic.Int64 // PUBLISH packets handed to paho's writer
	confirmed atomic.Int64 // QoS 1 publishes whose token completed without error
	delivered atomic.Int64 // deliveries counted by subscribers
	connects  atomic.Int64 // connect: completed connect-and-disconnect cycles
	errs      atomic.Int64 // connect: failed cycles

	e2e  atomicHist // publish-to-delivery latency, all subscribers
	conf atomicHist // qos1: Publish to PUBACK; connect: dial to CONNACK
}

// atomicHist is internal/bench's lock-free histogram.
type atomicHist = ibench.AtomicHistogram

// newClient returns an unconnected paho client (MQTT 3.1.1, no automatic
// reconnect). With lost set, losing the connection fails the run.
func (b *mqttBench) newClient(id string, clean, orderMatters, lost bool) mqtt.Client {
	cfg := b.cfg
	d := ibench.MQTTDial{Addr: cfg.dialAddr, ClientID: id, Username: cfg.username, Password: cfg.password,
		Clean: clean, OrderMatters: orderMatters, Timeout: cfg.dialTimeout,
		KeepAlive: mqttKeepAlive, PingTimeout: mqttPingTimeout, WriteTimeout: mqttWriteTimeout}
	if lost {
		d.Lost = func(err error) { b.fail(fmt.Errorf("%s: connection lost: %w", id, err)) }
	}
	return ibench.MQTTClient(d)
}

// waitToken is bench.WaitToken.
func waitToken(ctx context.Context, t mqtt.Token, d time.Duration) error {
	return ibench.WaitToken(ctx, t, d)
}

// connectClient connects c, bounded by the dial timeout.
func (b *mqttBench) connectClient(ctx context.Context, c mqtt.Client) error {
	if err := waitToken(ctx, c.Connect(), b.cfg.dialTimeout+time.Second); err != nil {
		return fmt.Errorf("CONNECT: %w", err)
	}
	return nil
}

// subscribe subscribes c to b.topic and checks the granted QoS.
func (b *mqttBench) subscribe(ctx context.Context, c mqtt.Client, qos byte, h mqtt.MessageHandler) error {
	t := c.Subscribe(b.topic, qos, h)
	if err := waitToken(ctx, t, b.cfg.dialTimeout); err != nil {
		return fmt.Errorf("SUBSCRIBE: %w", err)
	}
	if st, ok := t.(*mqtt.SubscribeToken); ok {
		if g, ok := st.Result()[b.topic]; ok && g != qos {
			return fmt.Errorf("SUBSCRIBE %s: broker granted QoS %d, asked for %d", b.topic, g, qos)
		}
	}
	return nil
}

// handler returns a message handler that counts stamped deliveries on
// b.topic and records their latency; ready is set by any message, probes
// included. It never blocks: atomics only.
func (b *mqttBench) handler(ready *atomic.Bool) mqtt.MessageHandler {
	return func(_ mqtt.Client, m mqtt.Message) {
		if m.Topic() != b.topic {
			return // left over from an earlier session
		}
		if ready != nil {
			ready.Store(true)
		}
		ts := getStamp(m.Payload())
		if ts == 0 {
			return // probe
		}
		if b.measuring.Load() {
			b.e2e.Record(time.Since(b.base) - ts)
		}
		b.delivered.Add(1)
	}
}

// mqttSnap is the run's counters and CPU clocks at one instant.
type mqttSnap struct {
	at                                                time.Time
	published, confirmed, delivered, connects, errors int64
	broker                                            time.Duration
	self, mach                                        time.Duration
	selfErr, machErr                                  error
}

func (b *mqttBench) snap() (mqttSnap, error) {
	s := mqttSnap{
		at:        time.Now(),
		published: b.published.Load(),
		confirmed: b.confirmed.Load(),
		delivered: b.delivered.Load(),
		connects:  b.connects.Load(),
		errors:    b.errs.Load(),
	}
	if b.cfg.pid > 0 {
		var err error
		if s.broker, err = procCPU(b.cfg.pid); err != nil {
			return s, err
		}
	}
	s.self, s.selfErr = procCPU(os.Getpid())
	s.mach, s.machErr = machineCPU()
	return s, nil
}

// measure waits out the warm-up, then the measured window, and returns
// the snapshots at both ends.
func (b *mqttBench) measure(ctx context.Context) (s0, s1 mqttSnap, err error) {
	if err = b.sleep(ctx, b.cfg.warmup); err != nil {
		return
	}
	if s0, err = b.snap(); err != nil {
		return
	}
	b.measuring.Store(true)
	if err = b.window(ctx, b.cfg.duration); err != nil {
		return
	}
	b.measuring.Store(false)
	s1, err = b.snap()
	return
}

// runMQTTOnce performs one run of cfg.scenario.
func runMQTTOnce(ctx context.Context, cfg *mqttConfig, run string) (*mqttResult, error) {
	var r [6]byte
	rand.Read(r[:])
	tag := hex.EncodeToString(r[:])
	b := &mqttBench{
		cfg:   cfg,
		tag:   tag,
		topic: "bench/" + cfg.scenario + "/" + tag,
		base:  time.Now(),
	}
	b.init()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var res *mqttResult
	var err error
	switch cfg.scenario {
	case mqQoS1:
		res, err = b.runQoS1(ctx)
	case mqFanout:
		res, err = b.runFanout(ctx)
	case mqConnect:
		res, err = b.runConnect(ctx)
	case mqIdle:
		res, err = b.runIdle(ctx)
	}
	if err != nil {
		return nil, err
	}
	res.Run = run
	return res, nil
}

// disconnectAll disconnects the clients in parallel, each bounded by
// paho's quiesce time.
func disconnectAll(cs ...mqtt.Client) {
	var wg sync.WaitGroup
	for _, c := range cs {
		if c != nil {
			wg.Go(func() { c.Disconnect(mqttQuiesce) })
		}
	}
	wg.Wait()
}

// wipeSession connects id with a clean session and disconnects, so the
// broker discards whatever persistent session id had.
func (b *mqttBench) wipeSession(ctx context.Context, id string) error {
	c := b.newClient(id, true, true, false)
	if err := b.connectClient(ctx, c); err != nil {
		return fmt.Errorf("clearing session %s: %w", id, err)
	}
	c.Disconnect(mqttQuiesce)
	return nil
}

// pubToken is one outstanding QoS 1 publish.
type pubToken struct {
	tok   mqtt.Token
	start time.Time
}

// runQoS1: one publisher with up to -inflight QoS 1 publishes outstanding,
// one persistent-session subscriber.
func (b *mqttBench) runQoS1(ctx context.Context) (*mqttResult, error) {
	cfg := b.cfg
	// A fresh session: no backlog or subscriptions from an earlier run.
	if err := b.wipeSession(ctx, cfg.clientID); err != nil {
		return nil, err
	}
	sub := b.newClient(cfg.clientID, false, false, true)
	pub := b.newClient("jb-pub-"+b.tag, true, true, true)
	var pubDone, collDone chan struct{}
	defer func() {
		b.stopLoad()
		b.tearing.Store(true)
		if pubDone != nil {
			waitClosed(pubDone, closeTimeout)
		}
		disconnectAll(pub, sub) // fails outstanding tokens, so the collector ends
		if collDone != nil {
			waitClosed(collDone, closeTimeout)
		}
		b.wipeSession(context.Background(), cfg.clientID) // best effort: leave no session behind
	}()
	if err := b.connectClient(ctx, sub); err != nil {
		return nil, fmt.Errorf("subscriber: %w", err)
	}
	if err := b.subscribe(ctx, sub, 1, b.handler(nil)); err != nil {
		return nil, fmt.Errorf("subscriber: %w", err)
	}
	if err := b.connectClient(ctx, pub); err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}

	// The semaphore bounds the publishes outstanding; the collector waits
	// for their tokens in order and frees a slot for each. PUBACKs come
	// back in order, so the confirm latency is measured at the right time.
	hardDeadline := time.Now().Add(cfg.warmup + cfg.duration + cfg.drain + 30*time.Second)
	sem := make(chan struct{}, cfg.inflight)
	tokens := make(chan pubToken, cfg.inflight)
	var outstanding atomic.Int64
	pubDone, collDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(collDone)
		hard := time.NewTimer(time.Until(hardDeadline))
		defer hard.Stop()
		for pt := range tokens {
			select {
			case <-pt.tok.Done():
			case <-hard.C:
				b.fail(errors.New("publisher: PUBACK wait passed the run's hard deadline"))
				return
			}
			if err := pt.tok.Error(); err != nil {
				b.fail(fmt.Errorf("publisher: QoS 1 publish: %w", err))
			} else {
				b.confirmed.Add(1)
				if b.measuring.Load() {
					b.conf.Record(time.Since(pt.start))
				}
			}
			outstanding.Add(-1)
			<-sem
		}
	}()
	go func() {
		defer close(pubDone)
		defer close(tokens)
		// paho writes the payload from its own goroutine and keeps it until
		// the PUBACK, so a body is reused only after its token completed:
		// with in-order collection, inflight+1 bodies suffice.
		bodies := make([][]byte, cfg.inflight+1)
		for i := range bodies {
			bodies[i] = make([]byte, cfg.size)
		}
		for i := 0; !b.stopped.Load(); i++ {
			select {
			case sem <- struct{}{}:
			case <-b.stop:
				return
			case <-b.failed:
				return
			}
			body := bodies[i%len(bodies)]
			putStamp(body, time.Since(b.base))
			outstanding.Add(1)
			start := time.Now()
			tokens <- pubToken{tok: pub.Publish(b.topic, 1, false, body), start: start}
			b.published.Add(1)
		}
	}()

	s0, s1, err := b.measure(ctx)
	if err != nil {
		return nil, err
	}
	// Drain: every PUBACK back and every confirmed message delivered.
	drained := func() bool { return isClosed(pubDone) && outstanding.Load() == 0 }
	res, err := b.publishResult(ctx, s0, s1, func() bool {
		return drained() && b.delivered.Load() >= b.published.Load()
	})
	if err != nil {
		return nil, err
	}
	res.Inflight = cfg.inflight
	res.ConfirmedPerS = rate(s0.confirmed, s1.confirmed, s0, s1)
	res.ConfirmP50us, res.ConfirmP99us = quantiles(b.conf.Snapshot())
	b.cpuPer(res, s0, s1, "confirmed", s1.confirmed-s0.confirmed)
	und := int64(-1) // unknown: PUBACKs still outstanding
	if drained() {
		und = max(0, b.published.Load()-b.delivered.Load())
	}
	res.Undrained = &und
	return res, nil
}

// runFanout: one QoS 0 publisher, -subscribers QoS 0 subscribers.
func (b *mqttBench) runFanout(ctx context.Context) (*mqttResult, error) {
	cfg := b.cfg
	subs := make([]mqtt.Client, 0, cfg.subscribers)
	ready := make([]atomic.Bool, cfg.subscribers)
	pub := b.newClient("jb-pub-"+b.tag, true, true, true)
	var pubDone chan struct{}
	defer func() {
		b.stopLoad()
		b.tearing.Store(true)
		if pubDone != nil {
			waitClosed(pubDone, closeTimeout)
		}
		disconnectAll(append(subs, pub)...)
	}()
	for i := range cfg.subscribers {
		// Order kept: the handler only does atomics, so paho runs it inline
		// instead of starting a goroutine per message.
		c := b.newClient(fmt.Sprintf("jb-sub-%s-%d", b.tag, i), true, true, true)
		if err := b.connectClient(ctx, c); err != nil {
			return nil, fmt.Errorf("subscriber %d: %w", i, err)
		}
		subs = append(subs, c)
		if err := b.subscribe(ctx, c, 0, b.handler(&ready[i])); err != nil {
			return nil, fmt.Errorf("subscriber %d: %w", i, err)
		}
	}
	if err := b.connectClient(ctx, pub); err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}
	// Probes (stamp 0, not counted) until every subscriber has one, so no
	// subscriber misses the first counted message.
	probe := make([]byte, minBodySize)
	deadline := time.Now().Add(probeTimeout)
	for {
		n := 0
		for i := range ready {
			if ready[i].Load() {
				n++
			}
		}
		if n == len(ready) {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d subscribers received a probe within %v", n, len(ready), probeTimeout)
		}
		if err := waitToken(ctx, pub.Publish(b.topic, 0, false, probe), mqttWriteTimeout); err != nil {
			return nil, fmt.Errorf("probe: %w", err)
		}
		if err := b.sleep(ctx, probeInterval); err != nil {
			return nil, err
		}
	}

	pubDone = make(chan struct{})
	go func() {
		defer close(pubDone)
		// A QoS 0 token completes once paho has written the packet; a body
		// is reused only after the token of its previous use completed.
		const ring = 64
		bodies := make([][]byte, ring)
		toks := make([]mqtt.Token, ring)
		for i := range bodies {
			bodies[i] = make([]byte, cfg.size)
		}
		for i := 0; !b.stopped.Load(); i++ {
			k := i % ring
			if t := toks[k]; t != nil {
				if err := waitToken(context.Background(), t, mqttWriteTimeout+time.Second); err != nil {
					b.fail(fmt.Errorf("publisher: %w", err))
					return
				}
			}
			putStamp(bodies[k], time.Since(b.base))
			t := pub.Publish(b.topic, 0, false, bodies[k])
			select {
			case <-t.Done():
				if err := t.Error(); err != nil {
					b.fail(fmt.Errorf("publisher: %w", err))
					return
				}
			default:
			}
			toks[k] = t
			b.published.Add(1)
		}
		for _, t := range toks { // the last packets are written
			if t != nil {
				waitToken(context.Background(), t, mqttWriteTimeout+time.Second)
			}
		}
	}()

	s0, s1, err := b.measure(ctx)
	if err != nil {
		return nil, err
	}
	subsN := int64(cfg.subscribers)
	res, err := b.publishResult(ctx, s0, s1, func() bool {
		return isClosed(pubDone) && b.delivered.Load() >= b.published.Load()*subsN
	})
	if err != nil {
		return nil, err
	}
	res.Subscribers = cfg.subscribers
	b.cpuPer(res, s0, s1, "published", s1.published-s0.published)
	if res.CPUCores != nil {
		if d := s1.delivered - s0.delivered; d > 0 {
			v := float64(s1.broker-s0.broker) / float64(time.Microsecond) / float64(d)
			res.CPUusPerDelivery = &v
		}
	}
	und := int64(-1)
	if isClosed(pubDone) {
		und = max(0, b.published.Load()*subsN-b.delivered.Load())
	}
	res.Undrained = &und
	return res, nil
}

// runConnect: -clients workers, each connecting a fresh paho client
// (clean session, unique id) and disconnecting it, over and over.
func (b *mqttBench) runConnect(ctx context.Context) (*mqttResult, error) {
	cfg := b.cfg
	var wg sync.WaitGroup
	defer func() {
		b.stopLoad()
		b.tearing.Store(true)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		waitClosed(done, cfg.dialTimeout+2*time.Second)
	}()
	for w := range cfg.clients {
		wg.Go(func() {
			for i := 0; !b.stopped.Load(); i++ {
				c := b.newClient(fmt.Sprintf("jb-c-%s-%d-%d", b.tag, w, i), true, true, false)
				start := time.Now()
				if err := b.connectClient(ctx, c); err != nil {
					b.errs.Add(1)
					select { // a refusing broker must not make this spin
					case <-time.After(connectBackoff):
					case <-b.stop:
					}
					continue
				}
				if b.measuring.Load() {
					b.conf.Record(time.Since(start))
				}
				c.Disconnect(mqttQuiesce)
				b.connects.Add(1)
			}
		})
	}
	s0, s1, err := b.measure(ctx)
	if err != nil {
		return nil, err
	}
	res := b.result(s0, s1)
	res.Clients = cfg.clients
	res.ConnectsPerS = rate(s0.connects, s1.connects, s0, s1)
	e := s1.errors - s0.errors
	res.Errors = &e
	res.ConnectP50us, res.ConnectP99us = quantiles(b.conf.Snapshot())
	b.cpuPer(res, s0, s1, "connect", s1.connects-s0.connects)
	return res, nil
}

// mqttConnectPacket returns an MQTT 3.1.1 CONNECT packet with a clean
// session and the given keep-alive (seconds).
func mqttConnectPacket(clientID, username, password string, keepAlive uint16) []byte {
	flags := byte(0x02) // clean session
	if username != "" {
		flags |= 0x80 | 0x40
	}
	str := func(dst []byte, s string) []byte {
		dst = append(dst, byte(len(s)>>8), byte(len(s)))
		return append(dst, s...)
	}
	v := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, flags, byte(keepAlive >> 8), byte(keepAlive)}
	v = str(v, clientID)
	if username != "" {
		v = str(v, username)
		v = str(v, password)
	}
	p := []byte{0x10}
	for n := len(v); ; { // remaining length, 7 bits a byte
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		p = append(p, d)
		if n == 0 {
			break
		}
	}
	return append(p, v...)
}

// openIdle dials addr and completes an MQTT CONNECT/CONNACK by hand,
// within timeout.
func openIdle(ctx context.Context, cfg *mqttConfig, id string) (net.Conn, error) {
	d := net.Dialer{Timeout: cfg.dialTimeout}
	nc, err := d.DialContext(ctx, "tcp", cfg.dialAddr)
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(cfg.dialTimeout))
	if _, err := nc.Write(mqttConnectPacket(id, cfg.username, cfg.password, idleKeepAlive)); err != nil {
		nc.Close()
		return nil, fmt.Errorf("CONNECT: %w", err)
	}
	var ack [4]byte
	if _, err := io.ReadFull(nc, ack[:]); err != nil {
		nc.Close()
		return nil, fmt.Errorf("CONNACK: %w", err)
	}
	if ack[0] != 0x20 || ack[1] != 2 || ack[3] != 0 {
		nc.Close()
		return nil, fmt.Errorf("CONNACK refused: % x", ack)
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}

// procRSS returns VmRSS of pid in KiB, from /proc/PID/status.
func procRSS(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("broker rss: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:")); ok {
			kb, _ := bytes.CutSuffix(bytes.TrimSpace(v), []byte(" kB"))
			n, err := strconv.ParseInt(string(bytes.TrimSpace(kb)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("broker rss: bad VmRSS line %q", sc.Text())
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("broker rss: no VmRSS in /proc/%d/status", pid)
}

// parallel calls f(i) for every i in [0, n) on workers goroutines and
// returns the first error; it stops handing out work after an error or
// once deadline passes.
func parallel(n, workers int, deadline time.Time, f func(i int) error) error {
	var next atomic.Int64
	var once sync.Once
	var first error
	var bad atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for !bad.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				err := f(i)
				if err == nil && time.Now().After(deadline) {
					err = errors.New("deadline passed")
				}
				if err != nil {
					once.Do(func() { first = err })
					bad.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return first
}

// openAll opens len(conns) idle connections, -concurrency at a time,
// bounded by a deadline that grows with their number.
func (b *mqttBench) openAll(ctx context.Context, conns []net.Conn, round string) error {
	cfg := b.cfg
	var opened atomic.Int64
	// Bounded: every dial and handshake by -dial-timeout, the whole by this.
	deadline := time.Now().Add(30*time.Second + time.Duration(len(conns))*time.Millisecond)
	err := parallel(len(conns), cfg.concurrency, deadline, func(i int) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		nc, err := openIdle(ctx, cfg, fmt.Sprintf("jb-idle-%s-%s%d", b.tag, round, i))
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

// closeAll sends DISCONNECT on every open connection and closes it, a
// few at a time, each write bounded.
func closeAll(conns []net.Conn, concurrency int) {
	parallel(len(conns), concurrency, time.Now().Add(time.Minute), func(i int) error {
		if nc := conns[i]; nc != nil {
			nc.SetWriteDeadline(time.Now().Add(closeTimeout))
			nc.Write([]byte{0xe0, 0})
			nc.Close()
			conns[i] = nil
		}
		return nil
	})
}

// runIdle opens -conns idle connections by hand and reports the broker's
// resident memory per connection. With -churn it first opens and closes
// them that many times, so that what the broker frees on disconnect and
// reuses for the next connections is counted too.
func (b *mqttBench) runIdle(ctx context.Context) (*mqttResult, error) {
	cfg := b.cfg
	conns := make([]net.Conn, cfg.conns)
	defer closeAll(conns, cfg.concurrency)
	before, err := procRSS(cfg.pid)
	if err != nil {
		return nil, err
	}
	for k := range cfg.churn {
		if err := b.openAll(ctx, conns, fmt.Sprintf("c%d-", k)); err != nil {
			return nil, fmt.Errorf("churn round %d: %w", k+1, err)
		}
		closeAll(conns, cfg.concurrency)
		if err := b.sleep(ctx, cfg.settle); err != nil { // the broker's teardown
			return nil, err
		}
	}
	cpu0, err := procCPU(cfg.pid)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	err = b.openAll(ctx, conns, "")
	openTime := time.Since(t0)
	if err != nil {
		return nil, err
	}
	cpu1, err := procCPU(cfg.pid)
	if err != nil {
		return nil, err
	}
	if err := b.sleep(ctx, cfg.settle); err != nil {
		return nil, err
	}
	after, err := procRSS(cfg.pid)
	if err != nil {
		return nil, err
	}
	// Which connections did the broker close meanwhile? A read that times
	// out means the connection is still open (the broker sends nothing to
	// an idle MQTT client).
	var closed atomic.Int64
	parallel(len(conns), cfg.concurrency, time.Now().Add(time.Minute), func(i int) error {
		nc := conns[i]
		nc.SetReadDeadline(time.Now().Add(time.Millisecond))
		var one [1]byte
		if _, err := nc.Read(one[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
			closed.Add(1)
		}
		nc.SetReadDeadline(time.Time{})
		return nil
	})
	res := &mqttResult{
		Scenario: mqIdle,
		Addr:     cfg.addr,
		Conns:    cfg.conns,
		Churn:    cfg.churn,
		WindowS:  openTime.Seconds(),
	}
	bf, af := float64(before), float64(after)
	per := (af - bf) / float64(cfg.conns)
	opr := float64(cfg.conns) / openTime.Seconds()
	cpuPer := float64(cpu1-cpu0) / float64(time.Microsecond) / float64(cfg.conns)
	cl := closed.Load()
	res.RSSBeforeKiB, res.RSSAfterKiB, res.RSSKiBPerConn = &bf, &af, &per
	res.OpenedPerS = &opr
	res.CPUusPerMsg, res.CPUBasis = &cpuPer, "connect"
	res.ClosedByBroker = &cl
	return res, nil
}

// result fills the fields every timed scenario shares.
func (b *mqttBench) result(s0, s1 mqttSnap) *mqttResult {
	cfg := b.cfg
	w := s1.at.Sub(s0.at)
	r := &mqttResult{
		Scenario: cfg.scenario,
		Addr:     cfg.addr,
		WindowS:  w.Seconds(),
	}
	if cfg.scenario == mqQoS1 || cfg.scenario == mqFanout {
		r.Topic = b.topic
	}
	if s0.selfErr == nil && s1.selfErr == nil {
		v := float64(s1.self-s0.self) / float64(w)
		r.ClientCores = &v
	}
	if s0.machErr == nil && s1.machErr == nil {
		v := float64(s1.mach-s0.mach) / float64(w)
		r.MachineCores = &v
	}
	return r
}

// publishResult ends a publishing scenario (qos1, fanout): it stops the
// load, waits until done reports true or -drain passes, and fills the
// figures both scenarios share.
func (b *mqttBench) publishResult(ctx context.Context, s0, s1 mqttSnap, done func() bool) (*mqttResult, error) {
	b.stopLoad()
	if err := b.drainUntil(ctx, s1.at.Add(b.cfg.drain), done); err != nil {
		return nil, err
	}
	res := b.result(s0, s1)
	res.Size = b.cfg.size
	res.PublishedPerS = rate(s0.published, s1.published, s0, s1)
	res.DeliveredPerS = rate(s0.delivered, s1.delivered, s0, s1)
	res.E2EP50us, res.E2EP99us = quantiles(b.e2e.Snapshot())
	return res, nil
}

// cpuPer fills the broker CPU figures (with -pid) per basis message.
func (b *mqttBench) cpuPer(r *mqttResult, s0, s1 mqttSnap, basis string, n int64) {
	if b.cfg.pid == 0 {
		return
	}
	cpu := s1.broker - s0.broker
	cores := float64(cpu) / float64(s1.at.Sub(s0.at))
	r.CPUCores = &cores
	r.CPUBasis = basis
	if n > 0 {
		v := float64(cpu) / float64(time.Microsecond) / float64(n)
		r.CPUusPerMsg = &v
	}
}

// rate returns (c1-c0) per second of the window between s0 and s1.
func rate(c0, c1 int64, s0, s1 mqttSnap) *float64 {
	v := float64(c1-c0) / s1.at.Sub(s0.at).Seconds()
	return &v
}

// quantiles returns p50 and p99 in microseconds (-1 when empty).
func quantiles(h *histogram) (p50, p99 *float64) {
	a, b := usOf(h.Quantile(0.50)), usOf(h.Quantile(0.99))
	return &a, &b
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// waitClosed waits until c is closed, for at most d.
func waitClosed(c chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c:
	case <-t.C:
	}
}

// mqttResult is the outcome of one MQTT run, or the median of several.
// Rates are per second of the measured window; latencies are microseconds,
// -1 when nothing was measured. Fields a scenario does not measure are
// left out of the JSON. JSON field names are stable: scripts read them.
type mqttResult struct {
	Scenario    string  `json:"scenario"`
	Run         string  `json:"run"` // "1", "2", ..., or "median"
	Addr        string  `json:"addr"`
	Topic       string  `json:"topic,omitempty"`
	Size        int     `json:"size,omitempty"`
	Inflight    int     `json:"inflight,omitempty"`
	Subscribers int     `json:"subscribers,omitempty"`
	Clients     int     `json:"clients,omitempty"`
	Conns       int     `json:"conns,omitempty"`
	Churn       int     `json:"churn,omitempty"` // idle: open-and-close rounds before the measured one
	WindowS     float64 `json:"window_s"`        // idle: time to open every connection

	PublishedPerS *float64 `json:"published_per_s,omitempty"` // PUBLISH packets written
	ConfirmedPerS *float64 `json:"confirmed_per_s,omitempty"` // qos1: PUBACKs (tokens without error)
	DeliveredPerS *float64 `json:"delivered_per_s,omitempty"` // fanout: summed over subscribers
	ConnectsPerS  *float64 `json:"connects_per_s,omitempty"`  // connect: full cycles
	OpenedPerS    *float64 `json:"opened_per_s,omitempty"`    // idle: connections opened
	Errors        *int64   `json:"errors,omitempty"`          // connect: failed connects in the window

	E2EP50us     *float64 `json:"e2e_p50_us,omitempty"`
	E2EP99us     *float64 `json:"e2e_p99_us,omitempty"`
	ConfirmP50us *float64 `json:"confirm_p50_us,omitempty"` // qos1: Publish to PUBACK
	ConfirmP99us *float64 `json:"confirm_p99_us,omitempty"`
	ConnectP50us *float64 `json:"connect_p50_us,omitempty"` // connect: dial to CONNACK
	ConnectP99us *float64 `json:"connect_p99_us,omitempty"`

	// idle: the broker's VmRSS before opening and after settling, in KiB.
	RSSBeforeKiB   *float64 `json:"rss_before_kib,omitempty"`
	RSSAfterKiB    *float64 `json:"rss_after_kib,omitempty"`
	RSSKiBPerConn  *float64 `json:"rss_kib_per_conn,omitempty"`
	ClosedByBroker *int64   `json:"closed_by_broker,omitempty"` // idle: connections found closed after settling

	CPUusPerMsg      *float64 `json:"broker_cpu_us_per_msg,omitempty"`
	CPUusPerDelivery *float64 `json:"broker_cpu_us_per_delivery,omitempty"`
	CPUCores         *float64 `json:"broker_cpu_cores,omitempty"`
	CPUBasis         string   `json:"broker_cpu_basis,omitempty"`
	ClientCores      *float64 `json:"client_cpu_cores,omitempty"`
	MachineCores     *float64 `json:"machine_cpu_cores,omitempty"`
	// Undrained: qos1, messages published but not delivered by the end of
	// the bounded drain; fanout, deliveries missing; -1 when publishes were
	// still outstanding.
	Undrained *int64 `json:"undrained,omitempty"`
	// Interrupted: a signal ended the measured window early; the figures
	// are those of the window so far.
	Interrupted bool `json:"interrupted,omitempty"`
}

func (r *mqttResult) setInterrupted() { r.Interrupted = true }

// write prints r as one line, JSON or text.
func (r *mqttResult) write(w io.Writer, asJSON bool) error {
	return writeLine(w, asJSON, r, r.text)
}

// text builds r's plain-text line.
func (r *mqttResult) text(b *strings.Builder) {
	fmt.Fprintf(b, "mqtt-%-8s run=%-6s", r.Scenario, r.Run)
	for _, f := range []struct {
		name string
		v    int
	}{{"size", r.Size}, {"inflight", r.Inflight}, {"subscribers", r.Subscribers}, {"clients", r.Clients}, {"conns", r.Conns}, {"churn", r.Churn}} {
		if f.v > 0 {
			fmt.Fprintf(b, " %s=%d", f.name, f.v)
		}
	}
	if r.Scenario == mqIdle {
		fmt.Fprintf(b, " open=%.2fs", r.WindowS)
	} else {
		fmt.Fprintf(b, " window=%.2fs", r.WindowS)
	}
	rates := []struct {
		name string
		v    *float64
	}{{"published", r.PublishedPerS}, {"confirmed", r.ConfirmedPerS}, {"delivered", r.DeliveredPerS}, {"connects", r.ConnectsPerS}, {"opened", r.OpenedPerS}}
	if r.Scenario == mqFanout {
		rates[2].name = "deliveries"
	}
	for _, f := range rates {
		if f.v != nil {
			fmt.Fprintf(b, " %s=%.0f/s", f.name, *f.v)
		}
	}
	if r.Errors != nil {
		fmt.Fprintf(b, " errors=%d", *r.Errors)
	}
	lat := func(name string, p50, p99 *float64) {
		if p50 != nil && p99 != nil {
			fmt.Fprintf(b, " %s_p50=%s %s_p99=%s", name, fmtUs(*p50), name, fmtUs(*p99))
		}
	}
	lat("e2e", r.E2EP50us, r.E2EP99us)
	lat("confirm", r.ConfirmP50us, r.ConfirmP99us)
	lat("connect", r.ConnectP50us, r.ConnectP99us)
	if r.RSSKiBPerConn != nil {
		fmt.Fprintf(b, " rss_before=%.0fKiB rss_after=%.0fKiB rss_per_conn=%.2fKiB", *r.RSSBeforeKiB, *r.RSSAfterKiB, *r.RSSKiBPerConn)
	}
	if r.ClosedByBroker != nil {
		fmt.Fprintf(b, " closed_by_broker=%d", *r.ClosedByBroker)
	}
	cpuFigures{r.CPUusPerMsg, r.CPUusPerDelivery, r.CPUCores, r.ClientCores, r.MachineCores, r.CPUBasis}.text(b, true)
	if r.Undrained != nil {
		fmt.Fprintf(b, " undrained=%d", *r.Undrained)
	}
	if r.Interrupted {
		b.WriteString(" interrupted")
	}
}

// medianMQTT returns the median of every figure over rs (at least one);
// the counts of trouble (errors, undrained, closed_by_broker) are the
// maximum, so a bad run is never hidden.
func medianMQTT(rs []*mqttResult) *mqttResult {
	m := *rs[0]
	m.Run = "median"
	m.Topic = ""
	med := func(get func(*mqttResult) *float64) *float64 { return medianOf(rs, get) }
	worst := func(get func(*mqttResult) *int64) *int64 {
		var w *int64
		for _, r := range rs {
			if p := get(r); p != nil && (w == nil || *p > *w) {
				v := *p
				w = &v
			}
		}
		return w
	}
	m.WindowS = *med(func(r *mqttResult) *float64 { return &r.WindowS })
	m.PublishedPerS = med(func(r *mqttResult) *float64 { return r.PublishedPerS })
	m.ConfirmedPerS = med(func(r *mqttResult) *float64 { return r.ConfirmedPerS })
	m.DeliveredPerS = med(func(r *mqttResult) *float64 { return r.DeliveredPerS })
	m.ConnectsPerS = med(func(r *mqttResult) *float64 { return r.ConnectsPerS })
	m.OpenedPerS = med(func(r *mqttResult) *float64 { return r.OpenedPerS })
	m.E2EP50us = med(func(r *mqttResult) *float64 { return r.E2EP50us })
	m.E2EP99us = med(func(r *mqttResult) *float64 { return r.E2EP99us })
	m.ConfirmP50us = med(func(r *mqttResult) *float64 { return r.ConfirmP50us })
	m.ConfirmP99us = med(func(r *mqttResult) *float64 { return r.ConfirmP99us })
	m.ConnectP50us = med(func(r *mqttResult) *float64 { return r.ConnectP50us })
	m.ConnectP99us = med(func(r *mqttResult) *float64 { return r.ConnectP99us })
	m.RSSBeforeKiB = med(func(r *mqttResult) *float64 { return r.RSSBeforeKiB })
	m.RSSAfterKiB = med(func(r *mqttResult) *float64 { return r.RSSAfterKiB })
	m.RSSKiBPerConn = med(func(r *mqttResult) *float64 { return r.RSSKiBPerConn })
	m.CPUusPerMsg = med(func(r *mqttResult) *float64 { return r.CPUusPerMsg })
	m.CPUusPerDelivery = med(func(r *mqttResult) *float64 { return r.CPUusPerDelivery })
	m.CPUCores = med(func(r *mqttResult) *float64 { return r.CPUCores })
	m.ClientCores = med(func(r *mqttResult) *float64 { return r.ClientCores })
	m.MachineCores = med(func(r *mqttResult) *float64 { return r.MachineCores })
	m.Errors = worst(func(r *mqttResult) *int64 { return r.Errors })
	m.Undrained = worst(func(r *mqttResult) *int64 { return r.Undrained })
	m.ClosedByBroker = worst(func(r *mqttResult) *int64 { return r.ClosedByBroker })
	return &m
}

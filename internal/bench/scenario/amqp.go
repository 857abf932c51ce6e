package scenario

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/Azure/go-amqp"

	ibench "github.com/junctionmq/junction/internal/bench"
)

// AMQP scenario names accepted by -scenario of the amqp subcommand; the
// durable ones and fanout share their names (and result labels) with the
// STOMP scenarios.
const (
	amSettled = "settled"

	styleJunction = "junction" // queue://NAME, topic://NAME
	styleRabbitMQ = "rabbitmq" // /queue/NAME, /topic/NAME

	amAccept  = "accept"  // receivers accept every delivery
	amSettleS = "settled" // receivers ask for pre-settled deliveries
)

var amqpScenarios = []string{scDurPipe, scDurWait, amSettled, scFanout}

var amqpSpec = &commonSpec{
	name:            "amqp",
	addr:            "127.0.0.1:5672",
	scenarios:       amqpScenarios,
	sizeHelp:        "message body size in bytes, one data section (at least 8: the first 8 carry the send time)",
	durationHelp:    "measured window",
	warmupHelp:      "load before the measured window",
	drainHelp:       "at most this long after the window for dispositions and deliveries to arrive",
	pidHelp:         "broker process id (RabbitMQ: its beam.smp): report its CPU time per message from /proc/PID/stat",
	dialTimeoutHelp: "TCP connect plus AMQP header, SASL, open and begin timeout; also bounds each link attach",
}

// amqpConfig is one validated "amqp" command line.
type amqpConfig struct {
	common
	addrStyle   string
	user, pass  string
	producers   int // durable-wait: senders
	inflight    int // durable-pipelined: sends awaiting their disposition at most
	subscribers int // fanout: receivers
	credit      int // every receiver's link credit
}

// parseAMQPFlags parses and validates the flags of the amqp subcommand.
// Zero for the counts means the scenario's default.
func parseAMQPFlags(args []string, stderr io.Writer) (*amqpConfig, error) {
	c := &amqpConfig{}
	err := parseCommand(amqpSpec, &c.common, args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&c.addrStyle, "addr-style", styleJunction, "address format: junction (queue://NAME, topic://NAME) or rabbitmq (/queue/NAME, /topic/NAME)")
		fs.StringVar(&c.user, "user", "", "SASL PLAIN user name (empty: SASL ANONYMOUS; RabbitMQ: guest)")
		fs.StringVar(&c.pass, "pass", "", "SASL PLAIN password")
		fs.IntVar(&c.producers, "producers", 0, "durable-wait: sender connections, each waiting for every disposition (default 2)")
		fs.IntVar(&c.inflight, "inflight", 0, "durable-pipelined: sends awaiting their disposition at most (default 200)")
		fs.IntVar(&c.subscribers, "subscribers", 0, "fanout: receiver connections on the topic (default 10)")
		fs.IntVar(&c.credit, "credit", 0, "link credit of every receiver, replenished as it settles (default 500)")
	}, c.validate)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// validate fills scenario defaults and checks ranges.
func (c *amqpConfig) validate() error {
	if err := c.validateCommon(amqpScenarios); err != nil {
		return err
	}
	if c.addrStyle != styleJunction && c.addrStyle != styleRabbitMQ {
		return fmt.Errorf("-addr-style %q: want %s or %s", c.addrStyle, styleJunction, styleRabbitMQ)
	}
	if c.pass != "" && c.user == "" {
		return errors.New("-pass needs -user")
	}
	if c.producers < 0 || c.inflight < 0 || c.subscribers < 0 || c.credit < 0 {
		return errors.New("-producers, -inflight, -subscribers and -credit must not be negative")
	}
	if c.producers > 1000 || c.subscribers > 1000 || c.inflight > 100000 || c.credit > 100000 {
		return errors.New("-producers and -subscribers are limited to 1000, -inflight and -credit to 100000")
	}
	for _, f := range []struct {
		name     string
		set      bool
		scenario string
	}{
		{"-producers", c.producers != 0, scDurWait},
		{"-inflight", c.inflight != 0, scDurPipe},
		{"-subscribers", c.subscribers != 0, scFanout},
	} {
		if f.set && c.scenario != f.scenario {
			return fmt.Errorf("%s applies to %s only", f.name, f.scenario)
		}
	}
	c.credit = cmp0(c.credit, 500)
	switch c.scenario {
	case scDurWait:
		c.producers = cmp0(c.producers, 2)
	case scDurPipe:
		c.inflight = cmp0(c.inflight, 200)
	case scFanout:
		c.subscribers = cmp0(c.subscribers, 10)
	}
	return nil
}

// durable reports whether the scenario sends durable, unsettled messages
// and has its receivers accept them.
func (c *amqpConfig) durable() bool { return c.scenario == scDurWait || c.scenario == scDurPipe }

// senders is the number of sending connections.
func (c *amqpConfig) senders() int {
	if c.scenario == scDurWait {
		return c.producers
	}
	return 1
}

// receivers is the number of receiving connections.
func (c *amqpConfig) receivers() int {
	if c.scenario == scFanout {
		return c.subscribers
	}
	return 1
}

// runAMQP runs cfg.runs repetitions, printing a line for each and then,
// with more than one, a line with the medians.
func runAMQP(ctx context.Context, cfg *amqpConfig, stdout, stderr io.Writer) error {
	once := func(ctx context.Context, run string) (*amqpResult, error) { return runAMQPOnce(ctx, cfg, run) }
	return runRepeated(ctx, &cfg.common, "amqp "+cfg.scenario, once, medianAMQP, stdout)
}

// amqpBench is the state of one AMQP run. Senders, receivers and the
// disposition collector update the counters and histograms;
// runAMQPOnce owns everything else.
type amqpBench struct {
	cfg     *amqpConfig
	address string    // the terminus address of every link: a fresh queue or topic
	base    time.Time // send stamps are time.Since(base)
	runState

	// ioCtx is cancelled at teardown: it unblocks every go-amqp call
	// (sends held by missing credit, Receive, receipt waits).
	ioCtx context.Context

	sent      atomic.Int64 // transfers written (Send/SendWithReceipt returned)
	confirmed atomic.Int64 // durable-*: dispositions with outcome accepted
	delivered atomic.Int64 // counted by receivers (accepted first, for durable-*)
}

// newAMQPAddress returns a terminus address unique to this run, in the
// format of -addr-style.
func newAMQPAddress(cfg *amqpConfig) string {
	var r [6]byte
	rand.Read(r[:])
	name := fmt.Sprintf("bench.%s.%s", cfg.scenario, hex.EncodeToString(r[:]))
	kind := "queue"
	if cfg.scenario == scFanout {
		kind = "topic"
	}
	if cfg.addrStyle == styleRabbitMQ {
		return "/" + kind + "/" + name
	}
	return kind + "://" + name
}

// amqpClient is one connection with one session; nc is the socket under
// it, so teardown can close it if the close handshake stalls.
type amqpClient struct {
	nc   net.Conn
	conn *amqp.Conn
	sess *amqp.Session
}

// dial opens a connection and a session on it, within the dial timeout.
func (b *amqpBench) dial(ctx context.Context) (*amqpClient, error) {
	cfg := b.cfg
	nc, conn, sess, err := ibench.DialAMQP(ctx, ibench.AMQPDial{Addr: cfg.dialAddr, User: cfg.user, Pass: cfg.pass, Timeout: cfg.dialTimeout})
	if err != nil {
		return nil, err
	}
	return &amqpClient{nc: nc, conn: conn, sess: sess}, nil
}

// close closes the connection (close frame, then the socket), for at most
// closeTimeout, then the socket whatever happened.
func (c *amqpClient) close() {
	done := make(chan struct{})
	go func() {
		c.conn.Close()
		close(done)
	}()
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	c.nc.Close()
}

// terminusDurability is what links ask of the queue's terminus: RabbitMQ
// declares the /queue/ it names durable only when asked for (configuration)
// durability, and sender and receiver must ask the same. Junction ignores
// it on queues.
func (b *amqpBench) terminusDurability() amqp.Durability {
	if b.cfg.durable() {
		return amqp.DurabilityConfiguration
	}
	return amqp.DurabilityNone
}

// amqpReceiver is one receiving connection.
type amqpReceiver struct {
	c     *amqpClient
	r     *amqp.Receiver
	hist  lockedHist  // e2e latency
	ready atomic.Bool // received at least one message (fanout probe)
	done  chan struct{}
}

// startReceiver connects and attaches a receiver to b.address, and starts
// its receive loop. The attach is complete (the broker answered it) when
// this returns.
func (b *amqpBench) startReceiver(ctx context.Context) (*amqpReceiver, error) {
	c, err := b.dial(ctx)
	if err != nil {
		return nil, err
	}
	opts := &amqp.ReceiverOptions{
		Credit:           int32(b.cfg.credit),
		SourceDurability: b.terminusDurability(),
	}
	if !b.cfg.durable() {
		opts.RequestedSenderSettleMode = amqp.SenderSettleModeSettled.Ptr()
	}
	actx, cancel := context.WithTimeout(ctx, b.cfg.dialTimeout)
	defer cancel()
	r, err := c.sess.NewReceiver(actx, b.address, opts)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("attach receiver: %w", err)
	}
	rc := &amqpReceiver{c: c, r: r, done: make(chan struct{})}
	go rc.loop(b)
	return rc, nil
}

// loop receives (and, for durable-*, accepts) until teardown. Messages
// count as delivered once accepted, or on arrival when pre-settled.
func (rc *amqpReceiver) loop(b *amqpBench) {
	defer close(rc.done)
	accept := b.cfg.durable()
	for {
		msg, err := rc.r.Receive(b.ioCtx, nil)
		if err != nil {
			b.fail(fmt.Errorf("receiver: %w", err))
			return
		}
		if accept {
			if err := rc.r.AcceptMessage(b.ioCtx, msg); err != nil {
				b.fail(fmt.Errorf("receiver accept: %w", err))
				return
			}
		}
		rc.ready.Store(true)
		if b.tearing.Load() {
			continue
		}
		ts := getStamp(msg.GetData())
		if ts == 0 {
			continue // fanout probe
		}
		if b.measuring.Load() {
			rc.hist.record(time.Since(b.base) - ts)
		}
		b.delivered.Add(1)
	}
}

// amqpSender is one sending connection.
type amqpSender struct {
	c    *amqpClient
	s    *amqp.Sender
	hist lockedHist    // send-to-disposition latency (durable-*)
	done chan struct{} // closed when the send loop returns; nil until started
}

// startSender connects and attaches a sender to b.address: unsettled for
// durable-*, pre-settled otherwise.
func (b *amqpBench) startSender(ctx context.Context) (*amqpSender, error) {
	c, err := b.dial(ctx)
	if err != nil {
		return nil, err
	}
	opts := &amqp.SenderOptions{TargetDurability: b.terminusDurability()}
	if b.cfg.durable() {
		opts.SettlementMode = amqp.SenderSettleModeUnsettled.Ptr()
	} else {
		opts.SettlementMode = amqp.SenderSettleModeSettled.Ptr()
	}
	actx, cancel := context.WithTimeout(ctx, b.cfg.dialTimeout)
	defer cancel()
	s, err := c.sess.NewSender(actx, b.address, opts)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("attach sender: %w", err)
	}
	return &amqpSender{c: c, s: s}, nil
}

// newMessage returns a message of -size bytes, durable for durable-*, and
// its body to stamp. go-amqp encodes the message inside Send, so one
// message is reused for every send of a loop.
func (b *amqpBench) newMessage() (*amqp.Message, []byte) {
	body := make([]byte, b.cfg.size)
	m := amqp.NewMessage(body)
	if b.cfg.durable() {
		m.Header = &amqp.MessageHeader{Durable: true}
	}
	return m, body
}

// outcomeErr describes a disposition other than accepted.
func outcomeErr(st amqp.DeliveryState) error {
	switch st := st.(type) {
	case *amqp.StateAccepted:
		return nil
	case *amqp.StateRejected:
		if st.Error != nil {
			return fmt.Errorf("message rejected: %w", st.Error)
		}
		return errors.New("message rejected")
	case *amqp.StateReleased:
		return errors.New("message released")
	case *amqp.StateModified:
		return fmt.Errorf("message modified (delivery-failed %v, undeliverable-here %v)", st.DeliveryFailed, st.UndeliverableHere)
	case nil:
		return errors.New("delivery settled by the broker without an outcome")
	default:
		return fmt.Errorf("unexpected outcome %T", st)
	}
}

// settledLoop sends pre-settled messages as fast as go-amqp writes them
// (settled, fanout).
func (p *amqpSender) settledLoop(b *amqpBench) error {
	m, body := b.newMessage()
	for !b.stopped.Load() {
		putStamp(body, time.Since(b.base))
		if err := p.s.Send(b.ioCtx, m, nil); err != nil {
			return err
		}
		b.sent.Add(1)
	}
	return nil
}

// waitLoop sends durable messages, each waiting for its disposition
// before the next (durable-wait).
func (p *amqpSender) waitLoop(b *amqpBench) error {
	m, body := b.newMessage()
	for !b.stopped.Load() {
		start := time.Now()
		putStamp(body, time.Since(b.base))
		// SendWithReceipt and Wait: the wait Send does, but Send lets
		// released and modified outcomes pass as success.
		rcpt, err := p.s.SendWithReceipt(b.ioCtx, m, nil)
		if err != nil {
			return err
		}
		b.sent.Add(1)
		st, err := rcpt.Wait(b.ioCtx)
		if err != nil {
			return fmt.Errorf("disposition: %w", err)
		}
		if err := outcomeErr(st); err != nil {
			return err
		}
		b.confirmed.Add(1)
		if b.measuring.Load() {
			p.hist.record(time.Since(start))
		}
	}
	return nil
}

// amqpReceipt is one send awaiting its disposition.
type amqpReceipt struct {
	r     amqp.SendReceipt
	start time.Time
}

// pipelinedLoop sends durable messages with up to -inflight awaiting their
// disposition (durable-pipelined): this goroutine sends with
// SendWithReceipt while a semaphore has room, a collector waits for the
// receipts in order and frees a slot for each. A disposition that
// overtakes an earlier one is seen when the earlier one is, so confirm
// latencies are upper bounds.
func (p *amqpSender) pipelinedLoop(b *amqpBench) error {
	window := b.cfg.inflight
	sem := make(chan struct{}, window)
	receipts := make(chan amqpReceipt, window)
	collDone := make(chan struct{})
	var collErr error // set before collDone is closed
	go func() {
		defer close(collDone)
		for pr := range receipts {
			st, err := pr.r.Wait(b.ioCtx)
			if err != nil {
				collErr = fmt.Errorf("disposition: %w", err)
				return
			}
			if err := outcomeErr(st); err != nil {
				collErr = err
				return
			}
			b.confirmed.Add(1)
			if b.measuring.Load() {
				p.hist.record(time.Since(pr.start))
			}
			<-sem
		}
	}()
	m, body := b.newMessage()
	for !b.stopped.Load() {
		select {
		case sem <- struct{}{}:
		case <-collDone:
			return collErr
		case <-b.stop:
			continue // the loop condition ends it
		}
		start := time.Now()
		putStamp(body, time.Since(b.base))
		r, err := p.s.SendWithReceipt(b.ioCtx, m, nil)
		if err != nil {
			close(receipts)
			return err
		}
		b.sent.Add(1)
		receipts <- amqpReceipt{r: r, start: start} // never blocks: sem bounds it
	}
	close(receipts)
	// The collector ends once every receipt has its disposition, or at
	// teardown (ioCtx); the run's drain decides how long to wait.
	<-collDone
	return collErr
}

// syncProbes sends probe messages (stamp 0) to the topic until every
// receiver has one, so that no subscriber misses the first counted
// message.
func (b *amqpBench) syncProbes(ctx context.Context, p *amqpSender, rcvs []*amqpReceiver) error {
	m := amqp.NewMessage(make([]byte, minBodySize))
	deadline := time.Now().Add(probeTimeout)
	for {
		ready := 0
		for _, rc := range rcvs {
			if rc.ready.Load() {
				ready++
			}
		}
		if ready == len(rcvs) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d receivers got a probe within %v", ready, len(rcvs), probeTimeout)
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := p.s.Send(pctx, m, nil)
		cancel()
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		if err := b.sleep(ctx, probeInterval); err != nil {
			return err
		}
	}
}

// amqpSnap is the run's counters and CPU clocks at one instant.
type amqpSnap struct {
	at                         time.Time
	sent, confirmed, delivered int64
	broker, self, mach         time.Duration
	selfErr, machErr           error
}

func (b *amqpBench) snap() (amqpSnap, error) {
	s := amqpSnap{at: time.Now(), sent: b.sent.Load(), confirmed: b.confirmed.Load(), delivered: b.delivered.Load()}
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

// runAMQPOnce performs one run: attach receivers, then senders, warm up,
// measure, stop, drain, tear down.
func runAMQPOnce(ctx context.Context, cfg *amqpConfig, run string) (*amqpResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ioCtx, ioCancel := context.WithCancel(context.Background())
	b := &amqpBench{cfg: cfg, address: newAMQPAddress(cfg), base: time.Now(), ioCtx: ioCtx}
	b.init()

	var rcvs []*amqpReceiver
	var snds []*amqpSender
	defer func() {
		b.stopLoad()
		b.tearing.Store(true)
		ioCancel()
		amqpTeardown(snds, rcvs)
	}()

	// Receivers first, so the queue has its consumer and the topic its
	// subscribers before anything is sent.
	for i := range cfg.receivers() {
		rc, err := b.startReceiver(ctx)
		if err != nil {
			return nil, fmt.Errorf("receiver %d: %w", i, err)
		}
		rcvs = append(rcvs, rc)
	}
	for i := range cfg.senders() {
		p, err := b.startSender(ctx)
		if err != nil {
			return nil, fmt.Errorf("sender %d: %w", i, err)
		}
		snds = append(snds, p)
	}
	if cfg.scenario == scFanout {
		if err := b.syncProbes(ctx, snds[0], rcvs); err != nil {
			return nil, err
		}
	}
	for _, p := range snds {
		p.done = make(chan struct{})
		go func() {
			defer close(p.done)
			var err error
			switch cfg.scenario {
			case scDurPipe:
				err = p.pipelinedLoop(b)
			case scDurWait:
				err = p.waitLoop(b)
			default:
				err = p.settledLoop(b)
			}
			if err != nil {
				b.fail(fmt.Errorf("sender: %w", err))
			}
		}()
	}

	if err := b.sleep(ctx, cfg.warmup); err != nil {
		return nil, err
	}
	s0, err := b.snap()
	if err != nil {
		return nil, err
	}
	b.measuring.Store(true)
	if err := b.window(ctx, cfg.duration); err != nil {
		return nil, err
	}
	b.measuring.Store(false)
	s1, err := b.snap()
	if err != nil {
		return nil, err
	}
	b.stopLoad()

	// Drain: senders finish their last send and outstanding dispositions
	// come back, receivers catch up; all within -drain.
	fan := int64(1)
	if cfg.scenario == scFanout {
		fan = int64(cfg.subscribers)
	}
	sendersDone := func() bool {
		for _, p := range snds {
			select {
			case <-p.done:
			default:
				return false
			}
		}
		return true
	}
	if err := b.drainUntil(ctx, s1.at.Add(cfg.drain), func() bool {
		return sendersDone() && b.delivered.Load() >= b.sent.Load()*fan
	}); err != nil {
		return nil, err
	}
	res := b.result(run, s0, s1, rcvs, snds)
	if sendersDone() {
		res.Undrained = max(0, b.sent.Load()*fan-b.delivered.Load())
	} else {
		res.Undrained = -1 // unknown: sends or dispositions still outstanding
	}
	return res, nil
}

// amqpTeardown waits (bounded) for the send loops, which ioCtx has
// unblocked, then closes every connection in parallel.
func amqpTeardown(snds []*amqpSender, rcvs []*amqpReceiver) {
	var wg sync.WaitGroup
	for _, p := range snds {
		wg.Go(func() {
			if p.done != nil {
				t := time.NewTimer(closeTimeout)
				select {
				case <-p.done:
				case <-t.C:
				}
				t.Stop()
			}
			p.c.close()
		})
	}
	for _, rc := range rcvs {
		wg.Go(func() {
			rc.c.close()
			t := time.NewTimer(closeTimeout)
			select {
			case <-rc.done:
			case <-t.C:
			}
			t.Stop()
		})
	}
	wg.Wait()
}

// amqpResult is the outcome of one AMQP run, or the median of several:
// the STOMP result's figures (same JSON fields, same meaning), plus the
// protocol and the address style. Ack is "accept" (durable-*: receivers
// accept every delivery) or "settled" (receivers ask for pre-settled
// deliveries); Prefetch is the receivers' link credit.
type amqpResult struct {
	Protocol  string `json:"protocol"` // "amqp"
	AddrStyle string `json:"addr_style"`
	*result
}

// write prints r as one line, JSON or text.
func (r *amqpResult) write(w io.Writer, asJSON bool) error {
	return writeLine(w, asJSON, r, r.text)
}

// text builds r's plain-text line: the STOMP line, prefixed "amqp-",
// with the address style at the end.
func (r *amqpResult) text(b *strings.Builder) {
	b.WriteString("amqp-")
	r.result.text(b)
	fmt.Fprintf(b, " addr_style=%s", r.AddrStyle)
}

// medianAMQP returns the median of every figure over rs (at least one).
func medianAMQP(rs []*amqpResult) *amqpResult {
	inner := make([]*result, len(rs))
	for i, r := range rs {
		inner[i] = r.result
	}
	return &amqpResult{Protocol: rs[0].Protocol, AddrStyle: rs[0].AddrStyle, result: medianResult(inner)}
}

// result computes the figures of the window between s0 and s1.
func (b *amqpBench) result(run string, s0, s1 amqpSnap, rcvs []*amqpReceiver, snds []*amqpSender) *amqpResult {
	cfg := b.cfg
	w := s1.at.Sub(s0.at)
	secs := w.Seconds()
	r := &result{
		Scenario:      cfg.scenario,
		Run:           run,
		Addr:          cfg.addr,
		Destination:   b.address,
		Size:          cfg.size,
		Producers:     cfg.senders(),
		Consumers:     cfg.receivers(),
		Inflight:      cfg.inflight,
		Ack:           amSettleS,
		Prefetch:      cfg.credit,
		WindowS:       secs,
		SentPerS:      float64(s1.sent-s0.sent) / secs,
		DeliveredPerS: float64(s1.delivered-s0.delivered) / secs,
	}
	var e2e, conf histogram
	for _, rc := range rcvs {
		rc.hist.mergeInto(&e2e)
	}
	r.E2EP50us, r.E2EP99us = usOf(e2e.Quantile(0.50)), usOf(e2e.Quantile(0.99))
	if cfg.durable() {
		r.Ack = amAccept
		r.ConfirmedPerS = float64(s1.confirmed-s0.confirmed) / secs
		for _, p := range snds {
			p.hist.mergeInto(&conf)
		}
		r.ConfirmP50us, r.ConfirmP99us = usOf(conf.Quantile(0.50)), usOf(conf.Quantile(0.99))
	}
	if s0.selfErr == nil && s1.selfErr == nil {
		v := float64(s1.self-s0.self) / float64(w)
		r.ClientCores = &v
	}
	if s0.machErr == nil && s1.machErr == nil {
		v := float64(s1.mach-s0.mach) / float64(w)
		r.MachineCores = &v
	}
	if cfg.pid > 0 {
		cpu := s1.broker - s0.broker
		cpuUs := float64(cpu) / float64(time.Microsecond)
		cores := float64(cpu) / float64(w)
		r.CPUCores = &cores
		var basis int64
		switch cfg.scenario {
		case amSettled:
			basis, r.CPUBasis = s1.delivered-s0.delivered, "delivered"
		case scFanout:
			basis, r.CPUBasis = s1.sent-s0.sent, "published"
			if d := s1.delivered - s0.delivered; d > 0 {
				v := cpuUs / float64(d)
				r.CPUusPerDelivery = &v
			}
		default:
			basis, r.CPUBasis = s1.confirmed-s0.confirmed, "confirmed"
		}
		if basis > 0 {
			v := cpuUs / float64(basis)
			r.CPUusPerMsg = &v
		}
	}
	return &amqpResult{Protocol: "amqp", AddrStyle: cfg.addrStyle, result: r}
}

package scenario

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/go-stomp/stomp/v3/frame"
	ibench "github.com/junctionmq/junction/internal/bench"
)

// Fixed bounds on waits that no flag controls.
const (
	sendTimeout    = 5 * time.Second  // go-stomp Send blocked by broker flow control
	receiptTimeout = 10 * time.Second // go-stomp Send with receipt (durable-wait)
	closeTimeout   = 3 * time.Second  // DISCONNECT handshake, then the socket is closed
	probeTimeout   = 10 * time.Second // fanout: all subscribers must see a probe by then
	probeInterval  = 20 * time.Millisecond
	pollInterval   = 5 * time.Millisecond
	runPause       = time.Second // between repetitions, to let the broker settle
)

// runSTOMP runs cfg.runs repetitions, printing a line for each and then,
// with more than one, a line with the medians.
func runSTOMP(ctx context.Context, cfg *config, stdout, stderr io.Writer) error {
	once := func(ctx context.Context, run string) (*result, error) { return runOnce(ctx, cfg, run) }
	return runRepeated(ctx, &cfg.common, cfg.scenario, once, medianResult, stdout)
}

// bench is the state of one run. Producers and consumers update the
// counters and histograms; runOnce owns everything else.
type bench struct {
	cfg  *config
	dest string
	base time.Time // send stamps are time.Since(base): monotonic, one process
	runState

	sent      atomic.Int64 // see result.SentPerS
	delivered atomic.Int64 // see result.DeliveredPerS
	confirmed atomic.Int64 // RECEIPTs for persistent sends
}

// newDestination returns a destination name unique to this run.
func newDestination(scenario string) string {
	var r [6]byte
	rand.Read(r[:])
	kind := "queue"
	if scenario == scFanout {
		kind = "topic"
	}
	return fmt.Sprintf("/%s/bench.%s.%s", kind, scenario, hex.EncodeToString(r[:]))
}

// stompConn is a go-stomp connection with the socket under it, so teardown
// can close the socket if the DISCONNECT handshake stalls.
type stompConn struct {
	nc   net.Conn
	conn *stomp.Conn
}

// dialStomp opens a go-stomp connection (bench.DialSTOMP).
func (b *bench) dialStomp(ctx context.Context) (*stompConn, error) {
	cfg := b.cfg
	nc, conn, err := ibench.DialSTOMP(ctx, ibench.STOMPDial{Addr: cfg.dialAddr, Host: cfg.host, Login: cfg.login, Passcode: cfg.passcode,
		Version: cfg.version, Timeout: cfg.dialTimeout, SendTimeout: sendTimeout, ReceiptTimeout: receiptTimeout, CloseTimeout: closeTimeout})
	if err != nil {
		return nil, err
	}
	return &stompConn{nc: nc, conn: conn}, nil
}

// close sends DISCONNECT and waits for its RECEIPT for at most closeTimeout,
// then closes the socket whatever happened. go-stomp's Disconnect can block
// without a timeout when its writer is stuck, hence the goroutine.
func (s *stompConn) close() {
	done := make(chan struct{})
	go func() {
		s.conn.Disconnect()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeTimeout):
	}
	s.nc.Close()
}

// consumer is one subscribing connection.
//
// In client-individual mode the receive loop never calls Ack itself: it
// hands each message to a bench.STOMPAcker, whose goroutine acks (see
// there why: go-stomp v3.1.3 deadlocks otherwise once the broker sends
// faster than the consumer acks). A broker's prefetch bounds its queue.
type consumer struct {
	sc    *stompConn
	sub   *stomp.Subscription
	hist  lockedHist  // e2e latency
	ready atomic.Bool // received at least one message (fanout probe)
	done  chan struct{}

	acks    *ibench.STOMPAcker // nil with ack auto
	ackDone chan struct{}      // closed when the acker returns
}

// startConsumer connects, subscribes to b.dest and starts the receive loop.
func (b *bench) startConsumer(ctx context.Context) (*consumer, error) {
	sc, err := b.dialStomp(ctx)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	mode := stomp.AckAuto
	if b.cfg.ack == ackIndiv {
		mode = stomp.AckClientIndividual
	}
	var opts []func(*frame.Frame) error
	if n := b.cfg.prefetch; n > 0 {
		v := strconv.Itoa(n)
		opts = append(opts,
			stomp.SubscribeOpt.Header("activemq.prefetchSize", v), // ActiveMQ
			stomp.SubscribeOpt.Header("prefetch-count", v))        // RabbitMQ
	}
	sub, err := sc.conn.Subscribe(b.dest, mode, opts...)
	if err != nil {
		sc.close()
		return nil, fmt.Errorf("consumer SUBSCRIBE: %w", err)
	}
	c := &consumer{sc: sc, sub: sub, done: make(chan struct{})}
	if mode == stomp.AckAuto {
		c.ackDone = make(chan struct{})
		close(c.ackDone)
	} else {
		c.acks = ibench.NewSTOMPAcker(sc.conn, func(body []byte) {
			if getStamp(body) != 0 {
				b.delivered.Add(1)
			}
		}, func(err error) { b.fail(fmt.Errorf("consumer: %w", err)) })
		c.ackDone = c.acks.Done
	}
	go c.loop(b)
	return c, nil
}

// loop receives until the subscription's channel closes (at teardown). It
// keeps reading during teardown so go-stomp's connection goroutine never
// blocks on it. Messages count as delivered here with ack auto, and once
// acked otherwise.
func (c *consumer) loop(b *bench) {
	defer close(c.done)
	if c.acks != nil {
		defer c.acks.Stop()
	}
	for msg := range c.sub.C {
		if msg.Err != nil {
			b.fail(fmt.Errorf("consumer: %w", msg.Err))
			continue
		}
		c.ready.Store(true)
		if b.tearing.Load() {
			continue
		}
		ts := getStamp(msg.Body)
		if ts != 0 && b.measuring.Load() {
			c.hist.record(time.Since(b.base) - ts)
		}
		if c.acks != nil {
			c.acks.Push(msg)
			continue
		}
		if ts != 0 { // 0: fanout probe
			b.delivered.Add(1)
		}
	}
}

// producer is one sending connection: go-stomp's (sc) or raw (raw).
type producer struct {
	sc   *stompConn
	raw  *rawProducer
	hist lockedHist    // confirm latency (durable-wait)
	done chan struct{} // closed when the send loop returns; nil until started
}

// asyncSend sends non-persistent messages without receipts until stop.
func (p *producer) asyncSend(b *bench) error {
	// go-stomp's Send returns once the frame is queued for its writer
	// goroutine (a queue of 20), which reads the body later: rotate through
	// more bodies than can be queued, so none is restamped while queued.
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = make([]byte, b.cfg.size)
	}
	for i := 0; !b.stopped.Load(); i++ {
		body := bodies[i%len(bodies)]
		putStamp(body, time.Since(b.base))
		if err := p.sc.conn.Send(b.dest, "", body); err != nil {
			if errors.Is(err, stomp.ErrMsgSendTimeout) {
				continue // flow control held us for sendTimeout; recheck stop
			}
			return err
		}
		b.sent.Add(1)
	}
	return nil
}

// syncSend sends persistent messages, each waiting for its RECEIPT.
func (p *producer) syncSend(b *bench) error {
	body := make([]byte, b.cfg.size)
	persistent := stomp.SendOpt.Header("persistent", "true")
	for !b.stopped.Load() {
		start := time.Now()
		putStamp(body, time.Since(b.base))
		if err := p.sc.conn.Send(b.dest, "", body, stomp.SendOpt.Receipt, persistent); err != nil {
			return err
		}
		b.sent.Add(1)
		b.confirmed.Add(1)
		if b.measuring.Load() {
			p.hist.record(time.Since(start))
		}
	}
	return nil
}

// syncProbes sends empty-stamped probe messages to the topic until every
// subscriber has received one, so no subscriber misses the first counted
// message.
func (b *bench) syncProbes(ctx context.Context, p *producer, cons []*consumer) error {
	probe := make([]byte, minBodySize) // stamp 0: consumers skip it
	deadline := time.Now().Add(probeTimeout)
	for {
		ready := 0
		for _, c := range cons {
			if c.ready.Load() {
				ready++
			}
		}
		if ready == len(cons) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d subscribers received a probe within %v", ready, len(cons), probeTimeout)
		}
		if err := p.sc.conn.Send(b.dest, "", probe); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		if err := b.sleep(ctx, probeInterval); err != nil {
			return err
		}
	}
}

// runOnce performs one run: connect, warm up, measure, stop, drain, tear down.
func runOnce(ctx context.Context, cfg *config, run string) (res *result, err error) {
	b := &bench{
		cfg:  cfg,
		dest: newDestination(cfg.scenario),
		base: time.Now(),
	}
	b.init()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Raw connections get an absolute deadline past which nothing may block.
	hardDeadline := time.Now().Add(cfg.warmup + cfg.duration + cfg.drain + cfg.dialTimeout*time.Duration(cfg.producers+cfg.consumers) + 30*time.Second)

	var cons []*consumer
	var prods []*producer
	defer func() {
		b.stopLoad()
		b.tearing.Store(true)
		teardown(prods, cons)
	}()

	// Consumers first, so queues have them and topics have subscribers.
	for range cfg.consumers {
		c, err := b.startConsumer(ctx)
		if err != nil {
			return nil, err
		}
		cons = append(cons, c)
	}
	for i := range cfg.producers {
		p := &producer{}
		if cfg.scenario == scDurPipe {
			window := cfg.inflight / cfg.producers
			if i < cfg.inflight%cfg.producers {
				window++
			}
			rc, err := dialRaw(ctx, cfg)
			if err != nil {
				return nil, fmt.Errorf("producer: %w", err)
			}
			rc.nc.SetDeadline(hardDeadline)
			p.raw = newRawProducer(b, rc, window)
		} else {
			sc, err := b.dialStomp(ctx)
			if err != nil {
				return nil, fmt.Errorf("producer: %w", err)
			}
			p.sc = sc
		}
		prods = append(prods, p)
	}
	if cfg.scenario == scFanout {
		if err := b.syncProbes(ctx, prods[0], cons); err != nil {
			return nil, err
		}
	}

	for _, p := range prods {
		p.done = make(chan struct{})
		go func() {
			defer close(p.done)
			var err error
			switch cfg.scenario {
			case scQueue, scFanout:
				err = p.asyncSend(b)
			case scDurWait:
				err = p.syncSend(b)
			case scDurPipe:
				err = p.raw.writeLoop()
			}
			if err != nil {
				b.fail(fmt.Errorf("producer: %w", err))
			}
		}()
	}

	if err := b.sleep(ctx, cfg.warmup); err != nil {
		return nil, err
	}
	snap0 := b.snapshot()
	cpu0, err := b.brokerCPU()
	if err != nil {
		return nil, err
	}
	self0, selfErr0 := procCPU(os.Getpid())
	mach0, machErr0 := machineCPU()
	t0 := time.Now()
	b.measuring.Store(true)
	if err := b.window(ctx, cfg.duration); err != nil {
		return nil, err
	}
	b.measuring.Store(false)
	t1 := time.Now()
	snap1 := b.snapshot()
	cpu1, err := b.brokerCPU()
	if err != nil {
		return nil, err
	}
	self1, selfErr1 := procCPU(os.Getpid())
	mach1, machErr1 := machineCPU()
	b.stopLoad()

	// Drain: producers finish their last send and outstanding receipts come
	// back, consumers catch up; all within -drain.
	drainDeadline := t1.Add(cfg.drain)
	expected := func() int64 {
		if cfg.scenario == scFanout {
			return b.sent.Load() * int64(cfg.consumers)
		}
		return b.sent.Load()
	}
	if err := b.drainUntil(ctx, drainDeadline, func() bool {
		return b.drained(prods) && b.delivered.Load() >= expected()
	}); err != nil {
		return nil, err
	}
	res = b.result(run, t1.Sub(t0), snap0, snap1, cpu0, cpu1, cons, prods)
	if selfErr0 == nil && selfErr1 == nil {
		v := float64(self1-self0) / float64(t1.Sub(t0))
		res.ClientCores = &v
	}
	if machErr0 == nil && machErr1 == nil {
		v := float64(mach1-mach0) / float64(t1.Sub(t0))
		res.MachineCores = &v
	}
	if b.drained(prods) {
		res.Undrained = max(0, expected()-b.delivered.Load())
	} else {
		res.Undrained = -1 // unknown: producers were still sending
	}
	return res, nil
}

// drained reports whether every producer has stopped and has no receipt
// outstanding.
func (b *bench) drained(prods []*producer) bool {
	for _, p := range prods {
		select {
		case <-p.done:
		default:
			return false
		}
		if p.raw != nil && p.raw.outstanding() > 0 {
			select {
			case <-p.raw.readDone:
			default:
				return false
			}
		}
	}
	return true
}

// teardown closes every connection, in parallel, each bounded by
// closeTimeout; consumers keep reading meanwhile.
func teardown(prods []*producer, cons []*consumer) {
	var wg sync.WaitGroup
	for _, p := range prods {
		wg.Go(func() {
			if p.raw == nil {
				p.sc.close() // go-stomp serialises Disconnect with Send
				return
			}
			// Only writeLoop writes until it returns: wait for it before
			// writing DISCONNECT, or just close the socket.
			if p.done != nil {
				select {
				case <-p.done:
				case <-time.After(closeTimeout):
					p.raw.rc.nc.Close()
					return
				}
			}
			p.raw.close()
		})
	}
	for _, c := range cons {
		wg.Go(func() {
			c.sc.close()
			timeout := time.After(closeTimeout)
			select {
			case <-c.done:
			case <-timeout:
			}
			select {
			case <-c.ackDone:
			case <-timeout:
			}
		})
	}
	wg.Wait()
}

// counters is a snapshot of the run's counters.
type counters struct{ sent, delivered, confirmed int64 }

func (b *bench) snapshot() counters {
	return counters{b.sent.Load(), b.delivered.Load(), b.confirmed.Load()}
}

// brokerCPU returns the broker's CPU time so far, or 0 without -pid.
func (b *bench) brokerCPU() (time.Duration, error) {
	if b.cfg.pid == 0 {
		return 0, nil
	}
	return procCPU(b.cfg.pid)
}

// result computes the figures of the measured window.
func (b *bench) result(run string, window time.Duration, s0, s1 counters, cpu0, cpu1 time.Duration, cons []*consumer, prods []*producer) *result {
	cfg := b.cfg
	secs := window.Seconds()
	r := &result{
		Scenario:      cfg.scenario,
		Run:           run,
		Addr:          cfg.addr,
		Destination:   b.dest,
		Size:          cfg.size,
		Producers:     cfg.producers,
		Consumers:     cfg.consumers,
		Inflight:      cfg.inflight,
		Ack:           cfg.ack,
		Prefetch:      cfg.prefetch,
		WindowS:       secs,
		SentPerS:      float64(s1.sent-s0.sent) / secs,
		DeliveredPerS: float64(s1.delivered-s0.delivered) / secs,
		ConfirmedPerS: float64(s1.confirmed-s0.confirmed) / secs,
	}
	var e2e, conf histogram
	for _, c := range cons {
		c.hist.mergeInto(&e2e)
	}
	for _, p := range prods {
		p.hist.mergeInto(&conf)
		if p.raw != nil {
			p.raw.hist.mergeInto(&conf)
		}
	}
	r.E2EP50us, r.E2EP99us = usOf(e2e.Quantile(0.50)), usOf(e2e.Quantile(0.99))
	if cfg.persistent() {
		r.ConfirmP50us, r.ConfirmP99us = usOf(conf.Quantile(0.50)), usOf(conf.Quantile(0.99))
	}
	if cfg.pid > 0 {
		cpuUs := float64(cpu1-cpu0) / float64(time.Microsecond)
		cores := float64(cpu1-cpu0) / float64(window)
		r.CPUCores = &cores
		var basis int64
		switch cfg.scenario {
		case scQueue:
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
	return r
}

// Package bench is a protocol-neutral load generator: producers and
// consumers over STOMP (go-stomp), MQTT 3.1.1 (paho) or AMQP 1.0
// (go-amqp) against any broker that speaks the protocol, with end-to-end
// and confirmation latency recorded in log-linear histograms. It backs
// `junction bench --url ...`; its subpackage scenario backs the fixed
// scenarios of `junction bench stomp|mqtt|amqp` and shares its histogram
// and time stamps.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Protocols are the values of Options.Protocol.
var Protocols = []string{"stomp", "mqtt", "amqp"}

// DefaultURL returns the default broker URL of protocol.
func DefaultURL(protocol string) string {
	switch protocol {
	case "mqtt":
		return "mqtt://127.0.0.1:1883"
	case "amqp":
		return "amqp://127.0.0.1:5672"
	default:
		return "stomp://127.0.0.1:61613"
	}
}

// Options describe one run. The zero value of a field means its default.
type Options struct {
	// Protocol is stomp, mqtt or amqp; empty takes the URL's scheme.
	Protocol string
	// URL is scheme://host:port (the scheme may be omitted when Protocol
	// is set); user:password@ in it are the credentials.
	URL string
	// Destination: a queue for STOMP (default /queue/bench.<random>) and
	// AMQP (default queue://bench.<random>), a topic for MQTT (default
	// bench/<random>).
	Destination string
	Producers   int // connections sending; default 1 (unless ReceiveOnly)
	// ReceiveOnly runs no producers: the consumers receive a backlog
	// already waiting, Count messages (or until nothing arrives for
	// Drain). For measuring how fast a broker drains what it holds.
	ReceiveOnly bool
	// SendOnly runs no consumers: the messages are left on the broker
	// (a backlog for a later ReceiveOnly run).
	SendOnly  bool
	Consumers int // connections receiving; default 1
	Size      int // message body bytes, at least StampSize; default 1024
	// Durable: persistent messages confirmed by the broker (STOMP receipt,
	// MQTT QoS 1 with persistent sessions, AMQP unsettled sends of durable
	// messages) and acknowledged by consumers; otherwise fire-and-forget
	// (STOMP without receipt, QoS 0, settled AMQP) and automatic acks.
	Durable bool
	// Rate is the total send rate in messages per second; 0 sends as fast
	// as the window allows.
	Rate float64
	// Duration bounds the sending phase; default 10s when Count is 0.
	Duration time.Duration
	// Count, when positive, stops sending after that many messages.
	Count int64
	// Window is the number of sends each producer may have unconfirmed;
	// default 16 when durable, 1 otherwise.
	Window int
	// Drain bounds the wait for outstanding messages after sending;
	// default 10s.
	Drain time.Duration
	// DialTimeout bounds each connection's handshake; default 5s.
	DialTimeout time.Duration
	// Progress, when set, is called about every ProgressInterval (default
	// 1s) from another goroutine.
	Progress         func(Progress)
	ProgressInterval time.Duration
}

// Progress is a running figure of a run.
type Progress struct {
	Elapsed  time.Duration
	Sent     int64
	Received int64
	// SendRate and ReceiveRate are per second over the last interval.
	SendRate, ReceiveRate float64
	// Backlog is messages sent but not yet received (for MQTT, expected
	// deliveries over all subscribers).
	Backlog int64
}

// Latency is a summary of a histogram, in microseconds; all -1 when
// nothing was measured.
type Latency struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p99_9_us"`
	Max   float64 `json:"max_us"`
}

// Summarize returns h's summary.
func Summarize(h *Histogram) Latency {
	us := func(d time.Duration) float64 {
		if d < 0 {
			return -1
		}
		return float64(d) / float64(time.Microsecond)
	}
	return Latency{
		Count: h.Count(),
		P50:   us(h.Quantile(0.50)),
		P90:   us(h.Quantile(0.90)),
		P99:   us(h.Quantile(0.99)),
		P999:  us(h.Quantile(0.999)),
		Max:   us(h.Max()),
	}
}

// Result is the outcome of a run. JSON names are stable: scripts read
// them.
type Result struct {
	Protocol    string  `json:"protocol"`
	URL         string  `json:"url"`
	Destination string  `json:"destination"`
	Producers   int     `json:"producers"`
	Consumers   int     `json:"consumers"`
	Size        int     `json:"size"`
	Durable     bool    `json:"durable"`
	Rate        float64 `json:"rate_limit"` // 0: unlimited
	Window      int     `json:"window"`
	// SendS is the sending phase; ElapsedS adds the drain.
	SendS    float64 `json:"send_s"`
	ElapsedS float64 `json:"elapsed_s"`
	Sent     int64   `json:"sent"`
	// Confirmed: sends the broker confirmed (durable runs).
	Confirmed int64 `json:"confirmed"`
	// Received: messages received, summed over consumers.
	Received int64 `json:"received"`
	// Expected: deliveries expected (Sent, or Sent × Consumers for MQTT).
	Expected int64 `json:"expected"`
	// SendRate is Sent per second of the sending phase; ReceiveRate is
	// Received per second from the first send to the last receipt.
	SendRate    float64 `json:"send_rate"`
	ReceiveRate float64 `json:"receive_rate"`
	// MBps is received payload megabytes (10^6) per second.
	MBps    float64 `json:"receive_mb_per_s"`
	E2E     Latency `json:"e2e_latency"`
	Confirm Latency `json:"confirm_latency"`
	// Stopped says why a run ended early, with the figures so far:
	// "interrupted" (a signal), "deadline" (sends still under way Grace
	// after the sending time and the drain) or "stalled" (no progress);
	// empty for a run that completed.
	Stopped string `json:"stopped,omitempty"`
}

// Broker connections. Send blocks until the message is written (not
// durable) or confirmed (durable); it is safe for concurrent use.
// abort closes the sockets at once, with no goodbye to the broker; close
// says goodbye (bounded in time) and closes them.
type sender interface {
	send(ctx context.Context, body []byte) error
	abort()
	close()
}

type receiver interface {
	abort()
	close()
}

// deliver is how receivers hand messages to the run.
type deliver func(body []byte)

type client interface {
	sender(ctx context.Context, i int) (sender, error)
	receiver(ctx context.Context, i int, fn deliver, fail func(error)) (receiver, error)
	// fanout: every consumer gets every message.
	fanout() bool
}

// run is the state shared by a run's goroutines.
type run struct {
	o    Options
	base time.Time

	claimed   atomic.Int64 // sends started (Count bound)
	sent      atomic.Int64
	confirmed atomic.Int64
	received  atomic.Int64
	lastRecv  atomic.Int64 // ns since base of the last receipt

	e2e  AtomicHistogram
	conf AtomicHistogram

	failOnce sync.Once
	failErr  error
	failed   chan struct{}
	tearing  atomic.Bool
}

func (r *run) fail(err error) {
	if r.tearing.Load() {
		return
	}
	r.failOnce.Do(func() {
		r.failErr = err
		close(r.failed)
	})
}

func (r *run) deliver(body []byte) {
	if r.o.ReceiveOnly {
		// The stamps are another run's: no end-to-end latency, only the
		// receive rate.
		r.lastRecv.Store(int64(time.Since(r.base)))
	} else if ts := GetStamp(body); ts > 0 {
		now := time.Since(r.base)
		r.e2e.Record(now - ts)
		r.lastRecv.Store(int64(now))
	}
	r.received.Add(1)
}

// Normalize fills the defaults (a fresh Destination among them) and
// checks o; calling it again changes nothing. Run calls it: a caller
// calls it first to learn the destination a run will use, or to tell
// bad options from a failed run.
func (o *Options) Normalize() error {
	raw := o.URL
	if raw == "" {
		raw = DefaultURL(o.Protocol)
	}
	if !strings.Contains(raw, "://") {
		if o.Protocol == "" {
			return fmt.Errorf("URL %q has no scheme and no protocol is given", raw)
		}
		raw = o.Protocol + "://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("URL: %w", err)
	}
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case "tcp", "":
		scheme = o.Protocol
	case "amqps", "mqtts", "ssl", "stomp+ssl", "tls":
		return fmt.Errorf("URL %q: TLS is not supported", raw)
	}
	if o.Protocol == "" {
		o.Protocol = scheme
	}
	if scheme != o.Protocol {
		return fmt.Errorf("URL scheme %q does not match protocol %q", u.Scheme, o.Protocol)
	}
	switch o.Protocol {
	case "stomp", "mqtt", "amqp":
	default:
		return fmt.Errorf("unknown protocol %q (want stomp, mqtt or amqp)", o.Protocol)
	}
	if u.Port() == "" {
		def, _ := url.Parse(DefaultURL(o.Protocol))
		u.Host = net.JoinHostPort(u.Hostname(), def.Port())
	}
	if u.Hostname() == "" {
		return fmt.Errorf("URL %q has no host", raw)
	}
	u.Path = ""
	o.URL = u.String()
	if o.ReceiveOnly {
		o.Producers = 0
		if o.Consumers == 0 {
			o.Consumers = 1
		}
	} else if o.Producers == 0 {
		o.Producers = 1
	}
	if o.SendOnly {
		o.Consumers = 0
	} else if o.Consumers == 0 {
		o.Consumers = 1
	}
	if o.Size == 0 {
		o.Size = 1024
	}
	if o.Window == 0 {
		o.Window = 1
		if o.Durable {
			o.Window = 16
		}
	}
	if o.Duration == 0 && o.Count == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Drain == 0 {
		o.Drain = 10 * time.Second
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = time.Second
	}
	switch {
	case o.ReceiveOnly && o.SendOnly:
		return errors.New("a run cannot be both send-only and receive-only")
	case o.ReceiveOnly && o.Count == 0:
		return errors.New("receive-only needs a count of messages to receive")
	case !o.ReceiveOnly && (o.Producers < 1 || o.Producers > 1000):
		return fmt.Errorf("producers %d out of range [1, 1000]", o.Producers)
	case o.Consumers < 0 || o.Consumers > 1000:
		return fmt.Errorf("consumers %d out of range [0, 1000]", o.Consumers)
	case o.Size < StampSize || o.Size > 64<<20:
		return fmt.Errorf("size %d out of range [%d, %d]", o.Size, StampSize, 64<<20)
	case o.Window < 1 || o.Window > 10000:
		return fmt.Errorf("window %d out of range [1, 10000]", o.Window)
	case o.Rate < 0:
		return fmt.Errorf("rate %v is negative", o.Rate)
	case o.Count < 0:
		return fmt.Errorf("count %d is negative", o.Count)
	case o.Duration < 0 || o.Drain < 0 || o.DialTimeout < 0:
		return errors.New("durations must not be negative")
	}
	if o.Destination == "" {
		var b [6]byte
		rand.Read(b[:])
		tag := hex.EncodeToString(b[:])
		switch o.Protocol {
		case "stomp":
			o.Destination = "/queue/bench." + tag
		case "amqp":
			o.Destination = "queue://bench." + tag
		case "mqtt":
			o.Destination = "bench/" + tag
		}
	}
	return nil
}

func (o *Options) newClient(fail func(error)) (client, error) {
	u, _ := url.Parse(o.URL)
	user := u.User.Username()
	pass, _ := u.User.Password()
	base := clientBase{addr: u.Host, host: u.Hostname(), user: user, pass: pass, o: o}
	switch o.Protocol {
	case "stomp":
		return &stompClient{base}, nil
	case "mqtt":
		return &mqttClient{clientBase: base, fail: fail}, nil
	default:
		return &amqpClient{base}, nil
	}
}

// clientBase is what every protocol's client needs.
type clientBase struct {
	addr, host, user, pass string
	o                      *Options
}

// Grace is how long past o.Duration plus o.Drain a run may take to stop
// when something is stuck (sends that never complete, a broker that
// stopped answering): then it closes every connection and returns what
// it measured.
const Grace = 5 * time.Second

// ErrInterrupted is returned, along with the figures so far, by a run
// whose context ended (a signal).
var ErrInterrupted = errors.New("interrupted")

// ErrStuck is returned, along with the figures so far, by a run that had
// to be stopped: sends still under way past o.Duration + o.Drain + Grace,
// or (with o.Count and no o.Duration) no progress for o.Drain + Grace
// or more.
var ErrStuck = errors.New("stopped: no progress")

// Run runs one benchmark: it connects the consumers, then the producers,
// sends for o.Duration or o.Count messages, waits up to o.Drain for the
// messages still outstanding and returns the figures. It fails on the
// first connection or protocol error. A run always ends: sends still
// under way Grace after o.Duration + o.Drain are abandoned (ErrStuck),
// and when ctx ends (ErrInterrupted) it stops at once; either way the
// Result holds what was measured so far and says why it stopped.
func Run(ctx context.Context, o Options) (Result, error) {
	if err := o.Normalize(); err != nil {
		return Result{}, err
	}
	// base is set before any consumer exists: receive-only runs get
	// deliveries at once.
	r := &run{o: o, failed: make(chan struct{}), base: time.Now()}
	cl, err := o.newClient(r.fail)
	if err != nil {
		return Result{}, err
	}
	ioCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()

	var recvs []receiver
	var sends []sender
	var teardownOnce sync.Once
	teardown := func() {
		teardownOnce.Do(func() {
			r.tearing.Store(true)
			cancel()
			var wg sync.WaitGroup
			for _, s := range sends {
				wg.Go(s.close)
			}
			for _, c := range recvs {
				wg.Go(c.close)
			}
			wg.Wait()
		})
	}
	defer teardown()
	for i := range o.Consumers {
		c, err := cl.receiver(ctx, i, r.deliver, r.fail)
		if err != nil {
			return Result{}, fmt.Errorf("consumer %d: %w", i+1, err)
		}
		recvs = append(recvs, c)
	}
	for i := range o.Producers {
		s, err := cl.sender(ctx, i)
		if err != nil {
			return Result{}, fmt.Errorf("producer %d: %w", i+1, err)
		}
		sends = append(sends, s)
	}

	perSend := int64(1)
	if cl.fanout() {
		perSend = int64(o.Consumers)
	}
	if o.Consumers == 0 {
		perSend = 0
	}

	// Sending phase. Sends under way when it ends complete under ioCtx,
	// which only teardown cancels, so that every message sent is counted.
	sendStart := time.Now()
	sendCtx, stopSending := context.WithCancel(ctx)
	if o.Duration > 0 {
		sendCtx, stopSending = context.WithTimeout(ctx, o.Duration)
	}
	defer stopSending()
	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go r.progress(perSend, stopProgress, progressDone)
	var stopProgressOnce sync.Once
	endProgress := func() {
		stopProgressOnce.Do(func() { close(stopProgress) })
		<-progressDone
	}
	defer endProgress()

	// The hard deadline: with a Duration, sending and draining end by
	// Duration + Drain + Grace whatever happens; with a Count alone,
	// Drain + Grace without progress ends the run.
	var hard <-chan time.Time
	if o.Duration > 0 {
		t := time.NewTimer(o.Duration + o.Drain + Grace)
		defer t.Stop()
		hard = t.C
	}
	stall := time.NewTicker(o.Drain + Grace)
	defer stall.Stop()
	lastProgress := int64(-1)
	stalled := func() bool {
		if o.Duration > 0 {
			return false
		}
		n := r.sent.Load() + r.received.Load() + r.confirmed.Load()
		if n == lastProgress {
			return true
		}
		lastProgress = n
		return false
	}

	var sendTime time.Duration
	stopped := ""
	result := func(expected int64) Result {
		elapsed := time.Since(r.base)
		endProgress()
		res := Result{
			Protocol:    o.Protocol,
			URL:         redact(o.URL),
			Destination: o.Destination,
			Producers:   o.Producers,
			Consumers:   o.Consumers,
			Size:        o.Size,
			Durable:     o.Durable,
			Rate:        o.Rate,
			Window:      o.Window,
			SendS:       sendTime.Seconds(),
			ElapsedS:    elapsed.Seconds(),
			Sent:        r.sent.Load(),
			Confirmed:   r.confirmed.Load(),
			Received:    r.received.Load(),
			Expected:    expected,
			E2E:         Summarize(r.e2e.Snapshot()),
			Confirm:     Summarize(r.conf.Snapshot()),
			Stopped:     stopped,
		}
		if sendTime > 0 {
			res.SendRate = float64(res.Sent) / sendTime.Seconds()
		}
		if last := time.Duration(r.lastRecv.Load()); last > 0 {
			res.ReceiveRate = float64(res.Received) / last.Seconds()
			res.MBps = res.ReceiveRate * float64(o.Size) / 1e6
		}
		return res
	}
	expected := func() int64 {
		if o.ReceiveOnly {
			return o.Count
		}
		return r.sent.Load() * perSend
	}
	// abort stops a run that cannot finish: it closes every connection,
	// which makes the sends still blocked return, waits a little for
	// them, and returns the figures so far.
	abort := func(why string, err error, sendersDone <-chan struct{}) (Result, error) {
		stopSending()
		if sendTime == 0 {
			sendTime = time.Since(sendStart)
		}
		stopped = why
		for _, s := range sends {
			s.abort()
		}
		for _, c := range recvs {
			c.abort()
		}
		teardown()
		if sendersDone != nil {
			waitWithin(sendersDone, closeTimeout)
		}
		return result(expected()), err
	}

	var wg sync.WaitGroup
	for _, s := range sends {
		for range o.Window {
			wg.Go(func() { r.sendLoop(sendCtx, ioCtx, s) })
		}
	}
	sendersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(sendersDone)
	}()
wait:
	for {
		select {
		case <-sendersDone:
			break wait
		case <-r.failed:
			stopSending()
			teardown()
			return Result{}, r.failErr
		case <-ctx.Done():
			return abort("interrupted", fmt.Errorf("%w: %w", ErrInterrupted, context.Cause(ctx)), sendersDone)
		case <-hard:
			return abort("deadline", fmt.Errorf("%w: sends still under way %v after the sending time and the drain", ErrStuck, Grace), sendersDone)
		case <-stall.C:
			if stalled() {
				return abort("stalled", fmt.Errorf("%w: nothing sent or received for %v", ErrStuck, o.Drain+Grace), sendersDone)
			}
		}
	}
	sendTime = time.Since(sendStart)
	stopSending()
	select {
	case <-r.failed:
		return Result{}, r.failErr
	default:
	}

	// Drain. Receive-only runs wait for Count, until Drain passes with
	// nothing received.
	deadline := time.Now().Add(o.Drain)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for last := r.received.Load(); last < expected() && time.Now().Before(deadline); {
		if n := r.received.Load(); o.ReceiveOnly && n != last {
			last = n
			deadline = time.Now().Add(o.Drain)
		}
		select {
		case <-tick.C:
		case <-r.failed:
			return Result{}, r.failErr
		case <-ctx.Done():
			return abort("interrupted", fmt.Errorf("%w: %w", ErrInterrupted, context.Cause(ctx)), nil)
		}
	}
	return result(expected()), nil
}

// sendLoop is one of a producer's Window senders: it claims message
// slots, paces them to the rate and sends until ctx ends or Count is
// reached. A send under way when ctx ends completes under ioCtx, so that
// every message sent is counted.
func (r *run) sendLoop(ctx, ioCtx context.Context, s sender) {
	body := make([]byte, r.o.Size)
	for ctx.Err() == nil {
		n := r.claimed.Add(1)
		if r.o.Count > 0 && n > r.o.Count {
			return
		}
		if r.o.Rate > 0 {
			due := r.base.Add(time.Duration(float64(n-1) / r.o.Rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
			}
		}
		start := time.Since(r.base)
		PutStamp(body, max(start, 1))
		if err := s.send(ioCtx, body); err != nil {
			if ioCtx.Err() != nil {
				return
			}
			r.fail(fmt.Errorf("send: %w", err))
			return
		}
		r.sent.Add(1)
		if r.o.Durable {
			r.confirmed.Add(1)
			r.conf.Record(time.Since(r.base) - start)
		}
	}
}

// progress reports to o.Progress until stop is closed.
func (r *run) progress(perSend int64, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	if r.o.Progress == nil {
		return
	}
	t := time.NewTicker(r.o.ProgressInterval)
	defer t.Stop()
	var lastS, lastR int64
	last := time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			s, rc := r.sent.Load(), r.received.Load()
			dt := now.Sub(last).Seconds()
			r.o.Progress(Progress{
				Elapsed:     time.Since(r.base),
				Sent:        s,
				Received:    rc,
				SendRate:    float64(s-lastS) / dt,
				ReceiveRate: float64(rc-lastR) / dt,
				Backlog:     max(s*perSend-rc, 0),
			})
			lastS, lastR, last = s, rc, now
		}
	}
}

// redact drops the password from a URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"
)

// The shared-store failover test runs two broker processes on one data
// directory, kills the live one with SIGKILL while producers of every
// protocol (STOMP, MQTT, AMQP) send durable messages, each listing both
// brokers, and a STOMP consumer acknowledges them; the backup takes
// over; every client reconnects and goes on. It counts with the crash
// test's ledger:
//
//	lost            confirmed, never delivered
//	unexpected      delivered but never sent
//	corrupt         delivered with a body that is not what was sent
//	unflagged       delivered again without redelivered:true
//	not redelivered confirmed and left unacknowledged on the killed
//	                broker, never delivered again by the new one
//
// (A broker may deliver a durable message before the sync that confirms
// it; one killed in between neither confirms nor keeps it, so only
// confirmed messages count.)
//
// All must be zero. Each round the killed broker restarts and becomes
// the backup of the next. Rounds come from JUNCTION_HA_ROUNDS (default
// 2; `make ha-test ROUNDS=N`).

const (
	haQueue     = "ha.q"
	backupMsg   = "junction started as a backup: no messaging listener until it holds the store lock"
	takeoverMsg = "took over the shared store: live"
)

var haProtocols = []string{"stomp", "mqtt", "amqp"}

// haLedger is one round's account of every message.
type haLedger struct {
	mu          sync.Mutex
	newLive     map[string]bool   // the backup's addresses, set at the kill
	sent        map[string]string // key → body
	confirmed   map[string]bool
	after       map[string]int // confirmations after the kill, by protocol
	deliveries  map[string]int
	held        map[string]bool // left unacknowledged on the killed broker
	lastDeliver time.Time
	firstAfter  time.Time // first confirmation after the kill

	unexpected, corrupt, unflagged int
}

func newHALedger() *haLedger {
	return &haLedger{sent: map[string]string{}, confirmed: map[string]bool{}, after: map[string]int{},
		deliveries: map[string]int{}, held: map[string]bool{}}
}

func (l *haLedger) send(key, body string) {
	l.mu.Lock()
	l.sent[key] = body
	l.mu.Unlock()
}

// confirm records a confirmation by the broker at addr.
func (l *haLedger) confirm(key, proto, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.confirmed[key] = true
	if l.newLive[addr] {
		if l.firstAfter.IsZero() {
			l.firstAfter = time.Now()
		}
		l.after[proto]++
	}
}

func (l *haLedger) confirmations(proto string) (total, after int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.confirmed {
		if strings.HasPrefix(k, proto+":") {
			total++
		}
	}
	return total, l.after[proto]
}

// deliver records a delivery and checks it.
func (l *haLedger) deliver(body []byte, redelivered bool) (key string, seq int) {
	key, seq, ok := haKey(body)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastDeliver = time.Now()
	want, wasSent := l.sent[key]
	switch {
	case !ok || !wasSent:
		l.unexpected++
		return key, seq
	case string(body) != want:
		l.corrupt++
	}
	if l.deliveries[key] > 0 && !redelivered {
		l.unflagged++
	}
	l.deliveries[key]++
	return key, seq
}

// haBody is crashBody with the protocol in the key, so the ledger can
// tell each protocol's confirmations apart.
func haBody(proto string, id, seq int) (key, body string) {
	body = proto + ":" + crashBody(id, seq)
	key, _, _ = haKey([]byte(body))
	return key, body
}

// haKey is the key of a haBody ("stomp:3-41") and its sequence number.
func haKey(body []byte) (key string, seq int, ok bool) {
	proto, rest, found := strings.Cut(string(body), ":")
	if !found {
		return "", 0, false
	}
	k, _, seq, ok := crashKey([]byte(rest))
	return proto + ":" + k, seq, ok
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// failoverDial tries each address in turn until dial succeeds, stop is
// closed, or a minute passes.
func failoverDial[C any](addrs []string, stop <-chan struct{}, dial func(addr string) (C, error)) (C, bool) {
	var zero C
	deadline := time.Now().Add(time.Minute)
	for i := 0; time.Now().Before(deadline); i++ {
		if stopped(stop) {
			return zero, false
		}
		c, err := dial(addrs[i%len(addrs)])
		if err == nil {
			return c, true
		}
		if i%len(addrs) == len(addrs)-1 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return zero, false
}

func stompProducer(id int, addrs []string, led *haLedger, stop <-chan struct{}) {
	var conn *gostomp.Conn
	var addr string
	defer func() {
		if conn != nil {
			conn.MustDisconnect()
		}
	}()
	for seq := 0; !stopped(stop); seq++ {
		if conn == nil {
			var ok bool
			if conn, ok = failoverDial(addrs, stop, func(a string) (*gostomp.Conn, error) {
				addr = a
				return gostomp.Dial("tcp", a, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
			}); !ok {
				return
			}
		}
		key, body := haBody("stomp", id, seq)
		led.send(key, body)
		err := conn.Send("/queue/"+haQueue, "text/plain", []byte(body), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true"))
		if err != nil {
			conn.MustDisconnect() // this one is unconfirmed; the next goes to whichever broker answers
			conn = nil
			continue
		}
		led.confirm(key, "stomp", addr)
	}
}

// mqttProducer lists both brokers in one paho client (paho tries them in
// order on Connect); it reconnects itself, with a new client, so that a
// publish is never resent under the same key.
func mqttProducer(id int, addrs []string, led *haLedger, stop <-chan struct{}) {
	var c paho.Client
	var mu sync.Mutex
	var addr string // the broker of the last connection attempt: the connected one once Connect succeeds
	defer func() {
		if c != nil {
			c.Disconnect(0)
		}
	}()
	for seq := 0; !stopped(stop); seq++ {
		if c == nil {
			var ok bool
			if c, ok = failoverDial([]string{"all"}, stop, func(string) (paho.Client, error) {
				o := paho.NewClientOptions().SetClientID(fmt.Sprintf("ha-pub-%d", id)).SetCleanSession(true).
					SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(2 * time.Second).SetWriteTimeout(5 * time.Second).
					SetConnectionAttemptHandler(func(u *url.URL, tc *tls.Config) *tls.Config {
						mu.Lock()
						addr = u.Host
						mu.Unlock()
						return tc
					})
				for _, a := range addrs {
					o.AddBroker("tcp://" + a)
				}
				c := paho.NewClient(o)
				tok := c.Connect()
				if !tok.WaitTimeout(5 * time.Second) {
					c.Disconnect(0)
					return nil, fmt.Errorf("connect: timeout")
				}
				return c, tok.Error()
			}); !ok {
				return
			}
		}
		key, body := haBody("mqtt", id, seq)
		led.send(key, body)
		tok := c.Publish("ha/q", 1, false, body)
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			c.Disconnect(0)
			c = nil
			continue
		}
		mu.Lock()
		a := addr
		mu.Unlock()
		led.confirm(key, "mqtt", a)
	}
}

type amqpLink struct {
	c    *goamqp.Conn
	s    *goamqp.Sender
	addr string
}

func amqpProducer(id int, addrs []string, led *haLedger, stop <-chan struct{}) {
	var l *amqpLink
	defer func() {
		if l != nil {
			l.c.Close()
		}
	}()
	for seq := 0; !stopped(stop); seq++ {
		if l == nil {
			var ok bool
			if l, ok = failoverDial(addrs, stop, func(a string) (*amqpLink, error) {
				c, s, err := amqpDial(a)
				if err != nil {
					return nil, err
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				snd, err := s.NewSender(ctx, "queue://"+haQueue, nil)
				if err != nil {
					c.Close()
					return nil, err
				}
				return &amqpLink{c, snd, a}, nil
			}); !ok {
				return
			}
		}
		key, body := haBody("amqp", id, seq)
		led.send(key, body)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := l.s.Send(ctx, &goamqp.Message{Header: &goamqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte(body)}}, nil)
		cancel()
		if err != nil {
			l.c.Close()
			l = nil
			continue
		}
		led.confirm(key, "amqp", l.addr)
	}
}

// stompConsumer acknowledges everything it gets, except that on its
// first connection it leaves one delivery in twenty (at most 100)
// unacknowledged: those must come back, flagged, from the new broker.
func stompConsumer(addrs []string, led *haLedger, stop <-chan struct{}) {
	for gen := 0; !stopped(stop); gen++ {
		conn, ok := failoverDial(addrs, stop, func(a string) (*gostomp.Conn, error) {
			return gostomp.Dial("tcp", a, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
		})
		if !ok {
			return
		}
		sub, err := conn.Subscribe("/queue/"+haQueue, gostomp.AckClientIndividual, gostomp.SubscribeOpt.Header("activemq.prefetchSize", "300"))
		if err != nil {
			conn.MustDisconnect()
			continue
		}
		// go-stomp deadlocks if Ack is called from the goroutine reading
		// sub.C while deliveries are fast; a second goroutine acks.
		toAck := make(chan *gostomp.Message, 1000)
		var ackWG sync.WaitGroup
		ackWG.Add(1)
		go func() {
			defer ackWG.Done()
			for m := range toAck {
				if conn.Ack(m) != nil {
					for range toAck {
					}
					return
				}
			}
		}()
		n, held := 0, 0
	read:
		for {
			select {
			case <-stop:
				break read
			case m, ok := <-sub.C:
				if !ok || m.Err != nil {
					break read
				}
				key, _ := led.deliver(m.Body, m.Header.Get("redelivered") == "true")
				n++
				if gen == 0 && n%20 == 0 && held < 100 {
					held++
					led.mu.Lock()
					led.held[key] = true
					led.mu.Unlock()
					continue
				}
				toAck <- m
			}
		}
		close(toAck)
		ackWG.Wait()
		conn.MustDisconnect()
	}
}

// waitUntil polls cond every 20 ms until it holds or d passes.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

func haConfigFile(t *testing.T) string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "ha.yaml")
	// Small journal files roll and are reused within a round; a third of
	// the bodies are large messages (files of their own).
	cfg := "persistence:\n  journal-file-size: 256KiB\n  journal-min-files: 1\n  journal-pool-files: 2\n  large-message-threshold: 2KiB\n"
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return conf
}

func TestHAKill9Failover(t *testing.T) {
	if testing.Short() && os.Getenv("JUNCTION_HA_ROUNDS") == "" {
		t.Skip("HA failover test skipped in -short mode")
	}
	rounds := haRounds(t)
	bin := buildBinary(t)
	dir := filepath.Join(t.TempDir(), "data")
	slots := newSlots(t)
	extra := []string{"--config", haConfigFile(t), "--ha-lock-poll", "100ms"}
	var procs [2]*haProc
	procs[0] = startHAProc(t, bin, dir, slots[0], extra...)
	procs[0].await(t, "junction started", 30*time.Second)
	createQueue(t, slots[0].console, haQueue)
	procs[1] = startHAProc(t, bin, dir, slots[1], extra...)
	procs[1].await(t, backupMsg, 30*time.Second)

	var takeovers []time.Duration
	var confirmed, delivered int
	for round := range rounds {
		live := round % 2
		c, d, took := haRound(t, round, procs, live, slots)
		confirmed += c
		delivered += d
		takeovers = append(takeovers, took)
		// The killed broker comes back as the next round's backup.
		procs[live] = startHAProc(t, bin, dir, slots[live], extra...)
		procs[live].await(t, backupMsg, 30*time.Second)
	}
	for _, p := range procs {
		p.terminate(t)
	}
	sort.Slice(takeovers, func(i, j int) bool { return takeovers[i] < takeovers[j] })
	t.Logf("%d rounds: %d confirmed, %d deliveries; lost=0 unexpected=0 corrupt=0 unflagged=0 not-redelivered=0; "+
		"kill -9 to the first confirmation by the new live broker: median %v, max %v",
		rounds, confirmed, delivered, takeovers[len(takeovers)/2], takeovers[len(takeovers)-1])
}

// haRound runs one round with procs[live] live and the other the backup.
func haRound(t *testing.T, round int, procs [2]*haProc, live int, slots [2]haSlot) (confirmed, delivered int, took time.Duration) {
	t.Helper()
	backup := procs[1-live]
	// A backup opens no messaging listener, however long it waits.
	if open := accepting(backup.slot.messaging()...); len(open) > 0 {
		t.Fatalf("round %d: the backup accepts connections on %v", round, open)
	}
	if code, body := httpGet(t, "http://"+backup.slot.console+"/readyz"); code != 503 || !strings.HasPrefix(body, "backup, waiting for the store lock held since ") {
		t.Fatalf("round %d: backup's /readyz: %d %q", round, code, body)
	}
	addrsOf := func(pick func(haSlot) string) []string {
		// Each client lists the live broker first in odd rounds and the
		// backup first in even ones: failover works from either end.
		a := []string{pick(slots[0]), pick(slots[1])}
		if round%2 == 1 {
			a[0], a[1] = a[1], a[0]
		}
		return a
	}
	stompAddrs := addrsOf(func(s haSlot) string { return s.stomp })
	led := newHALedger()
	stopProducers, stopConsumer := make(chan struct{}), make(chan struct{})
	var producers, consumer sync.WaitGroup
	consumer.Add(1)
	go func() { defer consumer.Done(); stompConsumer(stompAddrs, led, stopConsumer) }()
	for i := range 2 {
		id := round*10 + i
		producers.Add(3)
		go func() { defer producers.Done(); stompProducer(id, stompAddrs, led, stopProducers) }()
		go func() {
			defer producers.Done()
			mqttProducer(id, addrsOf(func(s haSlot) string { return s.mqtt }), led, stopProducers)
		}()
		go func() {
			defer producers.Done()
			amqpProducer(id, addrsOf(func(s haSlot) string { return s.amqp }), led, stopProducers)
		}()
	}
	fail := func(format string, args ...any) {
		close(stopProducers)
		close(stopConsumer)
		producers.Wait()
		consumer.Wait()
		t.Fatalf("round %d: "+format+"\nnew live broker's log:\n%s", append([]any{round}, append(args, backup.log)...)...)
	}
	if !waitUntil(30*time.Second, func() bool {
		for _, p := range haProtocols {
			if n, _ := led.confirmations(p); n == 0 {
				return false
			}
		}
		led.mu.Lock()
		defer led.mu.Unlock()
		for k := range led.held {
			if led.confirmed[k] {
				return true
			}
		}
		return false
	}) {
		fail("not every protocol had a message confirmed, or none was held unacknowledged, before the kill")
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(round)))
	time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)

	led.mu.Lock()
	led.newLive = map[string]bool{}
	for _, a := range backup.slot.messaging() {
		led.newLive[a] = true
	}
	led.mu.Unlock()
	killedAt := time.Now()
	procs[live].kill9()
	backup.await(t, takeoverMsg, 30*time.Second)
	// The clients reconnect and go on.
	if !waitUntil(60*time.Second, func() bool {
		for _, p := range haProtocols {
			if _, after := led.confirmations(p); after < 20 {
				return false
			}
		}
		return true
	}) {
		fail("not every protocol went on after the takeover: %v", led.after)
	}
	led.mu.Lock()
	took = led.firstAfter.Sub(killedAt)
	led.mu.Unlock()
	close(stopProducers)
	producers.Wait()

	// Drain: everything confirmed is delivered, the held messages again.
	drained := func() bool {
		led.mu.Lock()
		defer led.mu.Unlock()
		for k := range led.confirmed {
			if led.deliveries[k] == 0 {
				return false
			}
		}
		for k := range led.held {
			if led.confirmed[k] && led.deliveries[k] < 2 {
				return false
			}
		}
		return time.Since(led.lastDeliver) > time.Second
	}
	waitUntil(60*time.Second, drained)
	close(stopConsumer)
	consumer.Wait()

	led.mu.Lock()
	defer led.mu.Unlock()
	var lost, notRedelivered int
	for k := range led.confirmed {
		if led.deliveries[k] == 0 {
			lost++
		}
	}
	held := 0
	for k := range led.held {
		if !led.confirmed[k] {
			continue
		}
		held++
		if led.deliveries[k] < 2 {
			notRedelivered++
		}
	}
	for _, n := range led.deliveries {
		delivered += n
	}
	t.Logf("round %d: %d sent, %d confirmed (%v by the new live broker), %d deliveries, %d confirmed messages held unacked at the kill; "+
		"first confirmation by the new live broker %v after the kill; its lock to ready %vms",
		round, len(led.sent), len(led.confirmed), led.after, delivered, held, took.Round(time.Millisecond), backup.log.find(takeoverMsg)["lock_to_ready"])
	if lost+led.unexpected+led.corrupt+led.unflagged+notRedelivered > 0 {
		t.Fatalf("round %d: lost=%d unexpected=%d corrupt=%d unflagged=%d not-redelivered=%d\nnew live broker's log:\n%s",
			round, lost, led.unexpected, led.corrupt, led.unflagged, notRedelivered, backup.log)
	}
	if held == 0 {
		t.Fatalf("round %d: no confirmed message was left unacknowledged at the kill; the test proved nothing about redelivery", round)
	}
	return len(led.confirmed), delivered, took
}

// SIGSTOP keeps the live broker's lock: the backup stays a backup, and
// after SIGCONT the live broker carries on. The live broker checks the
// store without pause (interval 1 ms), so a check is usually in flight
// when the process is stopped, and its deadline (1 s) has passed when
// the process runs again: the check's own result must decide, not the
// overdue timer. Several stops make that case all but certain.
func TestHASigstopKeepsTheLock(t *testing.T) {
	if testing.Short() {
		t.Skip("HA process test skipped in -short mode")
	}
	bin := buildBinary(t)
	dir := filepath.Join(t.TempDir(), "data")
	slots := newSlots(t)
	a := startHAProc(t, bin, dir, slots[0], "--ha-check-interval", "1ms", "--ha-check-timeout", "1s")
	a.await(t, "junction started", 30*time.Second)
	b := startHAProc(t, bin, dir, slots[1], "--ha-lock-poll", "100ms")
	b.await(t, backupMsg, 30*time.Second)
	stompSend(t, slots[0].stomp, "/queue/ha.stop", "before the stops")

	for stop := range 4 {
		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		pause := time.Now()
		for time.Since(pause) < 1500*time.Millisecond { // 15 poll intervals of the backup
			if open := accepting(slots[1].messaging()...); len(open) > 0 {
				t.Fatalf("stop %d: the backup opened %v while the live broker was stopped", stop, open)
			}
			if code, _ := httpGet(t, "http://"+slots[1].console+"/readyz"); code != 503 {
				t.Fatalf("stop %d: backup's /readyz %d while the live broker was stopped", stop, code)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// Running again for a while: hundreds of checks.
		select {
		case <-a.done:
			t.Fatalf("stop %d: the live broker exited after SIGCONT (%v):\n%s", stop, a.err, a.log)
		case <-time.After(300 * time.Millisecond):
		}
	}
	stompSend(t, slots[0].stomp, "/queue/ha.stop", "after the stops")
	stompReceive(t, slots[0].stomp, "/queue/ha.stop", "before the stops", "after the stops")
	if ev := a.log.find("lost the shared store: writing nothing more, closing the listeners and exiting"); ev != nil {
		t.Fatalf("the live broker judged the store lost: %v", ev["error"])
	}
	if b.log.find(takeoverMsg) != nil || len(accepting(slots[1].messaging()...)) > 0 {
		t.Fatalf("the backup took over:\n%s", b.log)
	}
	a.terminate(t)
	b.await(t, takeoverMsg, 30*time.Second)
	b.terminate(t)
}

// A live broker whose lock file is replaced exits non-zero; the backup,
// which can then lock the new file, still waits for the journals until
// the old broker is gone, and only then takes over.
func TestHALostLockExitsBeforeTheBackupTakesOver(t *testing.T) {
	if testing.Short() {
		t.Skip("HA process test skipped in -short mode")
	}
	bin := buildBinary(t)
	dir := filepath.Join(t.TempDir(), "data")
	slots := newSlots(t)
	a := startHAProc(t, bin, dir, slots[0], "--ha-check-interval", "200ms")
	a.await(t, "junction started", 30*time.Second)
	b := startHAProc(t, bin, dir, slots[1], "--ha-lock-poll", "20ms")
	b.await(t, backupMsg, 30*time.Second)
	stompSend(t, slots[0].stomp, "/queue/ha.lost", "confirmed before the loss")

	replaceFile(t, filepath.Join(dir, "ha.lock"))
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the broker whose lock file was replaced kept running:\n%s", a.log)
	}
	exitedAt := time.Now()
	if ee, ok := a.err.(interface{ ExitCode() int }); !ok || ee.ExitCode() == 0 {
		t.Fatalf("exit status %v, want non-zero", a.err)
	}
	if a.log.find("lost the shared store: writing nothing more, closing the listeners and exiting") == nil ||
		!strings.Contains(a.log.String(), "ha.lock was replaced by another file") {
		t.Fatalf("the log does not say why:\n%s", a.log)
	}
	b.await(t, takeoverMsg, 30*time.Second)
	if took := b.log.find(takeoverMsg); took != nil {
		if ts, err := time.Parse(time.RFC3339, fmt.Sprint(took["time"])); err == nil && ts.Before(exitedAt.Add(-time.Second).Truncate(time.Second)) {
			t.Fatalf("the backup took over at %v, before the old broker exited at %v", ts, exitedAt)
		}
	}
	stompReceive(t, slots[1].stomp, "/queue/ha.lost", "confirmed before the loss")
	b.terminate(t)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	paho "github.com/eclipse/paho.mqtt.golang"
	gostomp "github.com/go-stomp/stomp/v3"
)

// kill -HUP reloads a broker without TLS; it never stops it, and its
// clients stay connected.
func TestSIGHUPDoesNotStopTheBroker(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "junction.yaml")
	if err := os.WriteFile(file, []byte("log-level: info\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, bin, filepath.Join(dir, "data"), file, &journalEvents{})
	defer p.stop(t)
	c, err := gostomp.Dial("tcp", p.addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	sub, err := c.Subscribe("/queue/hup", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for strings.Count(p.log(), "configuration reloaded") <= i {
			if time.Now().After(deadline) {
				t.Fatalf("no reload logged after SIGHUP %d:\n%s", i+1, p.log())
			}
			select {
			case <-p.done:
				t.Fatalf("SIGHUP %d stopped the broker:\n%s", i+1, p.log())
			case <-time.After(20 * time.Millisecond):
			}
		}
		if err := c.Send("/queue/hup", "text/plain", []byte(fmt.Sprint(i)), gostomp.SendOpt.Receipt); err != nil {
			t.Fatalf("after SIGHUP %d: %v", i+1, err)
		}
		select {
		case m := <-sub.C:
			if m.Err != nil || string(m.Body) != fmt.Sprint(i) {
				t.Fatalf("after SIGHUP %d: %v %q", i+1, m.Err, m.Body)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no message after SIGHUP %d", i+1)
		}
	}
}

// syncBuffer is a log sink tests read while the broker writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// load keeps STOMP, MQTT and AMQP clients sending and receiving on the
// connections they opened first; every error is kept.
type load struct {
	stop               chan struct{}
	pwg, wg            sync.WaitGroup  // producers, consumers
	sent, got          [3]atomic.Int64 // stomp, mqtt, amqp
	errMu              sync.Mutex
	errs               []error
	closeFns           []func()
	stompAddr, amqpURL string
}

func (l *load) fail(err error) {
	l.errMu.Lock()
	l.errs = append(l.errs, err)
	l.errMu.Unlock()
}

func startLoad(t *testing.T, in *instance) *load {
	t.Helper()
	l := &load{stop: make(chan struct{})}
	const maxIter = 200000
	// STOMP: a producer with receipts, a consumer.
	sp, err := gostomp.Dial("tcp", in.addrs["stomp"].String(), gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := gostomp.Dial("tcp", in.addrs["stomp"].String(), gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := sc.Subscribe("/queue/load", gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	l.closeFns = append(l.closeFns, func() { sp.Disconnect() }, func() { sc.Disconnect() })
	l.pwg.Add(1)
	l.wg.Add(1)
	go func() {
		defer l.pwg.Done()
		for i := 0; i < maxIter; i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			if err := sp.Send("/queue/load", "text/plain", []byte("s"), gostomp.SendOpt.Receipt); err != nil {
				l.fail(fmt.Errorf("stomp send: %w", err))
				return
			}
			l.sent[0].Add(1)
		}
	}()
	go func() {
		defer l.wg.Done()
		for m := range sub.C {
			if m.Err != nil {
				select {
				case <-l.stop:
				default:
					l.fail(fmt.Errorf("stomp receive: %w", m.Err))
				}
				return
			}
			l.got[0].Add(1)
		}
	}()
	// MQTT: one client publishing QoS 1 to a topic it subscribes to.
	mq := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + in.addrs["mqtt"].String()).SetClientID("load").
		SetAutoReconnect(false).SetConnectionLostHandler(func(_ paho.Client, err error) { l.fail(fmt.Errorf("mqtt lost: %w", err)) }))
	if tok := mq.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt connect: %v", tok.Error())
	}
	if tok := mq.Subscribe("load/mqtt", 1, func(paho.Client, paho.Message) { l.got[1].Add(1) }); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt subscribe: %v", tok.Error())
	}
	l.closeFns = append(l.closeFns, func() { mq.Disconnect(100) })
	l.pwg.Add(1)
	go func() {
		defer l.pwg.Done()
		for i := 0; i < maxIter; i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			tok := mq.Publish("load/mqtt", 1, false, "m")
			if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				l.fail(fmt.Errorf("mqtt publish: %v", tok.Error()))
				return
			}
			l.sent[1].Add(1)
		}
	}()
	// AMQP: a sender and a receiver on one connection.
	ctx := context.Background()
	ac, err := goamqp.Dial(ctx, "amqp://"+in.addrs["amqp"].String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	as, err := ac.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := as.NewSender(ctx, "queue://load.amqp", nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := as.NewReceiver(ctx, "queue://load.amqp", nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	l.closeFns = append(l.closeFns, rcancel, func() { ac.Close() })
	l.pwg.Add(1)
	l.wg.Add(1)
	go func() {
		defer l.pwg.Done()
		for i := 0; i < maxIter; i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			if err := snd.Send(ctx, &goamqp.Message{Value: "a"}, nil); err != nil {
				l.fail(fmt.Errorf("amqp send: %w", err))
				return
			}
			l.sent[2].Add(1)
		}
	}()
	go func() {
		defer l.wg.Done()
		for {
			m, err := rcv.Receive(rctx, nil)
			if err != nil {
				if rctx.Err() == nil {
					l.fail(fmt.Errorf("amqp receive: %w", err))
				}
				return
			}
			rcv.AcceptMessage(rctx, m)
			l.got[2].Add(1)
		}
	}()
	return l
}

// finish stops the producers, waits for the consumers to have every
// message, and reports what went wrong.
func (l *load) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.pwg.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for i, name := range []string{"stomp", "mqtt", "amqp"} {
		for l.got[i].Load() < l.sent[i].Load() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if g, s := l.got[i].Load(), l.sent[i].Load(); g < s || s == 0 {
			t.Errorf("%s: %d sent, %d received", name, s, g)
		} else {
			t.Logf("%s: %d messages through one connection during the reloads", name, s)
		}
	}
	for _, f := range l.closeFns {
		f()
	}
	l.wg.Wait()
	l.errMu.Lock()
	defer l.errMu.Unlock()
	for _, err := range l.errs {
		t.Errorf("load: %v", err)
	}
}

// Each reloadable setting, reloaded by SIGHUP, the watched file, the API
// and junction config reload while STOMP, MQTT and AMQP clients send and
// receive: each takes effect, none of their connections drops, and what
// needs a restart is reported by name.
func TestLiveReloadUnderLoad(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "junction.yaml")
	// conf writes the file: the level, the security settings (with a
	// rule for secret.# or not), STOMP's max-frame-size, and the rest.
	conf := func(level string, secret bool, frame, extra string) {
		t.Helper()
		sec := ""
		if secret {
			sec = "  - match: \"secret.#\"\n    permissions: {consume: [anonymous]}\n"
		}
		y := fmt.Sprintf(`data-dir: %s
log-level: %s
log-format: json
config-watch-interval: 100ms
stomp: {listen: "127.0.0.1:0", heart-beat-min: 0s, max-frame-size: %s}
mqtt: {listen: "127.0.0.1:0"}
amqp: {listen: "127.0.0.1:0"}
websocket: {listen: ""}
all: {listen: "127.0.0.1:0"}
console: {listen: "127.0.0.1:0"}
security-settings:
%s  - match: "#"
    permissions: {send: [anonymous], consume: [anonymous], browse: [anonymous], createAddress: [anonymous], createDurableQueue: [anonymous], deleteDurableQueue: [anonymous], createNonDurableQueue: [anonymous], deleteAddress: [anonymous], manage: [anonymous]}
%s`, filepath.Join(dir, "data"), level, frame, sec, extra)
		// Written aside and renamed, as editors and deployment tools do.
		if err := os.WriteFile(file+".new", []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
	}
	conf("info", false, "10MiB", "")
	cfg, err := loadConfig([]string{"--config", file}, noEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *instance, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, logs, func(in *instance) { ready <- in }) }()
	var in *instance
	select {
	case in = <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	defer func() {
		cancel()
		<-done
	}()
	console := in.addrs["console"].String()
	seen := 0 // reloads looked at
	recent := func() []ReloadResult {
		in.live.mu.Lock()
		defer in.live.mu.Unlock()
		return slices.Clone(in.live.recent)
	}
	// waitApplied waits for a reload since the last call that applied
	// path (the watcher and an explicit trigger may both reload).
	waitApplied := func(path string) ReloadResult {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			rs := recent()
			for i := seen; i < len(rs); i++ {
				for _, p := range rs[i].Applied {
					if p == path || strings.HasPrefix(p, path+".") {
						seen = i
						return rs[i]
					}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not applied; reloads %+v", path, rs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// stompTry opens a connection of its own and sends with a receipt.
	stompTry := func(addr, dest string) error {
		c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
		if err != nil {
			return err
		}
		err = c.Send(dest, "text/plain", []byte(strings.Repeat("x", 100)), gostomp.SendOpt.Receipt)
		if err != nil {
			c.MustDisconnect() // refused: the broker closes after its ERROR
			return err
		}
		return c.Disconnect()
	}
	stompAddr := in.addrs["stomp"].String()
	if err := stompTry(stompAddr, "/queue/limited"); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	l := startLoad(t, in)
	time.Sleep(200 * time.Millisecond)

	t.Logf("%v: %s", time.Since(began).Round(time.Millisecond), "log-level")
	// 1. log-level, by SIGHUP: a new connection's debug line appears.
	opened := func() int { return strings.Count(logs.String(), "stomp connection open") }
	before := opened()
	stompTry(stompAddr, "/queue/probe")
	if opened() != before {
		t.Fatal("debug line at info level")
	}
	conf("debug", false, "10MiB", "")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitApplied("log-level")
	stompTry(stompAddr, "/queue/probe")
	if opened() == before {
		t.Fatal("no debug line after log-level: debug")
	}

	t.Logf("%v: %s", time.Since(began).Round(time.Millisecond), "address-settings")
	// 2. address-settings, by the watched file: the existing queue
	// "limited" gets a 10-byte limit and FAIL.
	const limited = "address-settings:\n  - {match: limited, max-size-bytes: 10, address-full-policy: FAIL}\n"
	conf("debug", false, "10MiB", limited)
	waitApplied("address-settings")
	body, _ := json.Marshal(map[string]any{"address": "limited", "routingType": "anycast", "body": "over"})
	res, err := http.Post("http://"+console+"/api/v1/send", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusConflict {
		t.Fatalf("send to a queue over its reloaded limit: %d, want 409", res.StatusCode)
	}

	t.Logf("%v: %s", time.Since(began).Round(time.Millisecond), "security-settings")
	// 3. security-settings, by the API: nobody may send to secret.#.
	conf("debug", true, "10MiB", limited)
	res, err = http.Post("http://"+console+"/api/v1/config/reload", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	var rr ReloadResult
	json.NewDecoder(res.Body).Decode(&rr)
	res.Body.Close()
	waitApplied("security-settings")
	if err := stompTry(stompAddr, "/queue/secret.plans"); err == nil {
		t.Fatal("send to secret.plans allowed after the reload")
	}
	if err := stompTry(stompAddr, "/queue/open"); err != nil {
		t.Fatalf("send to open refused: %v", err)
	}
	t.Logf("%v: %s", time.Since(began).Round(time.Millisecond), "max-connections and the queue quota")
	// 4. max-connections and the per-user queue quota, by junction
	// config reload: a 4th connection to the one port is refused, and
	// the anonymous user may auto-create no more queues.
	conf("debug", true, "10MiB", limited+"max-connections: 3\nlimits: {max-auto-created-queues-per-user: 1}\n")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"config", "reload", "--console", console}, noEnv, &out, &out); err != nil {
		t.Fatalf("junction config reload: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "max-connections") {
		t.Fatalf("junction config reload printed %q", out.String())
	}
	waitApplied("max-connections")
	waitApplied("limits.max-auto-created-queues-per-user")
	// admits waits until the one port admits exactly n connections at
	// once and refuses the next (closed ones leave its counts a moment
	// after their DISCONNECT).
	admits := func(what string, n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			var held []*gostomp.Conn
			refused := false
			for range n + 1 {
				c, err := gostomp.Dial("tcp", in.addrs["all"].String(), gostomp.ConnOpt.HeartBeat(0, 0), quiet)
				if err != nil {
					refused = true
					break
				}
				held = append(held, c)
			}
			for _, c := range held {
				c.Disconnect()
			}
			if refused && len(held) == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d connections held, refused %v; want %d and a refusal", what, len(held), refused, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	admits("max-connections 3", 3)
	if err := stompTry(stompAddr, "/queue/brand.new"); err == nil {
		t.Fatal("a queue auto-created past the reloaded quota")
	}

	// 4b. Per-IP limits, by the watched file: two connections from one
	// IP, then one attempt a second.
	conf("debug", true, "10MiB", limited+"limits: {max-connections-per-ip: 2}\n")
	waitApplied("limits.max-connections-per-ip")
	admits("max-connections-per-ip 2", 2)
	conf("debug", true, "10MiB", limited+"limits: {connection-rate-per-ip: 1, connection-burst-per-ip: 1}\n")
	waitApplied("limits.connection-rate-per-ip")
	time.Sleep(1100 * time.Millisecond) // one token back
	admits("connection-rate-per-ip 1, burst 1", 1)

	t.Logf("%v: %s", time.Since(began).Round(time.Millisecond), "diverts and virtual-topics")
	// 5. diverts, by SIGHUP: the load's queue is copied to load.copy;
	// a change that needs a restart is reported by name; the limits go
	// back.
	conf("debug", true, "1MiB", limited+"virtual-topics: true\ndiverts:\n  - {name: copy, address: load, forwarding-address: load.copy}\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	r := waitApplied("diverts")
	if !in.broker.VirtualTopics() {
		t.Fatal("virtual-topics not in force")
	}
	found := false
	for _, p := range r.RestartRequired {
		found = found || p == "stomp.max-frame-size"
	}
	if !found {
		t.Fatalf("stomp.max-frame-size not reported as needing a restart: %+v", r)
	}
	deadline := time.Now().Add(5 * time.Second)
	for q := in.broker.Queue("load.copy"); q == nil || q.Stats().Depth == 0; q = in.broker.Queue("load.copy") {
		if time.Now().After(deadline) {
			t.Fatal("nothing diverted to load.copy")
		}
		time.Sleep(20 * time.Millisecond)
	}

	t.Logf("%v: %s", time.Since(began).Round(time.Millisecond), "an invalid file")
	// 6. An invalid file changes nothing and says why.
	conf("loud", true, "10MiB", "")
	res, err = http.Post("http://"+console+"/api/v1/config/reload", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("invalid file: %d", res.StatusCode)
	}
	if got := in.live.inForce().LogLevel; got != "debug" {
		t.Fatalf("log level after an invalid file: %q", got)
	}

	t.Logf("%v: %s", time.Since(began).Round(time.Millisecond), "the settings in force")
	// The settings in force, through the API.
	res, err = http.Get("http://" + console + "/api/v1/config")
	if err != nil {
		t.Fatal(err)
	}
	var view struct {
		File   string
		Config map[string]any
	}
	json.NewDecoder(res.Body).Decode(&view)
	res.Body.Close()
	if view.File != file || view.Config["log-level"] != "debug" || view.Config["diverts"] == nil {
		t.Fatalf("GET /api/v1/config: %+v", view)
	}
	if st := view.Config["stomp"].(map[string]any); st["max-frame-size"] == float64(1<<20) {
		t.Fatal("a restart-only setting shown as in force")
	}
	l.finish(t)

	// anonymous-roles, once the load is over (its clients are
	// anonymous): with a role no setting names, an anonymous client may
	// not send.
	if err := stompTry(stompAddr, "/queue/open"); err != nil {
		t.Fatal(err)
	}
	conf("debug", false, "10MiB", "anonymous-roles: [nobody]\n")
	waitApplied("anonymous-roles")
	if err := stompTry(stompAddr, "/queue/open"); err == nil {
		t.Fatal("an anonymous send allowed after anonymous-roles: [nobody]")
	}
}

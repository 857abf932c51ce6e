package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/internal/ledger"
)

// The crash test runs the real binary, kills it with SIGKILL while
// producers send durable messages (each confirmed by a receipt) and a
// consumer acks some, restarts it on the same data directory and drains
// the queue. It counts as Jepsen's queue checker does:
//
//	lost        confirmed, not acked before the kill, never delivered after
//	unexpected  delivered but never sent
//	corrupt     delivered with a body that is not what was sent
//	unflagged   delivered again without redelivered:true
//
// All four must be zero. Rounds come from JUNCTION_CRASH_ROUNDS (default
// 2; `make crash-test ROUNDS=200` for the long form); small journal files
// make every round roll over, reuse files and compact.

func crashRounds(t *testing.T) int {
	if s := os.Getenv("JUNCTION_CRASH_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("JUNCTION_CRASH_ROUNDS=%q", s)
		}
		return n
	}
	if testing.Short() {
		return 1
	}
	return 2
}

// buildBinary compiles junction once per test run.
func buildBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "junction")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// brokerProc is the broker running as a child process.
type brokerProc struct {
	cmd      *exec.Cmd
	addr     string // STOMP
	mqttAddr string // MQTT, when enabled
	amqpAddr string // AMQP, when enabled
	logs     *strings.Builder
	mu       sync.Mutex
	done     chan struct{}
	// events counts what the journal did, from the broker's log.
	events *journalEvents
	// started is the broker's "junction started" log line.
	started map[string]any
}

// recoveredMessages is the number of messages p recovered at start,
// from the journal and from page stores.
func recoveredMessages(t *testing.T, p *brokerProc) int {
	t.Helper()
	n, ok := p.started["recovered_messages"].(float64)
	paged, ok2 := p.started["recovered_paged"].(float64)
	if !ok || !ok2 {
		t.Fatalf("no recovered_messages or recovered_paged in %v", p.started)
	}
	return int(n + paged)
}

type journalEvents struct {
	rolls, reclaims, compactions, pagings atomic.Int64
	// rolled, when not nil, is signalled (without blocking) at each roll
	// of the message journal, for a round that waits for one
	// (crashOpts.roll).
	rolled chan struct{}
}

func startProc(t *testing.T, bin, dataDir, configFile string, ev *journalEvents) *brokerProc {
	t.Helper()
	return startProcWith(t, bin, dataDir, configFile, ev, "", "")
}

// startProcMQTT starts the broker with MQTT on a loopback port too.
func startProcMQTT(t *testing.T, bin, dataDir, configFile string, ev *journalEvents) *brokerProc {
	t.Helper()
	return startProcWith(t, bin, dataDir, configFile, ev, "127.0.0.1:0", "")
}

// startProcAMQP starts the broker with AMQP on a loopback port too.
func startProcAMQP(t *testing.T, bin, dataDir, configFile string, ev *journalEvents) *brokerProc {
	t.Helper()
	return startProcWith(t, bin, dataDir, configFile, ev, "", "127.0.0.1:0")
}

func startProcWith(t *testing.T, bin, dataDir, configFile string, ev *journalEvents, mqttListen, amqpListen string) *brokerProc {
	t.Helper()
	cmd := exec.Command(bin, "--config", configFile, "--data-dir", dataDir, "--stomp", "127.0.0.1:0", "--mqtt", mqttListen, "--amqp", amqpListen, "--ws", "", "--all", "", "--console", "",
		"--log-format", "json", "--log-level", "debug", "--stomp-heart-beat-min", "0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &brokerProc{cmd: cmd, logs: &strings.Builder{}, done: make(chan struct{}), events: ev}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan map[string]any, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, `"level":"debug"`) {
				p.mu.Lock()
				p.logs.WriteString(line + "\n")
				p.mu.Unlock()
			}
			var ev map[string]any
			if json.Unmarshal([]byte(line), &ev) != nil {
				continue
			}
			switch ev["message"] {
			case "junction started":
				ready <- ev
			case "journal file rolled":
				p.events.rolls.Add(1)
				if ev["journal"] == "messages" {
					select {
					case p.events.rolled <- struct{}{}:
					default:
					}
				}
			case "dead journal file returned to the pool":
				p.events.reclaims.Add(1)
			case "journal compacted":
				p.events.compactions.Add(1)
			case "queue paging to disk":
				p.events.pagings.Add(1)
			}
		}
	}()
	select {
	case ev := <-ready:
		p.started = ev
		p.addr = fmt.Sprint(ev["stomp"])
		if a, ok := ev["mqtt"]; ok {
			p.mqttAddr = fmt.Sprint(a)
		}
		if a, ok := ev["amqp"]; ok {
			p.amqpAddr = fmt.Sprint(a)
		}
	case <-p.done:
		cmd.Wait()
		t.Fatalf("broker exited at start:\n%s", p.log())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("broker not ready in 30s:\n%s", p.log())
	}
	return p
}

func (p *brokerProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func (p *brokerProc) kill(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
	<-p.done
}

func (p *brokerProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("broker exit after SIGTERM: %v\n%s", err, p.log())
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("broker did not stop within 30s of SIGTERM:\n%s", p.log())
	}
}

// crashSetup builds the broker, writes a configuration with small
// journal files (every round rolls over and reuses files) plus extra
// persistence settings, and returns what each round needs.
func crashSetup(t *testing.T, extra string) (bin, data, conf string, rounds int, ev *journalEvents) {
	t.Helper()
	if testing.Short() && os.Getenv("JUNCTION_CRASH_ROUNDS") == "" {
		t.Skip("crash test skipped in -short mode")
	}
	bin = buildBinary(t)
	dir := t.TempDir()
	data = filepath.Join(dir, "data")
	conf = filepath.Join(dir, "crash.yaml")
	cfg := "persistence:\n  journal-file-size: 256KiB\n  journal-min-files: 1\n  journal-pool-files: 2\n" + extra
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return bin, data, conf, crashRounds(t), &journalEvents{rolled: make(chan struct{}, 1)}
}

func TestCrashKill9(t *testing.T) {
	// Compaction too; a third of the bodies are over the large-message
	// threshold. Each round keeps its load on until the journal has
	// rolled a file: on a slow machine a few hundred milliseconds of
	// load can fit in one 256 KiB file.
	ev := runCrashRoundsWith(t, "  compact-min-ratio: 0.5\n  compact-min-files: 3\n  large-message-threshold: 2KiB\n", crashOpts{roll: true})
	t.Logf("the journal rolled %d files, reused %d and compacted %d times", ev.rolls.Load(), ev.reclaims.Load(), ev.compactions.Load())
	if ev.rolls.Load() == 0 || ev.reclaims.Load() == 0 {
		t.Fatal("the journal never rolled or reused a file: the test did not exercise them")
	}
}

// TestCrashKill9Paging is the crash test with the queue paging: it holds
// 4 KiB in memory (the unacked one message in fifty fills that), so most
// confirmed messages are in page files, or being read back into the
// journal, when the broker is killed.
func TestCrashKill9Paging(t *testing.T) {
	ev := runCrashRounds(t, "  page-segment-size: 64KiB\naddress-settings:\n  - match: crash\n    max-size-bytes: 4096\n")
	t.Logf("the queue started paging %d times", ev.pagings.Load())
	if ev.pagings.Load() == 0 {
		t.Fatal("the queue never paged: the test did not exercise paging")
	}
}

// TestCrashKill9Large is the crash test with bodies of 1 to 6 MiB, all
// streamed to their files (in) and from them (out) at the default
// large-message threshold, so the kill lands in the middle of large
// transfers both ways: no confirmed message may be lost, a body cut off
// must leave no file, and recovery must leave no orphan (checked after
// the restart, against the messages recovered, and once drained).
func TestCrashKill9Large(t *testing.T) {
	// One message in four stays unacked and the window is 3: the
	// consumer stalls after a dozen, and the rest pile up on disk.
	runCrashRoundsWith(t, "", crashOpts{body: crashLargeBody, producers: 2, prefetch: "3", unackedEvery: 4,
		minRun: 1500, randRun: 2500, large: true})
}

// TestCrashKill9PagingLarge is the paging crash test with one message in
// eight of 1 to 2 MiB: large messages are paged by reference (a link to
// their body per page record) while the queue pages, and the kill lands
// amid paging, reading back and large transfers.
func TestCrashKill9PagingLarge(t *testing.T) {
	body := func(p, seq int) string {
		if seq%8 != 7 {
			return ledger.Payload(p, seq)
		}
		key := fmt.Sprintf("%d-%d-", p, seq)
		return key + strings.Repeat(strconv.Itoa(seq%10), 1<<20+(p*7919+seq*104729)%(1<<20))
	}
	ev := runCrashRoundsWith(t, "  page-segment-size: 64KiB\naddress-settings:\n  - match: crash\n    max-size-bytes: 4096\n",
		crashOpts{body: body, minRun: 1000, randRun: 2000, large: true})
	t.Logf("the queue started paging %d times", ev.pagings.Load())
	if ev.pagings.Load() == 0 {
		t.Fatal("the queue never paged: the test did not exercise paging")
	}
}

// crashLargeBody is ledger.Payload for TestCrashKill9Large (its format,
// so that ledger.PayloadKey reads it): 1 to 6 MiB.
func crashLargeBody(p, seq int) string {
	key := fmt.Sprintf("%d-%d-", p, seq)
	n := 1<<20 + (p*7919+seq*104729)%(5<<20)
	return key + strings.Repeat(strconv.Itoa(seq%10), n)
}

// crashOpts are what a crash test varies besides the broker's settings;
// zero fields take the defaults of TestCrashKill9.
type crashOpts struct {
	body            func(p, seq int) string // ledger.Payload
	producers       int                     // 3
	prefetch        string                  // the consumer's window: "300"
	unackedEvery    int                     // the consumer leaves one message in this many unacked: 50
	minRun, randRun int                     // ms before the kill: 300 + up to 1500
	large           bool                    // check the large-message files after the restart
	// roll: when the message journal has not rolled a file in the round
	// by minRun+randRun, the load goes on until it does (up to
	// crashRollWait), and the kill comes a random part of minRun later.
	roll bool
}

// crashRollWait bounds a round's wait for a roll (crashOpts.roll).
const crashRollWait = time.Minute

func (o crashOpts) withDefaults() crashOpts {
	if o.body == nil {
		o.body = ledger.Payload
	}
	if o.producers == 0 {
		o.producers = 3
	}
	if o.unackedEvery == 0 {
		o.unackedEvery = 50
	}
	if o.prefetch == "" {
		o.prefetch = "300"
	}
	if o.minRun == 0 {
		o.minRun, o.randRun = 300, 1500
	}
	return o
}

// runCrashRounds runs the STOMP crash rounds on a broker configured with
// crashSetup's extra settings and returns what its journal and queues did.
func runCrashRounds(t *testing.T, extra string) *journalEvents {
	t.Helper()
	return runCrashRoundsWith(t, extra, crashOpts{})
}

func runCrashRoundsWith(t *testing.T, extra string, o crashOpts) *journalEvents {
	t.Helper()
	o = o.withDefaults()
	bin, data, conf, rounds, ev := crashSetup(t, extra)
	var total roundCounts
	for round := range rounds {
		c := crashRound(t, bin, data, conf, round, ev, o)
		total.confirmed += c.confirmed
		total.acked += c.acked
		total.drained += c.drained
	}
	t.Logf("%d rounds: %d confirmed, %d acked before the kill, %d delivered after restart; lost=0 unexpected=0 corrupt=0 unflagged=0",
		rounds, total.confirmed, total.acked, total.drained)
	return ev
}

type roundCounts struct{ confirmed, acked, drained int }

func crashRound(t *testing.T, bin, data, conf string, round int, ev *journalEvents, o crashOpts) roundCounts {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(round)))
	dest := "/queue/crash"
	p := startProc(t, bin, data, conf, ev)
	// Every line up to "junction started" has been read: a roll signalled
	// so far is not this round's load.
	select {
	case <-ev.rolled:
	default:
	}
	rolls0 := ev.rolls.Load()

	var mu sync.Mutex
	sent := map[string]bool{}      // every key a producer tried (its body is o.body's)
	confirmed := map[string]bool{} // receipts received
	acked := map[string]bool{}     // acks sent before the kill
	seen := map[string]int{}       // deliveries before the kill
	stop := make(chan struct{})
	var wg sync.WaitGroup
	producers := o.producers
	for pi := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := gostomp.Dial("tcp", p.addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
			if err != nil {
				return
			}
			defer conn.MustDisconnect()
			id := round*producers + pi
			for seq := 0; seq < 1_000_000; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				body := o.body(id, seq)
				key, _, _, _ := ledger.PayloadKey([]byte(body))
				mu.Lock()
				sent[key] = true
				mu.Unlock()
				err := conn.Send(dest, "text/plain", []byte(body),
					gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true"))
				if err != nil {
					return // the broker died: this one is unconfirmed
				}
				mu.Lock()
				confirmed[key] = true
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		consumeUntilKill(&wg, p.addr, dest, o.prefetch, o.unackedEvery, stop, &mu, seen, acked)
	}()
	began := time.Now()
	time.Sleep(time.Duration(o.minRun+rng.IntN(o.randRun)) * time.Millisecond)
	select {
	case <-ev.rolled: // the round has rolled already
	default:
		if !o.roll {
			break
		}
		select {
		case <-ev.rolled:
			time.Sleep(time.Duration(rng.IntN(o.minRun)) * time.Millisecond)
		case <-time.After(crashRollWait):
			p.kill(t)
			close(stop)
			wg.Wait()
			mu.Lock()
			n := len(confirmed)
			mu.Unlock()
			t.Fatalf("round %d: the journal rolled no file in %v of load (%d messages confirmed)\n%s",
				round, time.Since(began).Round(time.Millisecond), n, p.log())
		}
	}
	p.kill(t)
	ran, rolled := time.Since(began), ev.rolls.Load()-rolls0
	close(stop)
	wg.Wait()

	// Restart on the same data and drain.
	p2 := startProc(t, bin, data, conf, ev)
	if o.large {
		// No body cut off by the kill, and no orphan: a file for each
		// message recovered, at most (one could be acked meanwhile).
		if tmp, _ := filepath.Glob(filepath.Join(data, "large", "*.tmp")); len(tmp) > 0 {
			t.Fatalf("round %d: %d partial bodies left after recovery", round, len(tmp))
		}
		files, _ := filepath.Glob(filepath.Join(data, "large", "*.msg"))
		if rec := recoveredMessages(t, p2); len(files) > rec {
			t.Fatalf("round %d: %d large-message files for %d recovered messages: orphans", round, len(files), rec)
		}
	}
	conn, err := gostomp.Dial("tcp", p2.addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := conn.Subscribe(dest, gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	drained := map[string]int{}
	var lost, unexpected, corrupt, unflagged int
	quietFor := 1500 * time.Millisecond
	deadline := time.Now().Add(60 * time.Second)
drain:
	for time.Now().Before(deadline) {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatalf("round %d: drain: %v\nbroker log after restart:\n%s", round, m.Err, p2.log())
			}
			key, pi, seq, ok := ledger.PayloadKey(m.Body)
			switch {
			case !ok || !sent[key]:
				unexpected++
				continue
			case string(m.Body) != o.body(pi, seq):
				corrupt++
			}
			if (seen[key] > 0 || drained[key] > 0) && m.Header.Get("redelivered") != "true" {
				unflagged++
			}
			drained[key]++
		case <-time.After(quietFor):
			break drain
		}
	}
	for key := range confirmed {
		if !acked[key] && drained[key] == 0 {
			lost++
		}
	}
	conn.Disconnect()
	p2.stop(t)
	// Everything was consumed: no large body may be left behind.
	if left, _ := filepath.Glob(filepath.Join(data, "large", "*.msg")); len(left) > 0 {
		t.Fatalf("round %d: %d large-message files left after the queue was drained: %v\nbroker log after restart:\n%s", round, len(left), left, p2.log())
	}
	t.Logf("round %d: %d sent, %d confirmed, %d delivered before the kill (%d acked) in %v of load (%d journal files rolled), %d delivered after restart",
		round, len(sent), len(confirmed), len(seen), len(acked), ran.Round(time.Millisecond), rolled, len(drained))
	if lost+unexpected+corrupt+unflagged > 0 {
		t.Fatalf("round %d: lost=%d unexpected=%d corrupt=%d unflagged=%d\nbroker log after restart:\n%s",
			round, lost, unexpected, corrupt, unflagged, p2.log())
	}
	if len(confirmed) == 0 {
		t.Fatalf("round %d: nothing was confirmed before the kill; the test proved nothing\n%s", round, p.log())
	}
	return roundCounts{len(confirmed), len(acked), len(drained)}
}

// consumeUntilKill consumes dest on addr with client-individual acks and
// a window of prefetch until stop is closed or the broker goes away,
// counting each delivery in seen and each ack sent in acked (under mu).
// One message in unackedEvery stays unacked (it must come back after
// the restart); the window leaves room for the rest. The ack goroutine
// it starts is counted in wg.
func consumeUntilKill(wg *sync.WaitGroup, addr, dest, prefetch string, unackedEvery int, stop <-chan struct{}, mu *sync.Mutex, seen map[string]int, acked map[string]bool) {
	conn, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		return
	}
	defer conn.MustDisconnect()
	sub, err := conn.Subscribe(dest, gostomp.AckClientIndividual, gostomp.SubscribeOpt.Header("activemq.prefetchSize", prefetch))
	if err != nil {
		return
	}
	// go-stomp deadlocks if Ack is called from the goroutine reading
	// sub.C while deliveries are fast (its writer queue and the
	// subscription channel wait on each other), so a second goroutine
	// acks.
	toAck := make(chan *gostomp.Message, 1000)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range toAck {
			key, _, _, _ := ledger.PayloadKey(m.Body)
			if conn.Ack(m) != nil {
				for range toAck {
				}
				return
			}
			mu.Lock()
			acked[key] = true
			mu.Unlock()
		}
	}()
	defer close(toAck)
	for {
		select {
		case <-stop:
			return
		case m, ok := <-sub.C:
			if !ok || m.Err != nil {
				return
			}
			key, _, seq, _ := ledger.PayloadKey(m.Body)
			mu.Lock()
			seen[key]++
			mu.Unlock()
			if seq%unackedEvery != unackedEvery-1 {
				toAck <- m
			}
		}
	}
}

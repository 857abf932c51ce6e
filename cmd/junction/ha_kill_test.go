package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/ledger"
)

// The shared-store failover test runs two broker processes on one data
// directory, kills the live one with SIGKILL while producers of every
// protocol (STOMP, MQTT, AMQP) send durable messages, each listing both
// brokers, and a STOMP consumer acknowledges them; the backup takes
// over; every client reconnects and goes on. It counts with the crash
// test's ledger (package internal/ledger): lost, unexpected, corrupt,
// unflagged, not redelivered (confirmed and left unacknowledged on the
// killed broker, never delivered again by the new one) and reordered.
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
	t.Logf("%d rounds: %d confirmed, %d deliveries; lost=0 unexpected=0 corrupt=0 unflagged=0 not-redelivered=0 reordered=0; "+
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
	if code, body := httpGet(t, "http://"+backup.slot.console+"/api/v1/broker"); code != 200 || !strings.Contains(body, "backup, waiting for the store lock held since ") {
		t.Fatalf("round %d: backup's /api/v1/broker: %d %q", round, code, body)
	}
	if code, body := httpGet(t, "http://"+backup.slot.console+"/readyz"); code != 503 {
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
	led := ledger.New()
	stopProducers, stopConsumer := make(chan struct{}), make(chan struct{})
	load := func(addrs []string, stop <-chan struct{}) ledger.Load {
		return ledger.Load{Addrs: addrs, Ledger: led, Stop: stop, Hold: 100}
	}
	var producers, consumer sync.WaitGroup
	consumer.Add(1)
	go func() { defer consumer.Done(); ledger.StompConsumer("/queue/"+haQueue, load(stompAddrs, stopConsumer)) }()
	for i := range 2 {
		id := round*10 + i
		producers.Add(3)
		go func() {
			defer producers.Done()
			ledger.StompProducer(id, "/queue/"+haQueue, load(stompAddrs, stopProducers))
		}()
		go func() {
			defer producers.Done()
			ledger.MQTTProducer(id, "ha/q", load(addrsOf(func(s haSlot) string { return s.mqtt }), stopProducers))
		}()
		go func() {
			defer producers.Done()
			ledger.AMQPProducer(id, "queue://"+haQueue, load(addrsOf(func(s haSlot) string { return s.amqp }), stopProducers))
		}()
	}
	fail := func(format string, args ...any) {
		close(stopProducers)
		close(stopConsumer)
		producers.Wait()
		consumer.Wait()
		t.Fatalf("round %d: "+format+"\nnew live broker's log:\n%s", append([]any{round}, append(args, backup.log)...)...)
	}
	if !ledger.WaitUntil(30*time.Second, func() bool {
		for _, p := range haProtocols {
			if n, _ := led.Confirmations(p); n == 0 {
				return false
			}
		}
		return led.HeldConfirmed()
	}) {
		fail("not every protocol had a message confirmed, or none was held unacknowledged, before the kill")
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(round)))
	time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)

	newLive := map[string]bool{}
	for _, a := range backup.slot.messaging() {
		newLive[a] = true
	}
	led.Mark(func(addr string) bool { return newLive[addr] })
	killedAt := time.Now()
	procs[live].kill9()
	backup.await(t, takeoverMsg, 30*time.Second)
	// The clients reconnect and go on.
	if !ledger.WaitUntil(60*time.Second, func() bool {
		for _, p := range haProtocols {
			if _, after := led.Confirmations(p); after < 20 {
				return false
			}
		}
		return true
	}) {
		fail("not every protocol went on after the takeover: %v", led.After())
	}
	took = led.FirstAfter().Sub(killedAt)
	close(stopProducers)
	producers.Wait()

	// Drain: everything confirmed is delivered, the held messages again.
	ledger.WaitUntil(60*time.Second, func() bool { return led.Drained(time.Second) })
	close(stopConsumer)
	consumer.Wait()

	c := led.Check()
	t.Logf("round %d: %d sent, %d confirmed (%v by the new live broker), %d deliveries, %d confirmed messages held unacked at the kill; "+
		"first confirmation by the new live broker %v after the kill; its lock to ready %vms",
		round, c.Sent, c.Confirmed, led.After(), c.Deliveries, c.Held, took.Round(time.Millisecond), backup.log.find(takeoverMsg)["lock_to_ready"])
	if c.Bad() > 0 {
		t.Fatalf("round %d: %v\n%snew live broker's log:\n%s", round, c, c.Details(), backup.log)
	}
	if c.Held == 0 {
		t.Fatalf("round %d: no confirmed message was left unacknowledged at the kill; the test proved nothing about redelivery", round)
	}
	return c.Confirmed, c.Deliveries, took
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

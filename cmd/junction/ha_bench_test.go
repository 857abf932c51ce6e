package main

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/persistence/journal"
)

// BenchmarkHATakeover measures a shared-store takeover: two broker
// processes on one data directory, the live one killed with SIGKILL, and
// the time from the kill to the first client served by the backup (a
// STOMP client dialing the backup every 10 ms, served once a durable send
// is confirmed). The store is empty, or holds 1,000,000 small durable
// messages on ten queues (as BenchmarkRecovery1M) that the backup
// recovers before it opens its listeners. One op is one takeover; the
// backup polls the lock every 500 ms (the default), and the kill comes at
// a random moment of its poll cycle.
//
//	go test -run='^$' -bench=HATakeover -benchtime=1x -count=5 ./cmd/junction/
func BenchmarkHATakeover(b *testing.B) {
	bin := buildBinary(b)
	for _, n := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "data")
			if n > 0 {
				fillStore(b, dir, n)
			}
			slots := newSlots(b)
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				live := startHAProc(b, bin, dir, slots[i%2], "--log-level", "info")
				live.await(b, "junction started", 5*time.Minute)
				backup := startHAProc(b, bin, dir, slots[1-i%2], "--log-level", "info")
				backup.await(b, backupMsg, time.Minute)
				// The backup has just tried the lock; kill at a random
				// moment of its poll cycle, not right after an attempt.
				time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond)
				b.StartTimer()
				killed := time.Now()
				live.kill9()
				served := firstServed(b, backup.slot.stomp)
				took := served.Sub(killed)
				b.StopTimer()
				ev := backup.await(b, takeoverMsg, time.Second)
				b.ReportMetric(took.Seconds(), "kill-to-served-s")
				if ms, ok := ev["lock_to_ready"].(float64); ok {
					b.ReportMetric(ms/1000, "lock-to-ready-s")
				}
				b.Logf("kill -9 to the first client served by the backup: %v (lock to ready %vms, of which opening the store %vms)",
					took.Round(time.Millisecond), ev["lock_to_ready"], ev["store_open_time"])
				backup.terminate(b)
			}
		})
	}
}

// firstServed dials addr every 10 ms until a durable STOMP send is
// confirmed there, and returns when.
func firstServed(b *testing.B, addr string) time.Time {
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		err = c.Send("/queue/takeover.probe", "text/plain", []byte("probe"), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true"))
		served := time.Now()
		c.Disconnect()
		if err == nil {
			return served
		}
	}
	b.Fatalf("nothing served on %s within 5 minutes", addr)
	return time.Time{}
}

// fillStore writes n small durable messages on ten queues into the data
// directory's journals through core, as a broker would.
func fillStore(b *testing.B, dir string, n int) {
	b.Helper()
	msgs, bindings := openStore(b, dir)
	br, err := core.New(core.Config{Messages: msgs, Bindings: bindings, ExpiryScanInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	s, _ := br.NewSession(core.SessionOptions{})
	err = sendSmallDurable(s, n)
	s.Close()
	br.Close()
	msgs.Close()
	bindings.Close()
	if err != nil {
		b.Fatal(err)
	}
}

// openStore opens the journals of the data directory dir as the broker
// does (bindings in files of bindingsFileSize), the messages' never
// compacted.
func openStore(b *testing.B, dir string) (msgs, bindings *journal.Journal) {
	b.Helper()
	msgs, err := journal.Open(journal.Config{Dir: filepath.Join(dir, "journal"), CompactMinRatio: -1})
	if err != nil {
		b.Fatal(err)
	}
	bindings, err = journal.Open(journal.Config{Dir: filepath.Join(dir, "bindings"), FileSize: bindingsFileSize, MinFiles: 1, PoolFiles: 2})
	if err != nil {
		b.Fatal(err)
	}
	return msgs, bindings
}

// sendSmallDurable sends n small durable messages on ten queues through
// s, at most 4096 unconfirmed, and returns once all are confirmed, with
// an error one of them had.
func sendSmallDurable(s *core.Session, n int) error {
	body := []byte("a small durable message body...")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 4096)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		s.SendAsync(&core.Message{Address: fmt.Sprintf("q%d", i%10), RoutingType: core.Anycast, Durable: true, Body: body},
			func(err error) {
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
				<-sem
				wg.Done()
			})
	}
	wg.Wait()
	return firstErr
}

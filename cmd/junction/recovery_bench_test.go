package main

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/persistence/journal"
)

// BenchmarkRecovery1M fills a real journal with 1,000,000 small durable
// messages through core, then measures how long a broker takes to start
// on it (journal open + replay into queues). One op is one full recovery.
//
//	go test -run='^$' -bench=Recovery1M -benchtime=1x ./cmd/junction/
func BenchmarkRecovery1M(b *testing.B) {
	const n = 1_000_000
	dir := b.TempDir()
	open := func() (*journal.Journal, *journal.Journal) {
		m, err := journal.Open(journal.Config{Dir: filepath.Join(dir, "journal"), CompactMinRatio: -1})
		if err != nil {
			b.Fatal(err)
		}
		bd, err := journal.Open(journal.Config{Dir: filepath.Join(dir, "bindings"), FileSize: 1 << 20, MinFiles: 1, PoolFiles: 2})
		if err != nil {
			b.Fatal(err)
		}
		return m, bd
	}
	msgs, bindings := open()
	br, err := core.New(core.Config{Messages: msgs, Bindings: bindings, ExpiryScanInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	s, _ := br.NewSession(core.SessionOptions{})
	body := []byte("a small durable message body...")
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4096)
	var firstErr error
	var mu sync.Mutex
	start := time.Now()
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
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	fill := time.Since(start)
	s.Close()
	br.Close()
	msgs.Close()
	bindings.Close()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		msgs, bindings = open()
		br, err = core.New(core.Config{Messages: msgs, Bindings: bindings, ExpiryScanInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		if got := br.Recovered().Messages; got != n {
			b.Fatalf("recovered %d messages, want %d", got, n)
		}
		b.ReportMetric(d.Seconds(), "recovery-s")
		b.ReportMetric(float64(n)/fill.Seconds(), "fill-msgs/s")
		b.StopTimer()
		br.Close()
		msgs.Close()
		bindings.Close()
		b.StartTimer()
	}
}

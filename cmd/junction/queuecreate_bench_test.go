package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/persistence/journal"
)

// BenchmarkQueueCreationLatency measures what creating queues costs the
// producers of other queues: one producer sends durable messages (each
// waited for) to an existing queue, alone and then while 1,000 new
// queues are auto-created by sends to new addresses; it reports the
// producer's confirm latency (p50, p99) in both phases, on real
// journals (each queue's binding is synced before it is bound).
//
//	go test -run='^$' -bench=QueueCreationLatency -benchtime=1x ./cmd/junction/
func BenchmarkQueueCreationLatency(b *testing.B) {
	for range b.N {
		dir := b.TempDir()
		msgs, err := journal.Open(journal.Config{Dir: filepath.Join(dir, "journal")})
		if err != nil {
			b.Fatal(err)
		}
		bindings, err := journal.Open(journal.Config{Dir: filepath.Join(dir, "bindings"), FileSize: 1 << 20, MinFiles: 1, PoolFiles: 2})
		if err != nil {
			b.Fatal(err)
		}
		br, err := core.New(core.Config{Messages: msgs, Bindings: bindings, ExpiryScanInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		prod, _ := br.NewSession(core.SessionOptions{})
		send := func(s *core.Session, addr string) time.Duration {
			start := time.Now()
			if err := s.Send(context.Background(), &core.Message{Address: addr, RoutingType: core.Anycast, Durable: true, Body: []byte("x"), Priority: core.DefaultPriority}); err != nil {
				b.Fatal(err)
			}
			return time.Since(start)
		}
		send(prod, "existing")
		measure := func(d time.Duration, during func(stop <-chan struct{})) []time.Duration {
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if during != nil {
				wg.Add(1)
				go func() { defer wg.Done(); during(stop) }()
			}
			var lat []time.Duration
			for end := time.Now().Add(d); time.Now().Before(end); {
				lat = append(lat, send(prod, "existing"))
			}
			close(stop)
			wg.Wait()
			return lat
		}
		quiet := measure(2*time.Second, nil)
		created := 0
		busy := measure(2*time.Second, func(stop <-chan struct{}) {
			// Four creators, 1,000 queues in all.
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, _ := br.NewSession(core.SessionOptions{})
					for i := w; i < 1000; i += 4 {
						select {
						case <-stop:
							return
						default:
						}
						send(s, fmt.Sprintf("new-%d", i))
					}
				}()
			}
			wg.Wait()
		})
		for _, st := range br.QueueStats() {
			if st.Name != "existing" {
				created++
			}
		}
		br.Close()
		msgs.Close()
		bindings.Close()
		q := func(l []time.Duration, p float64) time.Duration {
			slices.Sort(l)
			return l[int(p*float64(len(l)-1))]
		}
		b.ReportMetric(float64(q(quiet, 0.5).Microseconds()), "quiet-p50-µs")
		b.ReportMetric(float64(q(quiet, 0.99).Microseconds()), "quiet-p99-µs")
		b.ReportMetric(float64(q(busy, 0.5).Microseconds()), "creating-p50-µs")
		b.ReportMetric(float64(q(busy, 0.99).Microseconds()), "creating-p99-µs")
		b.ReportMetric(float64(created), "queues-created")
	}
}

package main

import (
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
)

// BenchmarkRecovery1M fills a real journal with 1,000,000 small durable
// messages through core, then measures how long a broker takes to start
// on it (journal open + replay into queues). One op is one full recovery.
//
//	go test -run='^$' -bench=Recovery1M -benchtime=1x ./cmd/junction/
func BenchmarkRecovery1M(b *testing.B) {
	const n = 1_000_000
	dir := b.TempDir()
	msgs, bindings := openStore(b, dir)
	br, err := core.New(core.Config{Messages: msgs, Bindings: bindings, ExpiryScanInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	s, _ := br.NewSession(core.SessionOptions{})
	start := time.Now()
	if err := sendSmallDurable(s, n); err != nil {
		b.Fatal(err)
	}
	fill := time.Since(start)
	s.Close()
	br.Close()
	msgs.Close()
	bindings.Close()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		msgs, bindings = openStore(b, dir)
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

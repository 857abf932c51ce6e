package transport

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/minica"
)

// BenchmarkSend measures one lane from node 1 to node 2 over loopback:
// frames/s and bytes/s of payload, from the first Send to the last frame
// handed to the receiver's handler. The sender keeps at most 4 MiB in
// flight, as raft's flow control would, so nothing is dropped.
func BenchmarkSend(b *testing.B) {
	for _, size := range []int{100, 4096} {
		for _, tls := range []bool{false, true} {
			name := fmt.Sprintf("%dB", size)
			if tls {
				name += "/tls"
			}
			b.Run(name, func(b *testing.B) { benchmarkSend(b, size, tls) })
		}
	}
}

func benchmarkSend(b *testing.B, size int, withTLS bool) {
	var got atomic.Int64
	la, lb := listen(b), listen(b)
	mod := func(c *Config) { c.Logger = c.Logger.Level(1) } // info and above
	modA, modB := mod, mod
	if withTLS {
		ca, err := minica.NewCA("cluster CA")
		if err != nil {
			b.Fatal(err)
		}
		modA = func(c *Config) { mod(c); c.TLS = nodeTLS(b, ca, 1, ca) }
		modB = func(c *Config) { mod(c); c.TLS = nodeTLS(b, ca, 2, ca) }
	}
	a := startNode(b, 1, la, map[uint64]string{2: lb.Addr().String()}, modA)
	recv := startNode(b, 2, lb, map[uint64]string{1: la.Addr().String()}, func(c *Config) {
		modB(c)
		c.Handler = func(uint64, Lane, []byte) { got.Add(1) }
	})
	waitConnected(b, a, recv)
	frame := make([]byte, size)
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	window := int64(4<<20) / int64(size)
	for i := int64(0); i < int64(b.N); i++ {
		for i-got.Load() >= window {
			runtime.Gosched()
		}
		if !a.Send(2, LaneRaft, frame) {
			b.Fatal("dropped")
		}
	}
	for got.Load() < int64(b.N) {
		runtime.Gosched()
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "frames/s")
}

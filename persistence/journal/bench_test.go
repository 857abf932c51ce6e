package journal

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/junctionmq/junction/persistence/fs"
)

// BenchmarkAppendSync measures durable 1 KiB appends on the real file
// system with N concurrent appenders, each waiting for its done.
func BenchmarkAppendSync(b *testing.B) {
	for _, n := range []int{1, 8, 64, 256} {
		b.Run(fmt.Sprintf("appenders=%d", n), func(b *testing.B) {
			j, err := Open(Config{Dir: b.TempDir(), FS: fs.OS(), FileSize: 64 << 20, CompactMinRatio: -1})
			if err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 1024)
			var next atomic.Uint64
			var wg sync.WaitGroup
			per := b.N/n + 1
			b.SetBytes(1024)
			b.ResetTimer()
			start := time.Now()
			for w := 0; w < n; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ch := make(chan error, 1)
					done := func(err error) { ch <- err }
					for i := 0; i < per; i++ {
						j.Append(next.Add(1), 1, payload, true, done)
						if err := <-ch; err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			st := j.Stats()
			j.Close()
			total := float64(per * n)
			b.ReportMetric(total/el.Seconds(), "appends/s")
			b.ReportMetric(float64(st.SyncedRecs)/float64(max(st.Syncs, 1)), "records/fsync")
		})
	}
}

// TestRecoveryTime1M measures recovery of 1M small live records (skipped
// with -short).
func TestRecoveryTime1M(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	dir := t.TempDir()
	cfg := Config{Dir: dir, FS: fs.OS(), CompactMinRatio: -1}
	j := mustOpen(t, cfg)
	const n = 1_000_000
	payload := make([]byte, 64)
	var wg sync.WaitGroup
	wg.Add(n)
	done := func(error) { wg.Done() }
	for id := uint64(1); id <= n; id++ {
		j.Append(id, 1, payload, false, done)
	}
	wg.Wait()
	j.Close()
	start := time.Now()
	j = mustOpen(t, cfg)
	count := 0
	if err := j.Load(func(uint64, uint16, []byte, []Update) error { count++; return nil }); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	st := j.Stats()
	j.Close()
	if count != n {
		t.Fatalf("recovered %d", count)
	}
	t.Logf("recovered %d records (%d data files, %d MiB) in %v", count, st.DataFiles, st.TotalBytes>>20, el)
}

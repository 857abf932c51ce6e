package cluster

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// raftLogger passes etcd/raft's log lines to zerolog. raft's Info is
// mostly elections and term changes: debug here, as the node logs what
// matters (leading or not) itself.
type raftLogger struct{ l zerolog.Logger }

func (r raftLogger) Debug(v ...any)              { r.l.Trace().Msg(fmt.Sprint(v...)) }
func (r raftLogger) Debugf(f string, v ...any)   { r.l.Trace().Msgf(f, v...) }
func (r raftLogger) Info(v ...any)               { r.l.Debug().Msg(fmt.Sprint(v...)) }
func (r raftLogger) Infof(f string, v ...any)    { r.l.Debug().Msgf(f, v...) }
func (r raftLogger) Warning(v ...any)            { r.l.Warn().Msg(fmt.Sprint(v...)) }
func (r raftLogger) Warningf(f string, v ...any) { r.l.Warn().Msgf(f, v...) }
func (r raftLogger) Error(v ...any)              { r.l.Error().Msg(fmt.Sprint(v...)) }
func (r raftLogger) Errorf(f string, v ...any)   { r.l.Error().Msgf(f, v...) }
func (r raftLogger) Fatal(v ...any)              { r.l.Error().Msg(fmt.Sprint(v...)); panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(f string, v ...any) {
	r.l.Error().Msgf(f, v...)
	panic(fmt.Sprintf(f, v...))
}
func (r raftLogger) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }

func slicesSort(s []uint64) { slices.Sort(s) }

// histogram counts durations in fixed buckets (for the commit latency
// metric and its quantiles).
type histogram struct {
	mu     sync.Mutex
	counts [len(histBounds) + 1]uint64
	sum    time.Duration
	n      uint64
}

// histBounds are the buckets' upper bounds.
var histBounds = [...]time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second,
}

func (h *histogram) observe(d time.Duration) {
	i, _ := slices.BinarySearch(histBounds[:], d)
	h.mu.Lock()
	h.counts[i]++
	h.sum += d
	h.n++
	h.mu.Unlock()
}

// Histogram is a snapshot of a latency histogram: Counts[i] observations
// at or below Bounds[i], the last one above every bound.
type Histogram struct {
	Bounds []time.Duration
	Counts []uint64
	Sum    time.Duration
	Count  uint64
}

func (h *histogram) snapshot() Histogram {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Histogram{Bounds: histBounds[:], Counts: slices.Clone(h.counts[:]), Sum: h.sum, Count: h.n}
}

// Quantile estimates the q-quantile (0..1) as the upper bound of its
// bucket.
func (h Histogram) Quantile(q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	want := uint64(q * float64(h.Count))
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen > want || seen == h.Count {
			if i < len(h.Bounds) {
				return h.Bounds[i]
			}
			return h.Bounds[len(h.Bounds)-1]
		}
	}
	return h.Bounds[len(h.Bounds)-1]
}

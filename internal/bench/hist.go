package bench

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram layout: values below 64 have a bucket each; above, every power
// of two is split into HistSub linear sub-buckets, so a bucket is at most
// 1/HistSub of its lower bound wide. Quantile reports a bucket's middle,
// so its relative error is at most 1/(2*HistSub) (about 1.6%), and values
// below 64 are exact. Memory is fixed: histBuckets counters. Values are
// nanoseconds.
const (
	HistSub     = 32
	histBuckets = 64 * HistSub
)

// MaxRelativeError bounds |Quantile(q) - exact| / exact for any q.
const MaxRelativeError = 1.0 / (2 * HistSub)

// Histogram is a log-linear (HDR-style) latency histogram. The zero value
// is empty and ready to use; it is not safe for concurrent use (see
// AtomicHistogram).
type Histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	min, max uint64
}

// histIndex returns the bucket of v.
func histIndex(v uint64) int {
	if v < 2*HistSub {
		return int(v)
	}
	shift := bits.Len64(v) - 6 // keep the top 6 bits: m in [32, 64)
	m := v >> uint(shift)
	return shift*HistSub + int(m)
}

// histLower returns the smallest value of bucket i, and the bucket's width.
func histLower(i int) (lo, width uint64) {
	if i < 2*HistSub {
		return uint64(i), 1
	}
	shift := i/HistSub - 1
	m := uint64(i%HistSub + HistSub)
	return m << uint(shift), 1 << uint(shift)
}

// Record adds one value; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	v := uint64(d)
	h.counts[histIndex(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.max = max(h.max, v)
	h.n++
}

// Merge adds o's values to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
}

// Count returns the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest value recorded (exact), or -1 if empty.
func (h *Histogram) Max() time.Duration {
	if h.n == 0 {
		return -1
	}
	return time.Duration(h.max)
}

// Quantile returns the value at quantile q (0..1): the middle of the
// bucket holding the value of rank ceil(q*n), kept within the exact
// minimum and maximum; -1 if the histogram is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return -1
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, w := histLower(i)
			return time.Duration(min(max(lo+w/2, h.min), h.max))
		}
	}
	return time.Duration(h.max) // unreachable
}

// AtomicHistogram is a histogram recorded without locks, so that message
// handlers running on many goroutines never wait for each other.
type AtomicHistogram struct {
	counts [histBuckets]atomic.Uint64
	min    atomic.Uint64 // stored +1 so that zero means "none"
	max    atomic.Uint64
}

// Record adds one value; negative durations count as zero.
func (h *AtomicHistogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	v := uint64(d)
	h.counts[histIndex(v)].Add(1)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			break
		}
	}
	for {
		m := h.min.Load()
		if (m != 0 && v+1 >= m) || h.min.CompareAndSwap(m, v+1) {
			break
		}
	}
}

// Snapshot returns a copy of the values recorded so far.
func (h *AtomicHistogram) Snapshot() *Histogram {
	var s Histogram
	for i := range h.counts {
		c := h.counts[i].Load()
		s.counts[i] = c
		s.n += c
	}
	if s.n == 0 {
		return &s
	}
	// Min and max are updated after the counts: keep them consistent with
	// the buckets a concurrent Record has already counted.
	first, last := -1, 0
	for i, c := range s.counts {
		if c > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	flo, fw := histLower(first)
	s.min = flo + fw - 1
	if m := h.min.Load(); m > 0 {
		s.min = min(s.min, m-1)
	}
	s.max, _ = histLower(last)
	s.max = max(s.max, h.max.Load())
	return &s
}

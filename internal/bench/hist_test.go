package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	if got := h.Quantile(0.5); got != -1 {
		t.Fatalf("empty quantile = %v, want -1", got)
	}
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	h.Record(-5) // clamps to 0
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}} {
		got := h.Quantile(tc.q)
		if d := got - tc.want; d < -tc.want/30 || d > tc.want/30 {
			t.Errorf("quantile(%v) = %v, want %v within 3.3%%", tc.q, got, tc.want)
		}
	}
	var m Histogram
	m.Merge(&h)
	m.Merge(&h)
	if m.n != 2*h.n || m.Quantile(0.5) != h.Quantile(0.5) {
		t.Errorf("merge: n=%d p50=%v, want n=%d p50=%v", m.n, m.Quantile(0.5), 2*h.n, h.Quantile(0.5))
	}
}

func TestHistogramBuckets(t *testing.T) {
	// Every value falls in the bucket whose bounds contain it.
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 1000, 123456789, 1 << 62, 1<<64 - 1} {
		i := histIndex(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("histIndex(%d) = %d out of range", v, i)
		}
		lo, w := histLower(i)
		if v < lo || v-lo >= w {
			t.Errorf("value %d in bucket %d = [%d, %d+%d)", v, i, lo, lo, w)
		}
	}
}

// TestHistogramErrorBound checks every reported quantile against the
// exact value of a sorted reference, on random data spanning nanoseconds
// to minutes.
func TestHistogramErrorBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dist := range []struct {
		name string
		gen  func() time.Duration
	}{
		{"lognormal", func() time.Duration { return time.Duration(math.Exp(rng.NormFloat64()*2 + 12)) }},
		{"uniform", func() time.Duration { return time.Duration(rng.Int64N(int64(time.Second))) }},
		{"wide", func() time.Duration { return time.Duration(rng.Int64N(1 << uint(rng.IntN(40)+1))) }},
		{"small", func() time.Duration { return time.Duration(rng.IntN(100)) }},
	} {
		var h Histogram
		ref := make([]time.Duration, 100000)
		for i := range ref {
			ref[i] = dist.gen()
			h.Record(ref[i])
		}
		slices.Sort(ref)
		for _, q := range []float64{0, 0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
			rank := max(int(math.Ceil(q*float64(len(ref)))), 1)
			want := ref[rank-1]
			got := h.Quantile(q)
			if diff := math.Abs(float64(got - want)); diff > float64(want)*MaxRelativeError {
				t.Errorf("%s: Quantile(%v) = %d, exact %d: error %.4f > %.4f", dist.name, q, got, want, diff/float64(want), MaxRelativeError)
			}
		}
		if h.Max() != ref[len(ref)-1] || h.Count() != uint64(len(ref)) {
			t.Errorf("%s: Max %v Count %d, want %v %d", dist.name, h.Max(), h.Count(), ref[len(ref)-1], len(ref))
		}
	}
}

func TestAtomicHistogramMatches(t *testing.T) {
	var a AtomicHistogram
	var h Histogram
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 10000 {
				d := time.Duration(rng.Int64N(int64(10 * time.Millisecond)))
				a.Record(d)
				mu.Lock()
				h.Record(d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	s := a.Snapshot()
	if s.Count() != h.Count() || s.Max() != h.Max() {
		t.Fatalf("snapshot count %d max %v, want %d %v", s.Count(), s.Max(), h.Count(), h.Max())
	}
	for _, q := range []float64{0, 0.5, 0.99, 0.999, 1} {
		if s.Quantile(q) != h.Quantile(q) {
			t.Errorf("Quantile(%v): atomic %v, plain %v", q, s.Quantile(q), h.Quantile(q))
		}
	}
	var e Histogram
	if e.Quantile(0.5) != -1 || e.Max() != -1 || (&AtomicHistogram{}).Snapshot().Count() != 0 {
		t.Error("empty histogram not reported as empty")
	}
}

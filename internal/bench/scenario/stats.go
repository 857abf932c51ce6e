package scenario

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	ibench "github.com/junctionmq/junction/internal/bench"
)

// histogram is the latency histogram of internal/bench.
type histogram = ibench.Histogram

// lockedHist is a histogram owned by one goroutine that another goroutine
// merges at the end; the mutex is uncontended while recording.
type lockedHist struct {
	mu sync.Mutex
	h  histogram
}

func (l *lockedHist) record(d time.Duration) {
	l.mu.Lock()
	l.h.Record(d)
	l.mu.Unlock()
}

func (l *lockedHist) mergeInto(dst *histogram) {
	l.mu.Lock()
	dst.Merge(&l.h)
	l.mu.Unlock()
}

// putStamp and getStamp are internal/bench's body time stamps.
func putStamp(body []byte, t time.Duration) { ibench.PutStamp(body, t) }
func getStamp(body []byte) time.Duration    { return ibench.GetStamp(body) }

// result is the outcome of one run, or the median of several. Rates are per
// second of the measured window; latencies are microseconds, -1 when not
// measured. JSON field names are stable: scripts read them.
type result struct {
	Scenario    string  `json:"scenario"`
	Run         string  `json:"run"` // "1", "2", ..., or "median"
	Addr        string  `json:"addr"`
	Destination string  `json:"destination,omitempty"`
	Size        int     `json:"size"`
	Producers   int     `json:"producers"`
	Consumers   int     `json:"consumers"` // subscribers for fanout
	Inflight    int     `json:"inflight,omitempty"`
	Ack         string  `json:"ack"`
	Prefetch    int     `json:"prefetch,omitempty"`
	WindowS     float64 `json:"window_s"`
	// SentPerS: messages sent (queue), published (fanout), SEND frames
	// written (durable-*).
	SentPerS float64 `json:"sent_per_s"`
	// DeliveredPerS: messages received by consumers (queue), deliveries summed
	// over subscribers (fanout), messages consumed and acked (durable-*).
	DeliveredPerS float64 `json:"delivered_per_s"`
	// ConfirmedPerS: RECEIPTs for persistent sends (durable-* only).
	ConfirmedPerS float64 `json:"confirmed_per_s,omitempty"`
	E2EP50us      float64 `json:"e2e_p50_us"`
	E2EP99us      float64 `json:"e2e_p99_us"`
	ConfirmP50us  float64 `json:"confirm_p50_us,omitempty"`
	ConfirmP99us  float64 `json:"confirm_p99_us,omitempty"`
	// Broker CPU, only with -pid. CPUBasis names the message counted.
	CPUusPerMsg      *float64 `json:"broker_cpu_us_per_msg,omitempty"`
	CPUusPerDelivery *float64 `json:"broker_cpu_us_per_delivery,omitempty"`
	CPUCores         *float64 `json:"broker_cpu_cores,omitempty"`
	CPUBasis         string   `json:"broker_cpu_basis,omitempty"`
	// ClientCores is this tool's own CPU use (Linux): near the machine's
	// core count, the client rather than the broker may be the limit.
	ClientCores *float64 `json:"client_cpu_cores,omitempty"`
	// MachineCores is the busy CPU of the whole machine (Linux); well above
	// broker plus client, something else was competing for the CPU.
	MachineCores *float64 `json:"machine_cpu_cores,omitempty"`
	// Undrained: messages (fanout: deliveries) not received by the end of
	// the bounded drain.
	Undrained int64 `json:"undrained"`
	// Interrupted: a signal ended the measured window early; the figures
	// are those of the window so far.
	Interrupted bool `json:"interrupted,omitempty"`
}

func (r *result) setInterrupted() { r.Interrupted = true }

// labels returns the plain-text names of SentPerS and DeliveredPerS.
func (r *result) labels() (sent, delivered string) {
	switch r.Scenario {
	case scFanout:
		return "published", "deliveries"
	case scDurWait, scDurPipe:
		return "sent", "consumed"
	default:
		return "sent", "delivered"
	}
}

// write prints r as one line, JSON or text.
func (r *result) write(w io.Writer, asJSON bool) error {
	return writeLine(w, asJSON, r, r.text)
}

// text builds r's plain-text line.
func (r *result) text(b *strings.Builder) {
	sl, dl := r.labels()
	fmt.Fprintf(b, "%-17s run=%-6s size=%d P=%d C=%d", r.Scenario, r.Run, r.Size, r.Producers, r.Consumers)
	if r.Inflight > 0 {
		fmt.Fprintf(b, " inflight=%d", r.Inflight)
	}
	fmt.Fprintf(b, " ack=%s", r.Ack)
	if r.Prefetch > 0 {
		fmt.Fprintf(b, " prefetch=%d", r.Prefetch)
	}
	fmt.Fprintf(b, " window=%.2fs", r.WindowS)
	if r.Scenario == scDurWait || r.Scenario == scDurPipe {
		fmt.Fprintf(b, " confirmed=%.0f/s", r.ConfirmedPerS)
	}
	fmt.Fprintf(b, " %s=%.0f/s %s=%.0f/s", sl, r.SentPerS, dl, r.DeliveredPerS)
	fmt.Fprintf(b, " e2e_p50=%s e2e_p99=%s", fmtUs(r.E2EP50us), fmtUs(r.E2EP99us))
	if r.Scenario == scDurWait || r.Scenario == scDurPipe {
		fmt.Fprintf(b, " confirm_p50=%s confirm_p99=%s", fmtUs(r.ConfirmP50us), fmtUs(r.ConfirmP99us))
	}
	cpuFigures{r.CPUusPerMsg, r.CPUusPerDelivery, r.CPUCores, r.ClientCores, r.MachineCores, r.CPUBasis}.text(b, false)
	fmt.Fprintf(b, " undrained=%d", r.Undrained)
	if r.Interrupted {
		b.WriteString(" interrupted")
	}
}

// writeLine prints r as one line: JSON, or the plain text that text builds.
func writeLine(w io.Writer, asJSON bool, r any, text func(*strings.Builder)) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var b strings.Builder
	text(&b)
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// cpuFigures are the CPU fields of result and mqttResult, for text output.
type cpuFigures struct {
	perMsg, perDelivery, brokerCores, clientCores, machineCores *float64
	basis                                                       string
}

// text appends the CPU figures present. With coresAlone false,
// broker_cores is printed only along with a per-message figure.
func (c cpuFigures) text(b *strings.Builder, coresAlone bool) {
	if c.perMsg != nil {
		fmt.Fprintf(b, " broker_cpu=%.2fus/%s", *c.perMsg, c.basis)
		if c.perDelivery != nil {
			fmt.Fprintf(b, " (%.2fus/delivery)", *c.perDelivery)
		}
	}
	if c.brokerCores != nil && (coresAlone || c.perMsg != nil) {
		fmt.Fprintf(b, " broker_cores=%.2f", *c.brokerCores)
	}
	if c.clientCores != nil {
		fmt.Fprintf(b, " client_cores=%.2f", *c.clientCores)
	}
	if c.machineCores != nil {
		fmt.Fprintf(b, " machine_cores=%.2f", *c.machineCores)
	}
}

// fmtUs is internal/bench's reading format of microseconds.
func fmtUs(us float64) string { return ibench.FmtUs(us) }

// usOf converts a quantile to microseconds, keeping -1 for "not measured".
func usOf(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return float64(d) / float64(time.Microsecond)
}

// medianResult returns the median of every figure over rs (at least one);
// Undrained is the maximum, so a lossy run is never hidden.
func medianResult(rs []*result) *result {
	m := *rs[0]
	m.Run = "median"
	m.Destination = ""
	med := func(get func(*result) *float64) float64 { return *medianOf(rs, get) }
	m.WindowS = med(func(r *result) *float64 { return &r.WindowS })
	m.SentPerS = med(func(r *result) *float64 { return &r.SentPerS })
	m.DeliveredPerS = med(func(r *result) *float64 { return &r.DeliveredPerS })
	m.ConfirmedPerS = med(func(r *result) *float64 { return &r.ConfirmedPerS })
	m.E2EP50us = med(func(r *result) *float64 { return &r.E2EP50us })
	m.E2EP99us = med(func(r *result) *float64 { return &r.E2EP99us })
	m.ConfirmP50us = med(func(r *result) *float64 { return &r.ConfirmP50us })
	m.ConfirmP99us = med(func(r *result) *float64 { return &r.ConfirmP99us })
	m.CPUusPerMsg = medianOf(rs, func(r *result) *float64 { return r.CPUusPerMsg })
	m.CPUusPerDelivery = medianOf(rs, func(r *result) *float64 { return r.CPUusPerDelivery })
	m.CPUCores = medianOf(rs, func(r *result) *float64 { return r.CPUCores })
	m.ClientCores = medianOf(rs, func(r *result) *float64 { return r.ClientCores })
	m.MachineCores = medianOf(rs, func(r *result) *float64 { return r.MachineCores })
	for _, r := range rs {
		m.Undrained = max(m.Undrained, r.Undrained)
	}
	return &m
}

// medianOf returns the median of the values get returns for rs, leaving
// out nil ones, or nil when all are nil.
func medianOf[R any](rs []R, get func(R) *float64) *float64 {
	xs := make([]float64, 0, len(rs))
	for _, r := range rs {
		if p := get(r); p != nil {
			xs = append(xs, *p)
		}
	}
	if len(xs) == 0 {
		return nil
	}
	v := median(xs)
	return &v
}

// median returns the median of xs (the mean of the middle two for an even
// count); xs is sorted in place.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

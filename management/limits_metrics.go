package management

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/junctionmq/junction/core"
)

// limitsCollector serves the metrics of bounded memory: messages dropped
// or refused by reason, the broker's memory budget, paged messages per
// queue, and whether durable sends are refused for the disk limit. Like
// collector it reads the broker on every scrape.
type limitsCollector struct {
	b          *core.Broker
	rejections func() map[string]map[string]uint64

	dropped, memUsed, memMax, queuePaged, diskFull, rejected *prometheus.Desc
	preauthRefused, preauthHeld, preauthMax, frameTimeouts   *prometheus.Desc
}

func newLimitsCollector(b *core.Broker, rejections func() map[string]map[string]uint64) *limitsCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("junction_"+name, help, labels, nil)
	}
	return &limitsCollector{b: b, rejections: rejections,
		rejected: d("connections_rejected_total", "Connections a listener turned away by a limit, by reason: max_conns, max_conns_per_ip, rate (attempts per second per IP).", "listener", "reason"),
		dropped: d("messages_dropped_total", "Messages not queued because of a full queue, the memory budget or the disk limit, "+
			"by reason: queue_full (DROP), non_durable_over_budget (non-durable over a PAGE limit), ring_full (the oldest of a full ring queue), "+
			"refused_full (FAIL) and refused_disk_full (durable send over the disk limit) are refused sends.", "reason"),
		memUsed:    d("memory_used_bytes", "Estimated bytes of the messages held in memory, counted against the broker's budget."),
		memMax:     d("memory_max_bytes", "The broker's memory budget for messages (max-memory); 0 means unlimited."),
		queuePaged: d("queue_paged_messages", "Messages of the queue in its page store on disk (part of its depth).", "queue", "address"),
		diskFull:   d("disk_full", "1 while durable sends are refused because the stores are over their disk limits, else 0."),
		preauthRefused: d("preauth_refused_total", "Connections refused before the client had authenticated, by protocol and reason: "+
			"frame_too_large (a frame or packet over limits.preauth-max-frame-size, or an AMQP SASL frame over 512 bytes), "+
			"budget (limits.preauth-budget had no room).", "protocol", "reason"),
		preauthHeld:   d("preauth_bytes", "Bytes held for connections that have not authenticated yet, counted against limits.preauth-budget."),
		preauthMax:    d("preauth_budget_bytes", "The pre-authentication budget (limits.preauth-budget); 0 means unbounded."),
		frameTimeouts: d("frame_timeouts_total", "Connections closed because one frame took longer than limits.frame-timeout plus 1s per limits.frame-min-rate bytes to arrive, by protocol.", "protocol"),
	}
}

// Describe implements prometheus.Collector.
func (c *limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.dropped, c.memUsed, c.memMax, c.queuePaged, c.diskFull, c.rejected,
		c.preauthRefused, c.preauthHeld, c.preauthMax, c.frameTimeouts} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *limitsCollector) Collect(ch chan<- prometheus.Metric) {
	m := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}
	for reason, n := range c.b.DropStats() {
		m(c.dropped, prometheus.CounterValue, float64(n), reason.String())
	}
	mem := c.b.Memory()
	m(c.memUsed, prometheus.GaugeValue, float64(mem.Used))
	m(c.memMax, prometheus.GaugeValue, float64(mem.Max))
	for _, q := range c.b.QueueStats() {
		m(c.queuePaged, prometheus.GaugeValue, float64(q.Paged), q.Name, q.Address)
	}
	full := 0.0
	if c.b.DiskFull() != "" {
		full = 1
	}
	m(c.diskFull, prometheus.GaugeValue, full)
	g := c.b.GuardStats()
	m(c.preauthHeld, prometheus.GaugeValue, float64(g.PreAuthHeld))
	m(c.preauthMax, prometheus.GaugeValue, float64(g.PreAuthMax))
	for proto, byReason := range g.PreAuthRefused {
		for reason, n := range byReason {
			m(c.preauthRefused, prometheus.CounterValue, float64(n), proto, reason)
		}
	}
	for proto, n := range g.FrameTimeouts {
		m(c.frameTimeouts, prometheus.CounterValue, float64(n), proto)
	}
	if c.rejections != nil {
		for listener, byReason := range c.rejections() {
			for reason, n := range byReason {
				m(c.rejected, prometheus.CounterValue, float64(n), listener, reason)
			}
		}
	}
}

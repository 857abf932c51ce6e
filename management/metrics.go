package management

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/junctionmq/junction/core"
)

// collector reads the broker's statistics on every scrape: nothing is
// counted twice and a deleted queue's series disappear with it.
type collector struct {
	cfg Config
	b   *core.Broker

	buildInfo, uptime                                      *prometheus.Desc
	queueDepth, queueConsumers, queueEnqueued, queueDeq    *prometheus.Desc
	queues, addresses                                      *prometheus.Desc
	conns, connsTotal, msgsIn, msgsOut, bytesIn, bytesOut  *prometheus.Desc
	jAppends, jSyncs, jBatches, jBatchRecords, jCompaction *prometheus.Desc
	jSyncSeconds, jFiles, jBytes                           *prometheus.Desc
	authzDenials                                           *prometheus.Desc
	duplicates, queueScheduled, scheduledJobs              *prometheus.Desc
}

func newCollector(cfg Config, b *core.Broker) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("junction_"+name, help, labels, nil)
	}
	ql := []string{"queue", "address"}
	pl := []string{"protocol"}
	return &collector{cfg: cfg, b: b,
		buildInfo:      d("build_info", "Always 1; the version label names the running build.", "version"),
		uptime:         d("uptime_seconds", "Seconds since the broker started."),
		queueDepth:     d("queue_depth", "Messages in the queue: ready, scheduled and in flight.", ql...),
		queueConsumers: d("queue_consumers", "Consumers attached to the queue.", ql...),
		queueEnqueued:  d("queue_enqueued_total", "Messages added to the queue since the broker started.", ql...),
		queueDeq:       d("queue_dequeued_total", "Messages acknowledged from the queue since the broker started.", ql...),
		queues:         d("queues", "Queues, subscriptions included."),
		addresses:      d("addresses", "Addresses."),
		conns:          d("connections", "Open client connections.", pl...),
		connsTotal:     d("connections_opened_total", "Client connections opened since the broker started.", pl...),
		msgsIn:         d("messages_in_total", "Messages received from clients.", pl...),
		msgsOut:        d("messages_out_total", "Messages delivered to clients.", pl...),
		bytesIn:        d("bytes_in_total", "Message bytes received from clients.", pl...),
		bytesOut:       d("bytes_out_total", "Message bytes delivered to clients.", pl...),
		jAppends:       d("journal_appends_total", "Records appended to the message journal."),
		jSyncs:         d("journal_syncs_total", "Syncs (fdatasync) of the message journal."),
		jBatches:       d("journal_batches_total", "Write batches of the message journal (group commits)."),
		jBatchRecords:  d("journal_batch_records_total", "Records written in batches; divided by batches, the mean batch size."),
		jCompaction:    d("journal_compactions_total", "Compactions of the message journal."),
		jSyncSeconds:   d("journal_sync_seconds", "Duration of the message journal's syncs."),
		jFiles:         d("journal_files", "Message journal files on disk."),
		jBytes:         d("journal_bytes", "Bytes of the message journal's files on disk."),
		authzDenials:   d("authorization_denials_total", "Client operations the Authorizer refused.", pl...),
		queueScheduled: d("queue_scheduled", "Messages of the queue held back until their delivery time or redelivery delay (part of its depth).", ql...),
		scheduledJobs:  d("scheduled_jobs", "Repeating messages the broker keeps (AMQ_SCHEDULED_REPEAT, AMQ_SCHEDULED_CRON)."),
		duplicates:     d("address_duplicates_total", "Sends refused as duplicates of an earlier one (_AMQ_DUPL_ID) since the broker started.", "address"),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.buildInfo, c.uptime, c.queueDepth, c.queueConsumers, c.queueEnqueued,
		c.queueDeq, c.queues, c.addresses, c.conns, c.connsTotal, c.msgsIn, c.msgsOut, c.bytesIn, c.bytesOut,
		c.jAppends, c.jSyncs, c.jBatches, c.jBatchRecords, c.jCompaction, c.jSyncSeconds, c.jFiles, c.jBytes} {
		ch <- d
	}
	ch <- c.authzDenials
	ch <- c.duplicates
	ch <- c.queueScheduled
	ch <- c.scheduledJobs
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	m := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}
	m(c.buildInfo, gauge, 1, c.cfg.Version)
	m(c.uptime, gauge, time.Since(c.b.Started()).Seconds())

	qs := c.b.QueueStats()
	m(c.queues, gauge, float64(len(qs)))
	for i := range qs {
		q := &qs[i]
		m(c.queueDepth, gauge, float64(q.Depth), q.Name, q.Address)
		m(c.queueConsumers, gauge, float64(q.Consumers), q.Name, q.Address)
		m(c.queueEnqueued, counter, float64(q.Enqueued), q.Name, q.Address)
		m(c.queueDeq, counter, float64(q.Dequeued), q.Name, q.Address)
		m(c.queueScheduled, gauge, float64(q.Scheduled), q.Name, q.Address)
	}
	m(c.addresses, gauge, float64(len(c.b.Addresses())))
	m(c.scheduledJobs, gauge, float64(len(c.b.ScheduledJobs())))
	for a, n := range c.b.Duplicates() {
		m(c.duplicates, counter, float64(n), a)
	}

	_, denials := c.b.AuthzDenials()
	for _, p := range c.b.ProtocolStats() {
		m(c.authzDenials, counter, float64(denials[p.Protocol]), p.Protocol)
		delete(denials, p.Protocol)
		m(c.conns, gauge, float64(p.Connections), p.Protocol)
		m(c.connsTotal, counter, float64(p.ConnectionsTotal), p.Protocol)
		m(c.msgsIn, counter, float64(p.MessagesIn), p.Protocol)
		m(c.msgsOut, counter, float64(p.MessagesOut), p.Protocol)
		m(c.bytesIn, counter, float64(p.BytesIn), p.Protocol)
		m(c.bytesOut, counter, float64(p.BytesOut), p.Protocol)
	}
	for proto, n := range denials {
		m(c.authzDenials, counter, float64(n), proto)
	}

	if c.cfg.Journal == nil {
		return
	}
	j := c.cfg.Journal()
	m(c.jAppends, counter, float64(j.Appends))
	m(c.jSyncs, counter, float64(j.Syncs))
	m(c.jBatches, counter, float64(j.Batches))
	m(c.jBatchRecords, counter, float64(j.BatchRecords))
	m(c.jCompaction, counter, float64(j.Compactions))
	m(c.jFiles, gauge, float64(j.Files))
	m(c.jBytes, gauge, float64(j.Bytes))
	count, buckets := syncHistogram(j)
	ch <- prometheus.MustNewConstHistogram(c.jSyncSeconds, count, j.SyncSeconds, buckets)
}

// syncHistogram turns the journal's per-bucket counts into Prometheus's
// cumulative buckets; the total count is Syncs, or the buckets' sum if
// that is larger (the two are read at slightly different moments).
func syncHistogram(j JournalStats) (count uint64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(j.SyncLatencyBuckets))
	var cum uint64
	for i, bound := range j.SyncLatencyBuckets {
		if i < len(j.SyncLatencyCounts) {
			cum += j.SyncLatencyCounts[i]
		}
		buckets[bound] = cum
	}
	for i := len(j.SyncLatencyBuckets); i < len(j.SyncLatencyCounts); i++ {
		cum += j.SyncLatencyCounts[i]
	}
	return max(cum, j.Syncs), buckets
}

package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Scheduled delivery, as Artemis and ActiveMQ Classic express it in
// message properties (a STOMP header, an AMQP application property, an
// MQTT 5 user property; AMQP's x-opt-delivery-time and
// x-opt-delivery-delay annotations and STOMP's AMQ_SCHEDULED_DELAY header
// are read by their front-ends into Message.DeliveryTime).
//
// A message delivered once at a later time waits in each of its queues
// (scheduled: counted, listed and cancellable per queue) and is
// journaled there like any message:
//
//	AMQ_SCHEDULED_TIME, _AMQ_SCHED_DELIVERY   absolute, ms since the epoch
//	AMQ_SCHEDULED_DELAY                       ms from the send
//
// A repeating message, ActiveMQ's
//
//	AMQ_SCHEDULED_REPEAT   deliveries after the first (0: none)
//	AMQ_SCHEDULED_PERIOD   ms between them
//	AMQ_SCHEDULED_CRON     a five-field cron entry (cron.go), local time
//
// is a job: the broker keeps the message and, at each time, sends a copy
// (a new message, without the scheduling properties) to its address,
// where it is routed as any send then. Without a cron entry the times
// are the first delivery time (the send, or the time the properties above
// give) and then every period, repeat times. With one, each time the cron
// entry matches starts a burst of repeat+1 copies, delay and then period
// apart, forever (until cancelled). Jobs are kept in the message journal
// (as client records of the broker's own scheduler), and each copy is
// written in one journal transaction with the job's new state, so a
// restart or a kill -9 neither loses nor repeats a delivery; times missed
// while the broker was down are delivered at start, except a cron
// entry's, which resumes at its next match. A repeating message cannot be
// sent in a transaction (ErrInvalidMessage): its job would have to be
// created atomically with the rest.

// The scheduling properties.
const (
	PropScheduledTime   = "AMQ_SCHEDULED_TIME"
	PropSchedDelivery   = "_AMQ_SCHED_DELIVERY"
	PropScheduledDelay  = "AMQ_SCHEDULED_DELAY"
	PropScheduledPeriod = "AMQ_SCHEDULED_PERIOD"
	PropScheduledRepeat = "AMQ_SCHEDULED_REPEAT"
	PropScheduledCron   = "AMQ_SCHEDULED_CRON"
)

var scheduleProps = []string{PropScheduledTime, PropSchedDelivery, PropScheduledDelay, PropScheduledPeriod, PropScheduledRepeat, PropScheduledCron}

// schedulerClientID holds the jobs' client records; no client can name
// it (STOMP and MQTT cannot carry a NUL).
const schedulerClientID = "\x00junction/scheduler"

// ErrScheduledNotFound: no scheduled message or job has that id.
var ErrScheduledNotFound = errors.New("core: no scheduled message or job with this id")

// jobSpec is how a job repeats.
type jobSpec struct {
	delay, period time.Duration
	repeat        uint64
	cron          *cronSpec
	cronText      string
}

// schedProp reads a numeric scheduling property (an integer, or its
// text); ok is false when m does not have it.
func schedProp(m *Message, name string) (n int64, ok bool, err error) {
	v, has := m.Properties[name]
	if !has || v == nil {
		return 0, false, nil
	}
	switch x := v.(type) {
	case int64:
		n = x
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<62 {
			return 0, true, fmt.Errorf("%w: %s must be a whole number, got %v", ErrInvalidMessage, name, x)
		}
		n = int64(x)
	case string:
		n, err = strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return 0, true, fmt.Errorf("%w: %s must be a whole number, got %q", ErrInvalidMessage, name, x)
		}
	default:
		return 0, true, fmt.Errorf("%w: %s must be a number, got %T", ErrInvalidMessage, name, v)
	}
	if n < 0 {
		return 0, true, fmt.Errorf("%w: %s must not be negative, got %d", ErrInvalidMessage, name, n)
	}
	return n, true, nil
}

// applySchedule reads m's scheduling properties: it sets DeliveryTime
// for a later delivery and returns the job of a repeating message (nil
// for others).
func applySchedule(m *Message, now time.Time) (*jobSpec, error) {
	if len(m.Properties) == 0 {
		return nil, nil
	}
	var vals [5]int64
	var has [5]bool
	for i, name := range scheduleProps[:5] {
		n, ok, err := schedProp(m, name)
		if err != nil {
			return nil, err
		}
		vals[i], has[i] = n, ok
	}
	switch {
	case has[0] && vals[0] > 0:
		m.DeliveryTime = time.UnixMilli(vals[0])
	case has[1] && vals[1] > 0:
		m.DeliveryTime = time.UnixMilli(vals[1])
	case has[2] && vals[2] > 0:
		m.DeliveryTime = now.Add(time.Duration(vals[2]) * time.Millisecond)
	}
	var spec jobSpec
	if v, ok := m.Properties[PropScheduledCron]; ok && v != nil {
		s, _ := v.(string)
		c, err := parseCron(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidMessage, PropScheduledCron, err)
		}
		spec.cron, spec.cronText = c, s
	}
	spec.repeat = uint64(vals[4])
	spec.period = time.Duration(vals[3]) * time.Millisecond
	if spec.cron == nil && spec.repeat == 0 {
		return nil, nil
	}
	if d := m.DeliveryTime.Sub(now); d > 0 && spec.cron != nil {
		spec.delay = d // with a cron entry, the delay applies to each burst
	}
	return &spec, nil
}

// schedJob is one repeating message. Its fields are guarded by
// scheduler.mu.
type schedJob struct {
	id    uint64
	tmpl  *Message
	spec  jobSpec
	base  time.Time // the burst's start: the first time, or the cron match
	k     uint64    // copies sent in the burst
	fired uint64    // copies sent in all
	timer schedTimer
	busy  bool // a copy is being committed
	// cancelled while busy: the commit under way writes the job's
	// record, so fire deletes it once that is done.
	cancelled bool
	retry     time.Duration // wait before trying a failed copy again
}

// due is the time of the job's next copy.
func (j *schedJob) due() time.Time {
	return j.base.Add(j.spec.delay + time.Duration(j.k)*j.spec.period)
}

// advance moves j past the copy just sent; false when it is done.
func (j *schedJob) advance(now time.Time) bool {
	j.fired++
	j.k++
	if j.k <= j.spec.repeat {
		return true
	}
	if j.spec.cron == nil {
		return false
	}
	j.k = 0
	from := j.base
	if now.After(from) {
		from = now
	}
	j.base = j.spec.cron.next(from)
	return !j.base.IsZero()
}

// scheduler holds the jobs.
type scheduler struct {
	mu     sync.Mutex
	clock  schedClock // set by startScheduler, never changed
	jobs   map[uint64]*schedJob
	sess   *Session // holds schedulerClientID; nil until started
	closed bool
}

// schedClock is the time the scheduler keeps its jobs by: realClock but
// in tests, which move a fake one on (Config.schedClock) to see a cron
// job fire without waiting for its minutes.
type schedClock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, as
	// time.AfterFunc does.
	AfterFunc(d time.Duration, f func()) schedTimer
}

// schedTimer is a timer of a schedClock (a *time.Timer of realClock).
type schedTimer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) schedTimer { return time.AfterFunc(d, f) }

// encodeJob writes j's state and message for its client record.
func encodeJob(j *schedJob) []byte {
	b := []byte{1}
	b = appendUvarint(b, j.k)
	b = appendTime(b, j.base)
	b = appendUvarint(b, j.fired)
	b = appendUvarint(b, uint64(j.spec.delay/time.Millisecond))
	b = appendUvarint(b, uint64(j.spec.period/time.Millisecond))
	b = appendUvarint(b, j.spec.repeat)
	b = appendStr(b, j.spec.cronText)
	return appendStr(b, string(encodeMessage(j.tmpl, nil)))
}

func decodeJob(id uint64, p []byte) (*schedJob, error) {
	d := &decoder{b: p}
	if d.byte() != 1 {
		d.fail()
	}
	j := &schedJob{id: id}
	j.k = d.uvarint()
	j.base = d.time()
	j.fired = d.uvarint()
	j.spec.delay = time.Duration(d.uvarint()) * time.Millisecond
	j.spec.period = time.Duration(d.uvarint()) * time.Millisecond
	j.spec.repeat = d.uvarint()
	j.spec.cronText = d.str()
	msg := d.bytes()
	if d.err != nil || len(d.b) != 0 {
		return nil, fmt.Errorf("%w: scheduled job %d", errCorruptRecord, id)
	}
	m, _, err := decodeMessage(msg)
	if err != nil {
		return nil, err
	}
	j.tmpl = m
	if j.spec.cronText != "" {
		if j.spec.cron, err = parseCron(j.spec.cronText); err != nil {
			return nil, fmt.Errorf("%w: scheduled job %d: %w", errCorruptRecord, id, err)
		}
	}
	return j, nil
}

// startScheduler arms the jobs a previous run left in the journal, by
// clock (nil: the real one). The scheduler's session is opened with the
// first job (schedSessLocked): a broker that never has one never holds
// it. An access broker (cluster mode) keeps no jobs: its groups' brokers
// do.
//
// A job's copies due while the broker was down are sent now, except a
// cron job's: a cron job whose next copy's time has passed (its entry
// matched while the broker was down, or a burst was cut short by the
// stop) resumes at its entry's next match, a new burst; the copies it
// missed are not sent. Its record is left as it is: a start before that
// match resumes it there again, and the match's first copy writes the
// job's new state.
func (b *Broker) startScheduler(clock schedClock) error {
	if clock == nil {
		clock = realClock{}
	}
	b.sched.mu.Lock()
	b.sched.clock = clock
	b.sched.mu.Unlock()
	if b.cluster != nil {
		return nil
	}
	recs := b.clientRecords(schedulerClientID)
	b.sched.mu.Lock()
	defer b.sched.mu.Unlock()
	b.sched.jobs = make(map[uint64]*schedJob)
	if len(recs) == 0 {
		return nil
	}
	if _, err := b.schedSessLocked(); err != nil {
		return err
	}
	now := clock.Now()
	for _, r := range recs {
		id, err := strconv.ParseUint(r.Key, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: scheduled job key %q", errCorruptRecord, r.Key)
		}
		j, err := decodeJob(id, r.Value)
		if err != nil {
			return err
		}
		if j.spec.cron != nil && j.due().Before(now) {
			next := j.spec.cron.next(now)
			if next.IsZero() {
				// It never matches again: done, without a copy.
				b.setClientRecord(schedulerClientID, r.Key, nil, nil)
				continue
			}
			j.k, j.base = 0, next
		}
		b.sched.jobs[id] = j
		b.armLocked(j)
	}
	return nil
}

// schedSessLocked returns the scheduler's session, opening it on first
// use (Broker.sched.mu -> Broker.mu).
func (b *Broker) schedSessLocked() (*Session, error) {
	if b.sched.sess != nil {
		return b.sched.sess, nil
	}
	if b.sched.closed || b.sched.jobs == nil {
		return nil, ErrClosed
	}
	s, err := b.NewSession(SessionOptions{ClientID: schedulerClientID})
	if err != nil {
		return nil, err
	}
	b.sched.sess = s
	return s, nil
}

// stopScheduler stops the jobs' timers (Close).
func (b *Broker) stopScheduler() {
	b.sched.mu.Lock()
	defer b.sched.mu.Unlock()
	b.sched.closed = true
	for _, j := range b.sched.jobs {
		if j.timer != nil {
			j.timer.Stop()
		}
	}
}

func (b *Broker) armLocked(j *schedJob) {
	if b.sched.closed {
		return
	}
	d := j.due().Sub(b.sched.clock.Now())
	if j.timer == nil {
		j.timer = b.sched.clock.AfterFunc(d, func() { b.fire(j) })
	} else {
		j.timer.Reset(d)
	}
}

// txDup is a duplicate id a transaction writes with its client records:
// a repeating message's, with its job.
type txDup struct {
	address string
	e       *dupEntry
}

// addJob keeps m as a repeating job, starting now by the scheduler's
// clock; done (if not nil) is called once the job is in the journal. A
// duplicate id (dedup.go) is checked as for any send, and written with
// the job in one journal transaction: a producer that sends the message
// again does not start a second job.
func (b *Broker) addJob(m *Message, spec *jobSpec, done func(error)) error {
	now := b.sched.clock.Now()
	j := &schedJob{id: m.ID, tmpl: m, spec: *spec, base: now}
	if !m.DeliveryTime.IsZero() && spec.cron == nil {
		j.base = m.DeliveryTime
	}
	if spec.cron != nil {
		j.base = spec.cron.next(now)
		if j.base.IsZero() {
			return fmt.Errorf("%w: %s %q never matches", ErrInvalidMessage, PropScheduledCron, spec.cronText)
		}
	}
	b.sched.mu.Lock()
	sess, err := b.schedSessLocked()
	b.sched.mu.Unlock()
	if err != nil {
		return err
	}
	var de *dupEntry
	if key := dupKey(m, b.settings.resolve(m.Address).DuplicateIDFromMessageID); key != "" {
		var dup bool
		if de, dup = b.claimDup(m.Address, key); dup {
			b.countDup(m.Address)
			if done != nil {
				b.waitDup(de, done)
			}
			return nil
		}
	}
	tx, err := sess.Begin()
	if err == nil {
		tx.SetClientRecord(strconv.FormatUint(j.id, 10), encodeJob(j))
		if de != nil {
			tx.dups = append(tx.dups, txDup{m.Address, de})
		}
		err = tx.Commit(context.Background())
	}
	if de != nil {
		b.settleDup(m.Address, de, err)
	}
	if err != nil {
		return err
	}
	b.sched.mu.Lock()
	b.sched.jobs[j.id] = j
	b.armLocked(j)
	b.sched.mu.Unlock()
	if done != nil {
		done(nil)
	}
	return nil
}

// fire sends j's next copy, in one journal transaction with its new state
// (or its end), and arms the timer for the one after.
func (b *Broker) fire(j *schedJob) {
	b.sched.mu.Lock()
	if b.sched.closed || b.sched.jobs[j.id] != j || j.busy {
		b.sched.mu.Unlock()
		return
	}
	j.busy = true
	now := b.sched.clock.Now()
	c := j.copyOf()
	next := *j
	more := next.advance(now)
	var state []byte
	if more {
		state = encodeJob(&next)
	}
	sess := b.sched.sess
	b.sched.mu.Unlock()

	// The job's state in memory becomes next's once the copy and next
	// are journaled together, before the copy is routed: a consumer
	// that receives it sees it counted (ScheduledJobs' Sent), and a
	// copy the journal did not take is never counted, in memory or
	// after a restart (which reads the job's record).
	committed := func() {
		b.sched.mu.Lock()
		j.retry = 0
		j.k, j.base, j.fired = next.k, next.base, next.fired
		if !more && b.sched.jobs[j.id] == j {
			delete(b.sched.jobs, j.id)
		}
		b.sched.mu.Unlock()
	}
	err := func() error {
		tx, err := sess.Begin()
		if err != nil {
			return err
		}
		tx.committed = committed
		if err := tx.Send(c); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.SetClientRecord(strconv.FormatUint(j.id, 10), state); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit(context.Background())
	}()

	b.sched.mu.Lock()
	defer b.sched.mu.Unlock()
	j.busy = false
	if j.cancelled {
		// Cancelled while the copy was committed: the record is still
		// there (rewritten, or untouched by a failed commit) unless the
		// commit ended the job.
		if err != nil || more {
			b.setClientRecord(schedulerClientID, strconv.FormatUint(j.id, 10), nil, nil)
		}
		return
	}
	if err != nil {
		if b.sched.closed || errors.Is(err, ErrClosed) || errors.Is(err, ErrSessionClosed) {
			return
		}
		// Tried again, backing off from a second to a minute: the
		// address may come back (auto-create off, a full queue with
		// FAIL, the disk over its limit).
		j.retry = min(max(2*j.retry, time.Second), time.Minute)
		b.log.Warn().Err(err).Uint64("job", j.id).Str("address", j.tmpl.Address).Dur("retry_in", j.retry).
			Msg("scheduled message not sent; trying again")
		j.timer.Reset(j.retry)
		return
	}
	if more { // committed has moved j on
		b.armLocked(j)
	}
}

// copyOf is the message j sends now: its template without the scheduling
// properties, as a new message.
func (j *schedJob) copyOf() *Message {
	t := j.tmpl
	c := &Message{Address: t.Address, RoutingType: t.RoutingType, Durable: t.Durable, Priority: t.Priority,
		Expiration: t.Expiration, Body: t.Body, ContentType: t.ContentType,
		CorrelationID: t.CorrelationID, ReplyTo: t.ReplyTo, GroupID: t.GroupID}
	if len(t.Properties) > 0 {
		c.Properties = make(map[string]any, len(t.Properties))
		for k, v := range t.Properties {
			if !slices.Contains(scheduleProps, k) {
				c.Properties[k] = v
			}
		}
	}
	return c
}

// ScheduledJob describes a repeating message (AMQ_SCHEDULED_REPEAT,
// AMQ_SCHEDULED_CRON).
type ScheduledJob struct {
	ID          uint64 // the message's id; cancels it
	Address     string
	RoutingType RoutingType
	Next        time.Time // the next copy's time
	Sent        uint64    // copies sent so far (counted before a consumer can receive them)
	Repeat      uint64    // copies after the first of each burst
	Period      time.Duration
	Delay       time.Duration // before each burst of a cron job
	Cron        string
	Message     *Message // the template; must not be changed
}

// ScheduledJobs lists the repeating messages, by next time.
func (b *Broker) ScheduledJobs() []ScheduledJob {
	b.sched.mu.Lock()
	out := make([]ScheduledJob, 0, len(b.sched.jobs))
	for _, j := range b.sched.jobs {
		out = append(out, ScheduledJob{ID: j.id, Address: j.tmpl.Address, RoutingType: j.tmpl.RoutingType,
			Next: j.due(), Sent: j.fired, Repeat: j.spec.repeat, Period: j.spec.period, Delay: j.spec.delay,
			Cron: j.spec.cronText, Message: j.tmpl})
	}
	b.sched.mu.Unlock()
	slices.SortFunc(out, func(x, y ScheduledJob) int {
		if c := x.Next.Compare(y.Next); c != 0 {
			return c
		}
		return cmpUint(x.ID, y.ID)
	})
	return out
}

// CancelJob ends the repeating message id; its copies already sent stay.
func (b *Broker) CancelJob(id uint64) error {
	b.sched.mu.Lock()
	j := b.sched.jobs[id]
	if j == nil {
		b.sched.mu.Unlock()
		return fmt.Errorf("%w: %d", ErrScheduledNotFound, id)
	}
	delete(b.sched.jobs, id)
	if j.timer != nil {
		j.timer.Stop()
	}
	j.cancelled = true
	busy := j.busy
	b.sched.mu.Unlock()
	if busy {
		return nil // fire deletes the record after its commit
	}
	ch := make(chan error, 1)
	b.setClientRecord(schedulerClientID, strconv.FormatUint(id, 10), nil, func(err error) { ch <- err })
	return <-ch
}

// ScheduledMessage is a message waiting in a queue for its delivery time
// (or its redelivery delay).
type ScheduledMessage struct {
	Message       *Message // must not be changed
	Due           time.Time
	DeliveryCount uint32
}

// ScheduledMessages lists up to limit (<= 0: 100) of the messages queue
// name holds back, by due time, from offset, and how many there are.
func (b *Broker) ScheduledMessages(name string, offset, limit int) ([]ScheduledMessage, int, error) {
	q := b.Queue(name)
	if q == nil {
		return nil, 0, fmt.Errorf("%w: %q", ErrQueueNotFound, name)
	}
	if limit <= 0 {
		limit = 100
	}
	q.mu.Lock()
	s := slices.Clone(q.sched)
	q.mu.Unlock()
	slices.SortFunc(s, func(x, y *ref) int {
		if x.due != y.due {
			return cmpInt64(x.due, y.due)
		}
		return cmpUint(x.seq, y.seq)
	})
	total := len(s)
	if offset < 0 {
		offset = 0
	}
	if offset > total {
		offset = total
	}
	s = s[offset:min(total, offset+limit)]
	out := make([]ScheduledMessage, len(s))
	for i, r := range s {
		out[i] = ScheduledMessage{Message: r.msg, Due: time.Unix(0, r.due), DeliveryCount: r.failures}
	}
	return out, total, nil
}

// CancelScheduled removes the scheduled message id from queue name, as
// if consumed (a durable one is deleted from the journal).
func (b *Broker) CancelScheduled(name string, id uint64) error {
	q := b.Queue(name)
	if q == nil {
		return fmt.Errorf("%w: %q", ErrQueueNotFound, name)
	}
	var moves []move
	q.mu.Lock()
	var found *ref
	for _, r := range q.sched {
		if r.msg.ID == id {
			found = r
			break
		}
	}
	if found != nil && q.unqueueLocked(found) {
		q.gone(found)
		if found.durable {
			moves = append(moves, move{found, settled})
		}
	} else {
		found = nil
	}
	q.mu.Unlock()
	if found == nil {
		return fmt.Errorf("%w: %d in %q", ErrScheduledNotFound, id, name)
	}
	b.carryOut(moves)
	return nil
}

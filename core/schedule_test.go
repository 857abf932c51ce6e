package core

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestCronNext(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse("2006-01-02 15:04", s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, c := range []struct{ spec, from, want string }{
		{"* * * * *", "2026-12-01 10:00", "2026-12-01 10:01"},
		{"*/15 * * * *", "2026-12-01 10:01", "2026-12-01 10:15"},
		{"0 9 * * 1-5", "2026-12-04 09:00", "2026-12-07 09:00"}, // Friday → Monday
		{"30 2 1 * *", "2026-12-01 03:00", "2027-01-01 02:30"},
		{"0 0 * * 7", "2026-12-01 00:00", "2026-12-06 00:00"}, // 7 is Sunday
		{"5,10 1 * * *", "2026-12-01 01:05", "2026-12-01 01:10"},
		{"0 0 29 2 *", "2026-03-01 00:00", "2028-02-29 00:00"},
	} {
		spec, err := parseCron(c.spec)
		if err != nil {
			t.Fatalf("%q: %v", c.spec, err)
		}
		if got := spec.next(at(c.from)); !got.Equal(at(c.want)) {
			t.Errorf("%q after %s: %s, want %s", c.spec, c.from, got.Format("2006-01-02 15:04 Mon"), c.want)
		}
	}
	for _, bad := range []string{"", "* * * *", "60 * * * *", "* * 0 * *", "*/0 * * * *", "a * * * *", "5-1 * * * *"} {
		if _, err := parseCron(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if spec, _ := parseCron("0 0 30 2 *"); !spec.next(at("2026-01-01 00:00")).IsZero() {
		t.Error("February 30 matched")
	}
}

func schedMsg(addr, body string, props map[string]any) *Message {
	return &Message{Address: addr, RoutingType: Anycast, Durable: true, Priority: DefaultPriority, Body: []byte(body), Properties: props}
}

func TestScheduledPropertiesOneShot(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	ctx := context.Background()
	now := time.Now()
	for _, m := range []*Message{
		schedMsg("one", "time", map[string]any{PropScheduledTime: now.Add(time.Hour).UnixMilli()}),
		schedMsg("one", "sched-delivery", map[string]any{PropSchedDelivery: now.Add(2 * time.Hour).UnixMilli()}),
		schedMsg("one", "delay", map[string]any{PropScheduledDelay: "10800000"}),
		schedMsg("one", "soon", map[string]any{PropScheduledDelay: int64(150)}),
	} {
		if err := s.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Send(ctx, schedMsg("one", "bad", map[string]any{PropScheduledDelay: "soon"})); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("a bad delay: %v", err)
	}
	got, total, err := b.ScheduledMessages("one", 0, 10)
	if err != nil || total != 4 {
		t.Fatalf("%d scheduled, %v", total, err)
	}
	want := []string{"soon", "time", "sched-delivery", "delay"}
	for i, sm := range got {
		if string(sm.Message.Body) != want[i] {
			t.Fatalf("scheduled order %d: %q, want %q", i, sm.Message.Body, want[i])
		}
	}
	if d := got[1].Due.Sub(now.Add(time.Hour)); d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("AMQ_SCHEDULED_TIME due %v off by %v", got[1].Due, d)
	}
	if err := b.CancelScheduled("one", got[2].Message.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.CancelScheduled("one", got[2].Message.ID); !errors.Is(err, ErrScheduledNotFound) {
		t.Fatalf("cancel twice: %v", err)
	}
	_, col := subscribe(t, s, ConsumerOptions{Address: "one", RoutingType: Anycast, Credit: 10})
	if d := col.next(t); body(d) != "soon" || time.Since(now) < 150*time.Millisecond {
		t.Fatalf("got %q after %v", body(d), time.Since(now))
	}
	col.none(t, 50*time.Millisecond)
	if st := b.Queue("one").Stats(); st.Scheduled != 2 || st.Depth != 3 { // 2 scheduled, 1 in flight
		t.Fatalf("stats %+v", st)
	}
}

func TestRepeatingMessageSurvivesRestart(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	// Three transactions: the job's, then its first two copies (each
	// with the job's state); the third copy's commit fails and is tried
	// again a second later, so two copies, exactly, are sent before the
	// restart however slow the machine.
	msgs.commitsLeft = 3
	b1 := durableBroker(t, msgs, bindings)
	s1 := newSession(t, b1, "")
	ctx := context.Background()
	// Five deliveries: the first at once, then every 100 ms.
	if err := s1.Send(ctx, schedMsg("rep", "tick", map[string]any{PropScheduledRepeat: int64(4), PropScheduledPeriod: "100", "k": "v"})); err != nil {
		t.Fatal(err)
	}
	if err := s1.Send(ctx, schedMsg("rep", "x", map[string]any{PropScheduledCron: "61 * * * *"})); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("a bad cron entry: %v", err)
	}
	_, col := subscribe(t, s1, ConsumerOptions{Address: "rep", RoutingType: Anycast, Credit: 100})
	d := col.next(t)
	if body(d) != "tick" || d.Message.Properties["k"] != "v" || d.Message.Properties[PropScheduledRepeat] != nil {
		t.Fatalf("copy %q %v", body(d), d.Message.Properties)
	}
	col.next(t)
	// A copy is counted before it is routed, and the third is never
	// journaled: two, as soon as the second is received.
	jobs := b1.ScheduledJobs()
	if len(jobs) != 1 || jobs[0].Sent != 2 || jobs[0].Repeat != 4 || jobs[0].Period != 100*time.Millisecond {
		t.Fatalf("jobs %+v", jobs)
	}
	s1.Close()
	b1.Close()
	msgs.mu.Lock()
	msgs.commitsLeft = 0
	msgs.mu.Unlock()
	// The rest after a restart: those unacked before it come back (they
	// were journaled), then the three copies left, none twice: 2 + 3.
	b2 := durableBroker(t, msgs, bindings)
	s2 := newSession(t, b2, "")
	_, col2 := subscribe(t, s2, ConsumerOptions{Address: "rep", RoutingType: Anycast, Credit: 100})
	for range 5 {
		col2.next(t)
	}
	// The job ends with the commit of its last copy: no copy can follow
	// it, and the queue holds (in flight, unacked) every copy there is.
	for deadline := time.Now().Add(5 * time.Second); len(b2.ScheduledJobs()) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("jobs left: %+v", b2.ScheduledJobs())
		}
	}
	if st := b2.Queue("rep").Stats(); st.Depth != 5 || st.InFlight != 5 {
		t.Fatalf("after the restart: %+v, want 5 copies, all delivered (2 unacked, 3 left to send)", st)
	}
	col2.none(t, 50*time.Millisecond)
}

func TestCronJobCancelled(t *testing.T) {
	b := newBroker(t)
	s := newSession(t, b, "")
	if err := s.Send(context.Background(), schedMsg("cron", "c", map[string]any{PropScheduledCron: "0 0 1 1 *"})); err != nil {
		t.Fatal(err)
	}
	jobs := b.ScheduledJobs()
	if len(jobs) != 1 || jobs[0].Cron != "0 0 1 1 *" || jobs[0].Next.Month() != time.January || jobs[0].Next.Day() != 1 {
		t.Fatalf("jobs %+v", jobs)
	}
	if err := b.CancelJob(jobs[0].ID); err != nil {
		t.Fatal(err)
	}
	if len(b.ScheduledJobs()) != 0 || !errors.Is(b.CancelJob(jobs[0].ID), ErrScheduledNotFound) {
		t.Fatal("cancelled job still there")
	}
	tx, _ := s.Begin()
	tx.Send(schedMsg("cron", "c", map[string]any{PropScheduledRepeat: "2"}))
	if err := tx.Commit(context.Background()); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("a repeating message in a transaction: %v", err)
	}
}

func TestRepeatingMessageDuplicateIDStartsOneJob(t *testing.T) {
	msgs, bindings := newMemJournal(), newMemJournal()
	b1 := durableBroker(t, msgs, bindings)
	s1 := newSession(t, b1, "")
	m := func() *Message {
		return schedMsg("jobdup", "j", map[string]any{PropScheduledCron: "0 0 1 1 *", PropDuplicateID: "job-1"})
	}
	for range 2 {
		if err := s1.Send(context.Background(), m()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(b1.ScheduledJobs()); n != 1 || b1.Duplicates()["jobdup"] != 1 {
		t.Fatalf("%d jobs, %d duplicates; want 1 and 1", n, b1.Duplicates()["jobdup"])
	}
	s1.Close()
	b1.Close()
	// The id is in the journal with the job: a resend after a restart
	// is a duplicate too.
	b2 := durableBroker(t, msgs, bindings)
	s2 := newSession(t, b2, "")
	if err := s2.Send(context.Background(), m()); err != nil {
		t.Fatal(err)
	}
	if n := len(b2.ScheduledJobs()); n != 1 || b2.Duplicates()["jobdup"] != 1 {
		t.Fatalf("after a restart: %d jobs, %d duplicates; want 1 and 1", n, b2.Duplicates()["jobdup"])
	}
}

func TestRepeatingMessageNeedsItsAddress(t *testing.T) {
	b := newBroker(t, AddressSettings{Match: "fixed.#", AutoCreate: ptrTo(false)})
	s := newSession(t, b, "")
	err := s.Send(context.Background(), schedMsg("fixed.none", "x", map[string]any{PropScheduledRepeat: "1"}))
	if !errors.Is(err, ErrAddressNotFound) || len(b.ScheduledJobs()) != 0 {
		t.Fatalf("a job for a missing address: %v, %d jobs", err, len(b.ScheduledJobs()))
	}
}

// TestRepeatingMessageSentCountsDelivered: a copy counts as sent
// (ScheduledJobs' Sent) before a consumer can receive it, so whoever
// sees a delivery sees it counted: the job's state in memory changes
// when the copy's commit is journaled, before the copy is routed, not
// once the commit has returned.
func TestRepeatingMessageSentCountsDelivered(t *testing.T) {
	const copies = 200
	msgs, bindings := newMemJournal(), newMemJournal()
	b := durableBroker(t, msgs, bindings)
	s := newSession(t, b, "")
	_, col := subscribe(t, s, ConsumerOptions{Address: "sent", RoutingType: Anycast, Credit: copies + 10})
	if err := s.Send(context.Background(), schedMsg("sent", "tick", map[string]any{PropScheduledRepeat: int64(copies - 1), PropScheduledPeriod: "1"})); err != nil {
		t.Fatal(err)
	}
	for n := uint64(1); n <= copies; n++ {
		col.next(t)
		jobs := b.ScheduledJobs()
		if len(jobs) == 0 {
			continue // the last copy's commit ended the job: all are sent
		}
		if len(jobs) != 1 || jobs[0].Sent < n {
			t.Fatalf("copy %d received, ScheduledJobs %+v", n, jobs)
		}
	}
	col.none(t, 50*time.Millisecond)
}

// fakeClock is a scheduler clock (schedClock) that moves only when the
// test moves it: advanceTo runs the timers due, one by one in the order
// of their times, each with the clock at its time, in the test's
// goroutine (a timer set meanwhile runs too if it is due).
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c      *fakeClock
	at     time.Time
	f      func()
	active bool
}

func newFakeClock(now time.Time) *fakeClock { return &fakeClock{now: now} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) schedTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &fakeTimer{c: c, at: c.now.Add(d), f: f, active: true}
	c.timers = append(c.timers, tm)
	return tm
}

func (tm *fakeTimer) Stop() bool {
	tm.c.mu.Lock()
	defer tm.c.mu.Unlock()
	was := tm.active
	tm.active = false
	return was
}

func (tm *fakeTimer) Reset(d time.Duration) bool {
	tm.c.mu.Lock()
	defer tm.c.mu.Unlock()
	was := tm.active
	tm.at, tm.active = tm.c.now.Add(d), true
	return was
}

func (c *fakeClock) advanceTo(t *testing.T, to time.Time) {
	t.Helper()
	for range 10000 {
		c.mu.Lock()
		var first *fakeTimer
		for _, tm := range c.timers {
			if tm.active && !tm.at.After(to) && (first == nil || tm.at.Before(first.at)) {
				first = tm
			}
		}
		if first == nil {
			if to.After(c.now) {
				c.now = to
			}
			c.mu.Unlock()
			return
		}
		first.active = false
		if first.at.After(c.now) {
			c.now = first.at
		}
		c.mu.Unlock()
		first.f()
	}
	t.Fatal("timers still due after 10000 runs")
}

// clockedBroker is a broker whose scheduler runs by clk, on journals
// msgs and bindings (nil: none).
func clockedBroker(t *testing.T, clk *fakeClock, msgs, bindings *memJournal) *Broker {
	t.Helper()
	cfg := Config{ExpiryScanInterval: -1, schedClock: clk}
	if msgs != nil {
		cfg.Messages, cfg.Bindings = msgs, bindings
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// job is the only job of b.
func job(t *testing.T, b *Broker) ScheduledJob {
	t.Helper()
	jobs := b.ScheduledJobs()
	if len(jobs) != 1 {
		t.Fatalf("jobs %+v, want one", jobs)
	}
	return jobs[0]
}

// expect checks that col gets n copies of the job's message, no more,
// and that the job (one of b) has sent sent copies and is next due at
// next.
func expect(t *testing.T, b *Broker, col *collector, n int, sent uint64, next time.Time) {
	t.Helper()
	for range n {
		if d := col.next(t); body(d) != "tick" || d.Message.Properties[PropScheduledCron] != nil || d.Message.Properties["k"] != "v" {
			t.Fatalf("copy %q %v", body(d), d.Message.Properties)
		}
	}
	col.none(t, 20*time.Millisecond)
	if j := job(t, b); j.Sent != sent || !j.Next.Equal(next) {
		t.Fatalf("job sent %d, next %v; want %d, %v", j.Sent, j.Next.Format(time.DateTime), sent, next.Format(time.DateTime))
	}
}

// A cron job fires at each match of its entry: a burst of repeat+1
// copies, after its delay, period apart; then it waits for the next
// match, and catches up each match it passes as it runs (on a clock
// the test moves on: no real minutes waited).
func TestCronJobFiresAtItsMatches(t *testing.T) {
	at := func(hms string) time.Time {
		tm, err := time.ParseInLocation(time.DateTime, "2026-12-01 "+hms, time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	clk := newFakeClock(at("10:00:30"))
	b := clockedBroker(t, clk, nil, nil)
	s := newSession(t, b, "")
	_, col := subscribe(t, s, ConsumerOptions{Address: "cron", RoutingType: Anycast, Credit: 1000})
	// At minutes 0, 15, 30 and 45: three copies, 5 s after the match
	// and then a second apart.
	if err := s.Send(context.Background(), schedMsg("cron", "tick", map[string]any{PropScheduledCron: "*/15 * * * *",
		PropScheduledDelay: "5000", PropScheduledRepeat: "2", PropScheduledPeriod: "1000", "k": "v"})); err != nil {
		t.Fatal(err)
	}
	expect(t, b, col, 0, 0, at("10:15:05"))
	clk.advanceTo(t, at("10:15:04.999"))
	expect(t, b, col, 0, 0, at("10:15:05"))
	clk.advanceTo(t, at("10:15:05"))
	expect(t, b, col, 1, 1, at("10:15:06"))
	clk.advanceTo(t, at("10:15:06.5"))
	expect(t, b, col, 1, 2, at("10:15:07"))
	clk.advanceTo(t, at("10:15:07"))
	expect(t, b, col, 1, 3, at("10:30:05")) // the burst is done
	clk.advanceTo(t, at("10:30:04"))
	expect(t, b, col, 0, 3, at("10:30:05"))
	// Three matches passed at once (10:30, 10:45, 11:00): a burst each.
	clk.advanceTo(t, at("11:00:10"))
	expect(t, b, col, 9, 12, at("11:15:05"))
	if err := b.CancelJob(job(t, b).ID); err != nil {
		t.Fatal(err)
	}
	clk.advanceTo(t, at("12:00:00"))
	col.none(t, 20*time.Millisecond)
}

// A cron job resumes at its entry's next match after a restart
// (docs/artemis-features.md): the copies its matches would have sent
// while the broker was down are not sent at start, whether the stop
// fell between matches or cut a burst short; a burst whose next copy is
// still to come when the broker starts again goes on.
func TestCronJobResumesAtItsNextMatchAfterRestart(t *testing.T) {
	at := func(hms string) time.Time {
		tm, err := time.ParseInLocation(time.DateTime, "2026-12-01 "+hms, time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	msgs, bindings := newMemJournal(), newMemJournal()
	// Each run: a broker on the journals with a clock from start, and a
	// consumer. The copies are not durable: a run's do not come back in
	// the next (the job is journaled whatever its message).
	run := func(start string) (*Broker, *Session, *collector, *fakeClock) {
		clk := newFakeClock(at(start))
		b := clockedBroker(t, clk, msgs, bindings)
		s := newSession(t, b, "")
		_, col := subscribe(t, s, ConsumerOptions{Address: "cron", RoutingType: Anycast, Credit: 1000})
		return b, s, col, clk
	}
	b, s, col, clk := run("10:00:30")
	// Bursts of two copies a minute apart, at minutes 0, 15, 30, 45.
	m := schedMsg("cron", "tick", map[string]any{PropScheduledCron: "*/15 * * * *", PropScheduledRepeat: "1", PropScheduledPeriod: "60000", "k": "v"})
	m.Durable = false
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	clk.advanceTo(t, at("10:15:00"))
	expect(t, b, col, 1, 1, at("10:16:00"))
	s.Close()
	b.Close()

	// Back before the burst's second copy: it comes at its time.
	b, s, col, clk = run("10:15:30")
	expect(t, b, col, 0, 1, at("10:16:00"))
	clk.advanceTo(t, at("10:16:00"))
	expect(t, b, col, 1, 2, at("10:30:00"))
	clk.advanceTo(t, at("10:30:00"))
	expect(t, b, col, 1, 3, at("10:31:00"))
	s.Close()
	b.Close()

	// Down from 10:30 to 11:20: the rest of the 10:30 burst, and the
	// matches 10:45, 11:00 and 11:15, are not sent, at start or later.
	b, s, col, clk = run("11:20:10")
	clk.advanceTo(t, at("11:20:10")) // a timer due now would run
	expect(t, b, col, 0, 3, at("11:30:00"))
	clk.advanceTo(t, at("11:29:59"))
	expect(t, b, col, 0, 3, at("11:30:00"))
	clk.advanceTo(t, at("11:31:00"))
	expect(t, b, col, 2, 5, at("11:45:00"))
	s.Close()
	b.Close()

	// Down between matches: the same.
	b, _, col, clk = run("13:07:00")
	clk.advanceTo(t, at("13:07:00"))
	expect(t, b, col, 0, 5, at("13:15:00"))
	clk.advanceTo(t, at("13:16:00"))
	expect(t, b, col, 2, 7, at("13:30:00"))
}

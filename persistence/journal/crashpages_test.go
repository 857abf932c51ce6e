package journal

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/junctionmq/junction/persistence/fs"
)

// Two power losses in a row, each keeping an arbitrary set of the pages
// written since the last fdatasync (fs.MemFS.CrashClonePages: every dirty
// page independently lost, written back, or written back in an earlier
// version), checked against confirmation ledgers. This is the setting of
// issue 21's item 3: a first crash leaves a file that looks free but holds
// records of its current generation, the next run reuses it, and a second
// crash cuts the new records where a stale one sits.
//
// Each scenario draws one list of operations and performs it twice: once
// from a fresh file after a clean recovery (run 1), and again, from the
// start, after recovering each image of the first crash (run 2). The same
// operations give records of the same sizes, so when run 2 reuses a file
// run 1 wrote, its records land at the same offsets with the same LSNs:
// the dangerous case. The two runs group and sync differently.
//
// JUNCTION_JOURNAL_PAGE_CRASHES=N runs N scenarios with more images per
// crash (the default is a few seconds' worth); JUNCTION_JOURNAL_PAGE_SEED
// moves the seeds. A failure names its seed (also the subtest's name), the
// crash points and every page's chosen version.

const pcSectorSize = 512 // some scenarios tear at sectors rather than pages

type pcKind uint8

const (
	pcAdd pcKind = iota
	pcUpdate
	pcDelete
	pcTx      // ADD_TX of one or two new records and DELETE_TX of a live one, then Commit
	pcCompact // Compact (copies forward, syncs, reclaims)
)

type pcOp struct {
	kind pcKind
	pick int  // the live record an update, delete or tx delete targets (modulo the live count)
	size int  // payload bytes of an add or update
	two  bool // a transaction adds two records, not one
}

// pcScript draws n operations. The first 16 carry no transaction (a Commit
// syncs), so that a run can begin with an unsynced batch of several pages:
// a file whose first batch is lost in part is what recovery takes for free.
func pcScript(rng *rand.Rand, n int) []pcOp {
	ops := make([]pcOp, n)
	for i := range ops {
		op := pcOp{pick: rng.IntN(1 << 20), size: 24 + rng.IntN(1200), two: rng.IntN(2) == 0}
		switch r := rng.IntN(100); {
		case r < 45:
			op.kind = pcAdd
		case r < 55:
			op.kind = pcUpdate
		case r < 88:
			op.kind = pcDelete
		case r < 98:
			op.kind = pcTx
		default:
			op.kind = pcCompact
		}
		if i < 16 && (op.kind == pcTx || op.kind == pcCompact) {
			op.kind = pcAdd
		}
		switch rng.IntN(8) {
		case 0, 1:
			op.size = 88 // 128 bytes encoded: 32 to a page, so records meet page boundaries
		case 2:
			op.size = 2000 + rng.IntN(7000) // across pages
		}
		ops[i] = op
	}
	return ops
}

// pcGroup is a run of operations issued without waiting; when sync is set
// the last one asks for a sync.
type pcGroup struct {
	from, to int
	sync     bool
}

// pcLayout splits n operations into groups of 1 to 16. With unsyncedFirst
// the first group is at least 8 operations and unsynced.
func pcLayout(rng *rand.Rand, n int, unsyncedFirst bool) []pcGroup {
	var gs []pcGroup
	for i := 0; i < n; {
		size := 1 + rng.IntN(16)
		sync := rng.IntN(2) == 0
		if i == 0 && unsyncedFirst {
			size, sync = max(size, 8), false
		}
		to := min(n, i+size)
		gs = append(gs, pcGroup{i, to, sync})
		i = to
	}
	return gs
}

// pcStep is the state an operation left one record in.
type pcStep struct {
	op      int
	id      uint64
	present bool
	rec     liveRec
}

// pcLedger is what a run did, as confirmed by the journal: the state it
// started from (what recovery returned), every change in order, and the
// last operation whose durability the journal confirmed (done(nil) of a
// sync=true append or update or delete, a Commit, a Compact).
type pcLedger struct {
	base    map[uint64]liveRec
	steps   []pcStep
	durable int // index of that operation; -1 if none
}

// check compares a recovered set with the ledger: every record is in its
// state as of the last confirmed sync, or, if an operation after that
// touched it, in one of the states it passed through since; no other
// record appears. So a record whose synced write was confirmed is there, a
// deleted record does not come back unless its delete was unconfirmed, and
// nothing that was never written (in this history) appears.
func (l *pcLedger) check(got map[uint64]liveRec) []string {
	type st struct {
		present bool
		rec     liveRec
	}
	cur := map[uint64]st{}
	for id, r := range l.base {
		cur[id] = st{true, r}
	}
	allowed := map[uint64][]st{}
	for _, s := range l.steps {
		if s.op > l.durable {
			if _, ok := allowed[s.id]; !ok {
				allowed[s.id] = []st{cur[s.id]}
			}
			allowed[s.id] = append(allowed[s.id], st{s.present, s.rec})
		}
		cur[s.id] = st{s.present, s.rec}
	}
	match := func(s st, id uint64) bool {
		g, ok := got[id]
		return s.present == ok && (!ok || g.String() == s.rec.String())
	}
	short := func(present bool, r liveRec) string {
		if !present {
			return "absent"
		}
		ups := make([]string, len(r.updates))
		for i, u := range r.updates {
			ups[i] = u[:min(len(u), 14)]
		}
		return fmt.Sprintf("{%d %.12q…(%d) %q}", r.utype, r.payload, len(r.payload), ups)
	}
	var errs []string
	for id, s := range cur {
		g, present := got[id]
		if al, ok := allowed[id]; ok {
			if !slices.ContainsFunc(al, func(a st) bool { return match(a, id) }) {
				var as []string
				for _, a := range al {
					as = append(as, short(a.present, a.rec))
				}
				errs = append(errs, fmt.Sprintf("id %d: recovered %s, allowed %v", id, short(present, g), as))
			}
			continue
		}
		if !match(s, id) {
			errs = append(errs, fmt.Sprintf("id %d: recovered %s, want %s", id, short(present, g), short(s.present, s.rec)))
		}
	}
	for id, r := range got {
		if _, ok := cur[id]; !ok {
			errs = append(errs, fmt.Sprintf("id %d: recovered %s, never written", id, short(true, r)))
		}
	}
	slices.Sort(errs)
	return errs
}

// pcGate holds the journal's writes while a group is being issued, so
// that the writer takes the group as one batch (else it would often take
// the first operation alone): batches of several pages, the shape of
// issue 21.
// It also notes the number each write will have in mem's operation count
// (approximately: other goroutines' operations may come between), which
// the dry run uses to place crash points after writes.
type pcGate struct {
	mem    *fs.MemFS
	mu     sync.Mutex
	held   chan struct{}
	writes []int
}

func (g *pcGate) hook(op fs.Op, _ string) error {
	if op == fs.OpWrite {
		g.mu.Lock()
		h := g.held
		g.mu.Unlock()
		if h != nil {
			<-h
		}
		g.mu.Lock()
		g.writes = append(g.writes, g.mem.Ops()+1)
		g.mu.Unlock()
	}
	return nil
}

func (g *pcGate) hold() {
	g.mu.Lock()
	g.held = make(chan struct{})
	g.mu.Unlock()
}

func (g *pcGate) release() {
	g.mu.Lock()
	close(g.held)
	g.held = nil
	g.mu.Unlock()
}

// pcOpen opens the journal in mem through a pcGate.
func pcOpen(t *testing.T, mem *fs.MemFS) (*Journal, *pcGate) {
	t.Helper()
	g := &pcGate{mem: mem}
	return mustOpen(t, pcConfig(fs.NewFaulty(mem, g.hook))), g
}

// pcRun performs a scenario's operations on an open journal.
type pcRun struct {
	j     *Journal
	gate  *pcGate
	mem   *fs.MemFS
	tag   int // payloads say which run wrote them
	base  map[uint64]liveRec
	steps []pcStep
	ops   []pcDone // by operation index
	state map[uint64]liveRec
	live  []uint64
	next  uint64 // ids continue from MaxID+1, as core's do
	txid  uint64
}

// pcDone is when an operation was issued and confirmed, in file-system
// operations (fs.MemFS.Ops): a crash image frozen at operation k holds
// nothing of an operation issued at or after k, and everything of one whose
// sync was confirmed before k.
type pcDone struct {
	issued, confirmed int
	sync, ok          bool
}

func newPCRun(j *Journal, gate *pcGate, mem *fs.MemFS, base map[uint64]liveRec, nops, tag int) *pcRun {
	r := &pcRun{j: j, gate: gate, mem: mem, tag: tag, base: base, ops: make([]pcDone, nops), state: map[uint64]liveRec{}, next: j.MaxID() + 1}
	for id, rec := range base {
		r.state[id] = rec
		r.live = append(r.live, id)
	}
	slices.Sort(r.live)
	return r
}

// ledger returns what the run had done and had confirmed when the file
// system was frozen at operation k.
func (r *pcRun) ledger(k int) pcLedger {
	l := pcLedger{base: r.base, durable: -1}
	for i, d := range r.ops {
		if d.sync && d.ok && d.confirmed < k {
			l.durable = i
		}
	}
	for _, s := range r.steps {
		if r.ops[s.op].issued < k {
			l.steps = append(l.steps, s)
		}
	}
	return l
}

func (r *pcRun) payload(op, size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte('a' + (op*7+i)%26) // the same in both runs
	}
	copy(p, fmt.Sprintf("r%d.op%d.", r.tag, op))
	return p
}

func (r *pcRun) set(op int, id uint64, present bool, rec liveRec) {
	if present {
		if _, ok := r.state[id]; !ok {
			r.live = append(r.live, id)
		}
		r.state[id] = rec
	} else {
		delete(r.state, id)
		r.live = slices.DeleteFunc(r.live, func(x uint64) bool { return x == id })
	}
	r.steps = append(r.steps, pcStep{op, id, present, rec})
}

func (r *pcRun) pick(n int) uint64 { return r.live[n%len(r.live)] }

// group issues ops[g.from:g.to] and waits for every completion. A Compact
// runs alone (it waits for its own copies).
func (r *pcRun) group(ops []pcOp, g pcGroup) error {
	for i := g.from; i < g.to; {
		if ops[i].kind == pcCompact {
			r.ops[i] = pcDone{issued: r.mem.Ops(), sync: true}
			if err := r.j.Compact(); err != nil {
				return fmt.Errorf("op %d compact: %w", i, err)
			}
			r.ops[i].confirmed, r.ops[i].ok = r.mem.Ops(), true
			i++
			continue
		}
		end := i + 1
		for end < g.to && ops[end].kind != pcCompact {
			end++
		}
		if err := r.issue(ops, i, end, g.sync && end == g.to); err != nil {
			return err
		}
		i = end
	}
	return nil
}

func (r *pcRun) issue(ops []pcOp, from, to int, syncLast bool) error {
	errs := make(chan error, to-from)
	r.gate.hold()
	for i := from; i < to; i++ {
		op := ops[i]
		sync := syncLast && i == to-1
		r.ops[i] = pcDone{issued: r.mem.Ops(), sync: sync}
		done := func(err error) {
			r.ops[i].confirmed, r.ops[i].ok = r.mem.Ops(), err == nil
			if err != nil {
				err = fmt.Errorf("op %d (kind %d): %w", i, op.kind, err)
			}
			errs <- err
		}
		switch {
		case op.kind == pcAdd || len(r.live) < 2:
			id := r.next
			r.next++
			p := r.payload(i, op.size)
			r.set(i, id, true, liveRec{utype: 1, payload: string(p)})
			r.j.Append(id, 1, p, sync, done)
		case op.kind == pcUpdate:
			id := r.pick(op.pick)
			p := r.payload(i, op.size)
			rec := r.state[id]
			rec.updates = append(slices.Clip(rec.updates), fmt.Sprintf("3:%s", p))
			r.set(i, id, true, rec)
			r.j.Update(id, 3, p, sync, done)
		case op.kind == pcDelete:
			id := r.pick(op.pick)
			r.set(i, id, false, liveRec{})
			r.j.Delete(id, sync, done)
		case op.kind == pcTx:
			r.ops[i].sync = true // Commit always syncs
			r.txid++
			del := r.pick(op.pick)
			r.set(i, del, false, liveRec{})
			r.j.DeleteTx(r.txid, del)
			for k := 0; k < 1+btoi(op.two); k++ {
				id := r.next
				r.next++
				p := r.payload(i, op.size/2+k)
				r.set(i, id, true, liveRec{utype: 4, payload: string(p)})
				r.j.AppendTx(r.txid, id, 4, p)
			}
			r.j.Commit(r.txid, done)
		}
	}
	r.gate.release()
	var first error
	for i := from; i < to; i++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pcFreeze is the file system at a crash point and the ledger up to it.
type pcFreeze struct {
	op  int // the file-system operation after which it was frozen
	fs  *fs.MemFS
	led pcLedger
}

// play runs the groups in order and freezes the file system right after
// each file-system operation in at (counted from the run's start; the
// journal keeps running: a frozen copy is what a power loss at that instant
// leaves, before the kernel wrote anything back). It returns the freezes
// reached, each with the ledger as of the operation its copy was taken
// after. The journal's own goroutines (the reclaim pass that follows
// recovery, the preparer) may still be operating on the file system when
// the run starts: the points are fixed relative to the count in one step
// (fs.MemFS.FreezeAfter), and each copy carries its own operation number,
// so that a copy is never checked against the ledger of another moment.
func (r *pcRun) play(ops []pcOp, layout []pcGroup, at []int) ([]pcFreeze, error) {
	at = slices.Compact(slices.Sorted(slices.Values(at)))
	o0 := r.mem.FreezeAfter(at...)
	for _, g := range layout {
		if len(at) > 0 && len(r.mem.Frozen()) == len(at) {
			break
		}
		if err := r.group(ops, g); err != nil {
			return nil, err
		}
	}
	var out []pcFreeze
	for _, f := range r.mem.Frozen() {
		out = append(out, pcFreeze{op: f.Op - o0, fs: f.FS, led: r.ledger(f.Op)})
	}
	return out, nil
}

// pcChoices returns the page versions to try: every combination when
// there are at most exhaustive, else samples random ones (each page lost
// or written back in full with probability 3/8 each, else any version).
// It reports whether the choices are exhaustive.
func pcChoices(pages []fs.Page, exhaustive, samples int, rng *rand.Rand) ([][]int, bool) {
	total := 1
	for _, p := range pages {
		total *= p.Versions + 1
		if total > exhaustive {
			break
		}
	}
	if total <= exhaustive {
		out := [][]int{make([]int, len(pages))}
		for i, p := range pages {
			var next [][]int
			for _, c := range out {
				for v := 0; v <= p.Versions; v++ {
					c2 := slices.Clone(c)
					c2[i] = v
					next = append(next, c2)
				}
			}
			out = next
		}
		return out, true
	}
	out := make([][]int, samples)
	for k := range out {
		c := make([]int, len(pages))
		for i, p := range pages {
			switch r := rng.IntN(8); {
			case r < 3:
			case r < 6:
				c[i] = p.Versions
			default:
				c[i] = rng.IntN(p.Versions + 1)
			}
		}
		out[k] = c
	}
	return out, false
}

func pcDescribe(pages []fs.Page, choice []int) string {
	var b strings.Builder
	for i, p := range pages {
		fmt.Fprintf(&b, " %s@%d:%d/%d", p.Name[len(testDir)+1:], p.Off, choice[i], p.Versions)
	}
	return b.String()
}

func pcConfig(f fs.FS) Config {
	c := testConfig(f)
	c.MinFiles, c.PoolFiles = 1, 2 // few ready files: reuse comes early
	return c
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

func TestTwoCrashesAnyPages(t *testing.T) {
	// Per crash: every combination of page versions up to exhaustive of
	// them, else samples random ones.
	scenarios, exhaustive, samples, nops := 8, 16, 6, 120
	if testing.Short() || raceEnabled {
		scenarios = 3
	}
	if n := envInt(t, "JUNCTION_JOURNAL_PAGE_CRASHES", 0); n > 0 {
		scenarios, exhaustive, samples, nops = n, 64, 12, 240
	}
	seed0 := uint64(envInt(t, "JUNCTION_JOURNAL_PAGE_SEED", 1))

	// The starting state: a few synced records in the first file. Every
	// scenario recovers it, which seals that file, so run 1 begins at the
	// start of a fresh file.
	setup := fs.NewCrashableMem()
	j := mustOpen(t, pcConfig(setup))
	for id := uint64(1); id <= 12; id++ {
		if err := waitErr(func(d func(error)) { j.Append(id, 1, payloadFor(id, 300), true, d) }); err != nil {
			t.Fatal(err)
		}
	}
	start := setup.CrashClone()
	j.Close()

	for s := range scenarios {
		seed := seed0 + uint64(s)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 21))
			ops := pcScript(rng, nops)
			// Run 1 mostly starts with an unsynced batch of several pages;
			// every third scenario tears at sectors, not pages.
			layout1 := pcLayout(rng, nops, s%4 != 3)
			layout2 := pcLayout(rng, nops, false)
			ps := int64(4096)
			if s%3 == 2 {
				ps = pcSectorSize
			}
			// Where a run writes: a dry run.
			mem := start.CrashClone()
			j, gate := pcOpen(t, mem)
			base, _ := load(t, j)
			o0 := mem.Ops()
			if _, err := newPCRun(j, gate, mem, base, nops, 1).play(ops, layout1, nil); err != nil {
				t.Fatalf("dry run: %v", err)
			}
			j.Close()
			var writes []int
			for _, w := range gate.writes {
				if w > o0+3 {
					writes = append(writes, w-o0)
				}
			}
			if len(writes) == 0 {
				t.Fatal("dry run: no writes")
			}
			// Crash points: the first operations of a run (its first batch,
			// written to a fresh file, is synced by the reclaim pass that
			// follows recovery), then after random writes: a batch written,
			// not yet synced.
			crashes := func(random int) []int {
				at := []int{1, 2, 3}
				for range random {
					at = append(at, writes[rng.IntN(len(writes))])
				}
				return slices.Compact(slices.Sorted(slices.Values(at)))
			}

			mem = start.CrashClone()
			j, gate = pcOpen(t, mem)
			base, _ = load(t, j)
			freezes, err := newPCRun(j, gate, mem, base, nops, 1).play(ops, layout1, crashes(3))
			j.Close()
			if err != nil {
				t.Fatalf("run 1: %v", err)
			}
			images1, images2, exhaustive1 := 0, 0, 0
			for _, f1 := range freezes {
				pages1 := f1.fs.DirtyPages(ps)
				choices1, all1 := pcChoices(pages1, exhaustive, samples, rng)
				if all1 {
					exhaustive1++
				}
				for _, c1 := range choices1 {
					images1++
					crash1 := fmt.Sprintf("crash 1 after op %d of run 1, pages%s", f1.op, pcDescribe(pages1, c1))
					img1 := f1.fs.CrashClonePages(ps, func(i int, _ fs.Page) int { return c1[i] })
					gate1 := &pcGate{mem: img1}
					j1, err := Open(pcConfig(fs.NewFaulty(img1, gate1.hook)))
					if err != nil {
						t.Fatalf("%s: Open: %v", crash1, err)
					}
					got1, _ := load(t, j1)
					if errs := f1.led.check(got1); len(errs) > 0 {
						j1.Close()
						t.Fatalf("%s: recovery 1:\n%s", crash1, strings.Join(errs[:min(len(errs), 10)], "\n"))
					}
					freezes2, err := newPCRun(j1, gate1, img1, got1, nops, 2).play(ops, layout2, crashes(2))
					j1.Close()
					if err != nil {
						t.Fatalf("%s: run 2: %v", crash1, err)
					}
					for _, f2 := range freezes2 {
						pages2 := f2.fs.DirtyPages(ps)
						choices2, _ := pcChoices(pages2, exhaustive, samples, rng)
						for _, c2 := range choices2 {
							images2++
							crash2 := fmt.Sprintf("crash 2 after op %d of run 2, pages%s", f2.op, pcDescribe(pages2, c2))
							img2 := f2.fs.CrashClonePages(ps, func(i int, _ fs.Page) int { return c2[i] })
							j2, err := Open(pcConfig(img2))
							if err != nil {
								t.Fatalf("%s; %s: Open: %v", crash1, crash2, err)
							}
							got2, _ := load(t, j2)
							j2.Close()
							if errs := f2.led.check(got2); len(errs) > 0 {
								t.Fatalf("%s; %s: recovery 2:\n%s", crash1, crash2, strings.Join(errs[:min(len(errs), 10)], "\n"))
							}
						}
					}
				}
			}
			if images1 == 0 {
				t.Fatal("no crash image")
			}
			t.Logf("%d crash points in run 1 (%d with every combination of pages tried), %d images; %d images of a second crash", len(freezes), exhaustive1, images1, images2)
		})
	}
}

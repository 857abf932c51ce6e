package main

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/ledger"
)

// TestCrashKill9Duplicates is the crash test for duplicate detection:
// producers send durable messages each with its own _AMQ_DUPL_ID while a
// consumer acks them; the broker is killed with SIGKILL, restarted on
// the same data directory, and every producer sends everything it sent
// before again, confirmed or not, as a producer that lost its
// confirmations would. Counted from the ledgers:
//
//	lost        not acked before the kill, never delivered after (every
//	            message is sent again, so even an unconfirmed one counts)
//	duplicated  delivered twice after the restart, or, confirmed before
//	            the kill, delivered before it and again after it without
//	            redelivered:true (a second copy, not the original again)
//
// Both must be zero, and every resend must be confirmed. A message
// delivered before the kill that was not yet confirmed may come again
// unflagged: it was visible before it was durable, the kill took it and
// its id, and the resend is a new message. Those are counted apart
// (unconfirmedAgain); the producer could not have known it was stored.
func TestCrashKill9Duplicates(t *testing.T) {
	bin, data, conf, rounds, ev := crashSetup(t, "")
	for round := range rounds {
		crashRoundDedup(t, bin, data, conf, round, ev)
	}
}

func crashRoundDedup(t *testing.T, bin, data, conf string, round int, ev *journalEvents) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(round)))
	dest := "/queue/crash.dedup"
	p := startProc(t, bin, data, conf, ev)

	var mu sync.Mutex
	var order []string             // every key a producer tried, in order
	sent := map[string]string{}    // with its body
	confirmed := map[string]bool{} // receipts received
	acked := map[string]bool{}     // acks sent before the kill
	seen := map[string]int{}       // deliveries before the kill
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const producers = 3
	const perProducer = 3000 // well within the default id-cache-size (20,000)
	for pi := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := gostomp.Dial("tcp", p.addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
			if err != nil {
				return
			}
			defer conn.MustDisconnect()
			id := round*producers + pi
			for seq := range perProducer {
				select {
				case <-stop:
					return
				default:
				}
				body := ledger.Payload(id, seq)
				key, _, _, _ := ledger.PayloadKey([]byte(body))
				mu.Lock()
				sent[key] = body
				order = append(order, key)
				mu.Unlock()
				err := conn.Send(dest, "text/plain", []byte(body), gostomp.SendOpt.Receipt,
					gostomp.SendOpt.Header("persistent", "true"), gostomp.SendOpt.Header(core.PropDuplicateID, key))
				if err != nil {
					return // the broker died: this one is unconfirmed
				}
				mu.Lock()
				confirmed[key] = true
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		consumeUntilKill(&wg, p.addr, dest, "300", 50, stop, &mu, seen, acked)
	}()
	time.Sleep(time.Duration(300+rng.IntN(1500)) * time.Millisecond)
	p.kill(t)
	close(stop)
	wg.Wait()

	// Restart; the producers send everything again (one connection, in
	// the order first sent), each send confirmed.
	p2 := startProc(t, bin, data, conf, ev)
	conn, err := gostomp.Dial("tcp", p2.addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range order {
		if err := conn.Send(dest, "text/plain", []byte(sent[key]), gostomp.SendOpt.Receipt,
			gostomp.SendOpt.Header("persistent", "true"), gostomp.SendOpt.Header(core.PropDuplicateID, key)); err != nil {
			t.Fatalf("round %d: resend %s: %v\n%s", round, key, err, p2.log())
		}
	}
	sub, err := conn.Subscribe(dest, gostomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	drained := map[string]int{}
	var lost, duplicated, unconfirmedAgain, unexpected int
	deadline := time.Now().Add(60 * time.Second)
drain:
	for time.Now().Before(deadline) {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatalf("round %d: drain: %v\n%s", round, m.Err, p2.log())
			}
			key, _, _, ok := ledger.PayloadKey(m.Body)
			if !ok || sent[key] != string(m.Body) {
				unexpected++
				continue
			}
			switch {
			case drained[key] > 0:
				duplicated++
			case seen[key] > 0 && m.Header.Get("redelivered") != "true" && confirmed[key]:
				duplicated++
			case seen[key] > 0 && m.Header.Get("redelivered") != "true":
				unconfirmedAgain++
			}
			drained[key]++
		case <-time.After(1500 * time.Millisecond):
			break drain
		}
	}
	for key := range sent {
		if !acked[key] && drained[key] == 0 {
			lost++ // resent after the restart: even an unconfirmed one must arrive
		}
	}
	conn.Disconnect()
	p2.stop(t)
	t.Logf("round %d: %d sent, %d confirmed, %d acked before the kill; all %d sent again after the restart; %d delivered after it (%d unconfirmed ones delivered before the kill came again as new)",
		round, len(sent), len(confirmed), len(acked), len(order), len(drained), unconfirmedAgain)
	if lost+duplicated+unexpected > 0 {
		t.Fatalf("round %d: lost=%d duplicated=%d unexpected=%d\n%s", round, lost, duplicated, unexpected, p2.log())
	}
	if len(confirmed) == 0 || len(acked) == 0 {
		t.Fatalf("round %d: %d confirmed and %d acked before the kill: the test proved nothing", round, len(confirmed), len(acked))
	}
}

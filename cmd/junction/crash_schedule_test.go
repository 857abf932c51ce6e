package main

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/core"
)

// TestCrashKill9RepeatingMessage: a repeating message (AMQ_SCHEDULED_REPEAT
// 29, AMQ_SCHEDULED_PERIOD 60 ms: 30 copies) is half sent when the broker
// is killed with SIGKILL; after the restart the rest are sent, and the
// queue holds exactly 30 copies in all: none lost, none sent twice (each
// copy is journaled with the job's state in one transaction). A one-shot
// message scheduled past the restart arrives once, not before its time.
func TestCrashKill9RepeatingMessage(t *testing.T) {
	bin, data, conf, rounds, ev := crashSetup(t, "")
	for round := range rounds {
		p := startProc(t, bin, data, conf, ev)
		dest := fmt.Sprintf("/queue/crash.sched.%d", round)
		c, err := gostomp.Dial("tcp", p.addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Send(dest, "text/plain", []byte("copy"), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true"),
			gostomp.SendOpt.Header(core.PropScheduledRepeat, "29"), gostomp.SendOpt.Header(core.PropScheduledPeriod, "60")); err != nil {
			t.Fatal(err)
		}
		// The header carries whole milliseconds: that is the time due.
		later := time.UnixMilli(time.Now().Add(3 * time.Second).UnixMilli())
		if err := c.Send(dest, "text/plain", []byte("later"), gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true"),
			gostomp.SendOpt.Header(core.PropScheduledTime, strconv.FormatInt(later.UnixMilli(), 10))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(500+300*round) * time.Millisecond) // 8 to 15 copies in
		p.kill(t)

		p2 := startProc(t, bin, data, conf, ev)
		c2, err := gostomp.Dial("tcp", p2.addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := c2.Subscribe(dest, gostomp.AckAuto)
		if err != nil {
			t.Fatal(err)
		}
		copies, laters := 0, 0
		var laterAt time.Time
		deadline := time.After(30 * time.Second)
	drain:
		for {
			select {
			case m := <-sub.C:
				if m.Err != nil {
					t.Fatal(m.Err)
				}
				switch string(m.Body) {
				case "copy":
					copies++
				case "later":
					laters++
					laterAt = time.Now()
				}
			case <-time.After(2 * time.Second):
				if laters > 0 || time.Now().After(later.Add(5*time.Second)) {
					break drain
				}
			case <-deadline:
				break drain
			}
		}
		c2.Disconnect()
		p2.stop(t)
		t.Logf("round %d: %d copies of 30, the later one %d time(s), %v after its time", round, copies, laters, laterAt.Sub(later))
		if copies != 30 || laters != 1 || laterAt.Before(later) {
			t.Fatalf("round %d: %d copies (want 30), later delivered %d times at %v (due %v)\n%s", round, copies, laters, laterAt, later, p2.log())
		}
	}
}

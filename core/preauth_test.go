package core

import (
	"errors"
	"testing"

	"github.com/junctionmq/junction/core/guard"
)

// The broker's pre-authentication budget is shared by every account, and
// GuardStats reports it with the refusals and frame timeouts counted.
func TestPreAuthBudgetAndStats(t *testing.T) {
	b, err := New(Config{PreAuthBudget: 100, ExpiryScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	a1, a2 := b.PreAuth(80), b.PreAuth(80)
	if err := a1.Charge(80); err != nil {
		t.Fatal(err)
	}
	if err := a2.Charge(30); !errors.Is(err, guard.ErrBudget) {
		t.Fatalf("charge past the broker's budget: %v", err)
	}
	b.CountPreAuthRefusal("stomp", PreAuthBudget)
	b.CountPreAuthRefusal("mqtt", PreAuthFrameTooLarge)
	b.CountPreAuthRefusal("mqtt", PreAuthFrameTooLarge)
	b.CountFrameTimeout("amqp")
	st := b.GuardStats()
	if st.PreAuthHeld != 80 || st.PreAuthMax != 100 {
		t.Fatalf("held %d of %d, want 80 of 100", st.PreAuthHeld, st.PreAuthMax)
	}
	if st.PreAuthRefused["stomp"][PreAuthBudget] != 1 || st.PreAuthRefused["mqtt"][PreAuthFrameTooLarge] != 2 || st.FrameTimeouts["amqp"] != 1 {
		t.Fatalf("counts %+v", st)
	}
	a1.Close()
	if err := a2.Charge(30); err != nil {
		t.Fatal(err)
	}
	a2.Close()
	if held := b.GuardStats().PreAuthHeld; held != 0 {
		t.Fatalf("held %d after every account closed", held)
	}
}

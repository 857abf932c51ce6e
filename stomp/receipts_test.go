package stomp_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/stomp/stomptest"
)

// gatedJournal is a message journal whose appends complete only when the
// test opens the gate, in order; everything else completes at once.
type gatedJournal struct {
	testserve.NopJournal
	mu      sync.Mutex
	open    bool
	waiting []func(error)
	appends chan struct{} // one token per append
}

func (j *gatedJournal) Append(_ uint64, _ uint16, _ []byte, _ bool, done func(error)) {
	j.mu.Lock()
	if j.open {
		j.mu.Unlock()
		go done(nil)
		return
	}
	j.waiting = append(j.waiting, done)
	j.mu.Unlock()
	j.appends <- struct{}{}
}

// release completes the appends held so far, in order, and lets later
// ones complete at once.
func (j *gatedJournal) release() {
	j.mu.Lock()
	j.open = true
	waiting := j.waiting
	j.waiting = nil
	j.mu.Unlock()
	go func() {
		for _, done := range waiting {
			done(nil)
		}
	}()
}

// signalWriter signals on ch each log line that contains what.
type signalWriter struct {
	what string
	ch   chan struct{}
}

func (w signalWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(w.what)) {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// A client pipelines 20 persistent SENDs with receipts, then a malformed
// frame. The journal stores all 20 after the broker has seen the bad
// frame: every RECEIPT still comes, in order, before the ERROR that
// closes the connection, so the client knows not to send them again.
func TestReceiptsBeforeError(t *testing.T) {
	j := &gatedJournal{appends: make(chan struct{}, 64)}
	errSent := make(chan struct{}, 1)
	log := zerolog.New(signalWriter{what: "stomp error sent", ch: errSent}).Level(zerolog.DebugLevel)
	tb := stomptest.StartWith(t, core.Config{Messages: j, Bindings: testserve.NopJournal{}}, stomp.Config{Logger: log})
	r := tb.Raw(t)
	r.Connect("")
	var frames strings.Builder
	for i := range 20 {
		fmt.Fprintf(&frames, "SEND\ndestination:/queue/stored\npersistent:true\nreceipt:r%d\n\nm%d\x00", i, i)
	}
	frames.WriteString("SEND\nno colon here\n\n\x00")
	r.Write(frames.String())
	for i := range 20 {
		select {
		case <-j.appends:
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d sends reached the journal", i)
		}
	}
	// The broker has read the bad frame and prepared its ERROR while the
	// 20 messages wait for the journal.
	select {
	case <-errSent:
	case <-time.After(5 * time.Second):
		t.Fatal("the broker never answered the malformed frame")
	}
	j.release()
	for i := range 20 {
		f := r.Frame()
		if !strings.HasPrefix(f, "RECEIPT\n") || stomptest.Header(f, "receipt-id") != fmt.Sprintf("r%d", i) {
			t.Fatalf("frame %d: want RECEIPT r%d, got %q", i, i, f)
		}
	}
	if f := r.Frame(); !strings.HasPrefix(f, "ERROR\n") || stomptest.Header(f, "message") != "malformed frame" {
		t.Fatalf("after the receipts: want ERROR malformed frame, got %q", f)
	}
	r.Closed()
	if d := depth(tb, "stored"); d != 20 {
		t.Fatalf("queue depth %d, want 20", d)
	}
}

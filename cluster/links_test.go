package cluster

import (
	"sync"
	"testing"
	"time"

	"github.com/junctionmq/junction/cluster/transport"
)

// recordingTransport keeps the forwarding frames a node sends.
type recordingTransport struct {
	mu     sync.Mutex
	frames []*rpcMsg
	full   bool // refuse every frame, as a full queue does
}

func (r *recordingTransport) Send(_ uint64, lane transport.Lane, frame []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full {
		return false
	}
	if lane == transport.LaneRPC {
		m, err := decodeRPC(frame)
		if err == nil {
			r.frames = append(r.frames, m)
		}
	}
	return true
}
func (r *recordingTransport) AddPeer(uint64, string) error { return nil }
func (r *recordingTransport) RemovePeer(uint64)            {}
func (r *recordingTransport) Close() error                 { return nil }

func (r *recordingTransport) kinds() []msgKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []msgKind
	for _, m := range r.frames {
		out = append(out, m.kind)
	}
	return out
}

// linkNode is a Node with only what links need.
func linkNode(t *testing.T) (*Node, *recordingTransport) {
	tr := &recordingTransport{}
	n := &Node{cfg: Config{NodeID: 1, RequestTimeout: time.Second}, stop: make(chan struct{}), trSet: make(chan struct{}), tr: tr}
	close(n.trSet)
	n.rpc = newServer(n)
	n.access = newAccess(n)
	n.links = newLinks(n)
	t.Cleanup(func() { close(n.stop); n.wg.Wait() })
	return n, tr
}

// Frames from a peer not heard from for longer than it waits before it
// resets the link (this node was stopped) are dropped, and the peer is
// asked for a reset: what it sent before may have gone to others since.
func TestLinksDropFramesAfterSilence(t *testing.T) {
	n, tr := linkNode(t)
	l := n.links
	if !l.receive(2, &rpcMsg{kind: kPing, linkEpoch: 77, linkSeq: 1}) {
		t.Fatal("first frame of an epoch refused")
	}
	if !l.receive(2, &rpcMsg{kind: kFlow, linkEpoch: 77, linkSeq: 2}) {
		t.Fatal("next frame refused")
	}
	p := l.peer(2)
	p.mu.Lock()
	p.lastHeard = time.Now().Add(-linkTimeout - time.Second)
	p.mu.Unlock()
	if l.receive(2, &rpcMsg{kind: kDeliver, linkEpoch: 77, linkSeq: 3}) {
		t.Fatal("a frame from before a silence longer than the link timeout was handled")
	}
	if k := tr.kinds(); len(k) != 1 || k[0] != kLinkReset {
		t.Fatalf("frames sent: %v, want one link reset", k)
	}
	// The peer's new epoch is taken afresh.
	if !l.receive(2, &rpcMsg{kind: kPing, linkEpoch: 78, linkSeq: 1}) {
		t.Fatal("the peer's new epoch refused")
	}
}

// A frame the transport refuses resets the peer, but not on the
// sender's goroutine (core calls send with a queue lock held), and once
// per break.
func TestLinksResetOffTheSendersGoroutine(t *testing.T) {
	n, tr := linkNode(t)
	tr.full = true
	// The reset takes the server's lock: held here, as a queue's lock
	// is held by core around a delivery, a reset on this goroutine
	// would never return.
	n.rpc.mu.Lock()
	sent := make(chan struct{})
	go func() {
		n.links.send(2, &rpcMsg{kind: kFlow, cid: 1, n: 1})
		n.links.send(2, &rpcMsg{kind: kFlow, cid: 1, n: 1})
		close(sent)
	}()
	select {
	case <-sent:
	case <-time.After(5 * time.Second):
		t.Fatal("send waited for the reset")
	}
	n.rpc.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p := n.links.peer(2)
		p.mu.Lock()
		done := !p.resetting
		p.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reset never ran")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

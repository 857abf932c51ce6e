package cluster

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/junctionmq/junction/cluster/transport"
	"github.com/junctionmq/junction/core"
)

// Links keep the forwarding protocol's state with each peer honest.
// Frames to a peer are numbered within an epoch; a receiver that sees a
// gap (frames lost when a connection broke and the transport
// reconnected), a new epoch, or nothing at all for linkTimeout, forgets
// everything it had with that peer: the sessions it served for it (their
// consumers' messages go back to their queues) and the sessions it had
// open there (their consumers re-attach, their pending requests fail).
// Both sides reach the same view: a sender whose frame was dropped (the
// transport's queue was full or the peer unreachable) starts a new
// epoch, and a receiver that saw a gap asks the sender to (kLinkReset).
//
// A sender's epochs towards a peer are its run's base (its start time,
// the low epochBits bits cleared) plus the number of times it broke that
// link, so that a receiver can tell that it missed whole epochs: the
// first epoch it hears of a run is not the run's first, or one follows
// another it saw by more than one. Frames were then lost that it cannot
// count (a request's answer, the first frames of all when the sender's
// connection was not up yet while the receiver's was), and it resets as
// for a gap: otherwise a request whose answer was lost waited for the
// request timeout (the 10 s stall "no answer from node 2 within 10s" of
// a node starting, seen in its MQTT front-end's restore).
const (
	pingInterval = 500 * time.Millisecond
	linkTimeout  = 3 * time.Second

	epochBits = 20
	epochMask = 1<<epochBits - 1
)

type peerLink struct {
	mu        sync.Mutex
	outEpoch  uint64
	outSeq    uint64
	breaks    uint64 // times the outbound epoch was broken
	inEpoch   uint64
	inSeq     uint64
	lastEpoch uint64 // the last inbound epoch seen (kept by resets, unlike inEpoch)
	lastHeard time.Time
	buf       []byte
	resetting bool // a reset of the peer is on its way (send)
}

type links struct {
	n     *Node
	mu    sync.Mutex
	peers map[uint64]*peerLink
	base  uint64 // this run's epochs: its start time, the low epochBits bits cleared

	sent, received atomic.Uint64 // client operations forwarded (isOperation)
	resets         atomic.Uint64 // times everything with a peer was reset
}

func newLinks(n *Node) *links {
	return &links{n: n, peers: make(map[uint64]*peerLink), base: max(uint64(time.Now().UnixNano())&^epochMask, epochMask+1)}
}

func (l *links) peer(id uint64) *peerLink {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.peers[id]
	if p == nil {
		p = &peerLink{outEpoch: l.base, lastHeard: time.Now()}
		l.peers[id] = p
	}
	return p
}

// send frames m to peer to. A frame the transport cannot take breaks
// the link: everything with the peer is reset, here and, when it sees
// the new epoch, there. A frame larger than the lane takes is refused
// instead (core.ErrTooLarge), before it is numbered: only a forwarded
// transaction can be, and refusing it costs the link nothing.
func (l *links) send(to uint64, m *rpcMsg) error {
	p := l.peer(to)
	p.mu.Lock()
	m.linkEpoch, m.linkSeq = p.outEpoch, p.outSeq+1
	p.buf = m.encode(p.buf[:0])
	if n, limit := len(p.buf), l.n.cfg.rpcMaxFrame(); n > limit {
		p.buf = nil
		p.mu.Unlock()
		return fmt.Errorf("%w: %d bytes to forward to node %d, over the limit of %d", core.ErrTooLarge, n, to, limit)
	}
	p.outSeq++
	ok := l.n.tr.Send(to, transport.LaneRPC, p.buf)
	if isOperation(m.kind) {
		l.sent.Add(1)
	}
	if len(p.buf) > 64<<10 {
		p.buf = nil // do not keep a big message's buffer
	}
	reset := false
	if !ok {
		l.breakOutLocked(p)
		reset = !p.resetting
		p.resetting = true
	}
	p.mu.Unlock()
	if reset {
		// Not here: send is called from core's delivery handlers with a
		// queue's lock held, and resetting the peer closes the sessions
		// it had here, whose consumers take queue locks (a consumer of
		// the same queue deadlocked that way). One reset per break.
		l.n.log.Debug().Uint64("peer", to).Msg("forwarding frame dropped: resetting the link")
		l.n.goWork(func(<-chan struct{}) {
			p.mu.Lock()
			p.resetting = false
			p.mu.Unlock()
			l.n.resetPeer(to)
		})
	}
	return nil
}

// isOperation reports whether a frame of kind k carries an operation
// one node's access side asks of another's groups (what Status's
// Forwarded counts), not an answer, a delivery or a notice of loss
// coming back, nor the links' own frames.
func isOperation(k msgKind) bool {
	switch k {
	case kResult, kDeliver, kSessionLost, kConsumerLost, kPing, kLinkReset:
		return false
	}
	return true
}

func (l *links) breakOutLocked(p *peerLink) {
	p.breaks++
	p.outEpoch = l.base + p.breaks
	p.outSeq = 0
}

// epochSkipped reports whether a peer's epoch e, new to this node, shows
// that whole epochs of it went unseen: last is the one seen before (0:
// none).
func epochSkipped(last, e uint64) bool {
	if last == 0 || last&^epochMask != e&^epochMask {
		return e&epochMask != 0 // not its run's first
	}
	return e > last+1
}

// receive checks a frame's place in the link and reports whether to
// handle it.
func (l *links) receive(from uint64, m *rpcMsg) bool {
	if isOperation(m.kind) {
		l.received.Add(1)
	}
	l.n.noteReached(from)
	p := l.peer(from)
	p.mu.Lock()
	now := time.Now()
	// Silent for longer than the peer waits before it forgets us (this
	// node was stopped or starved, and run has not seen it yet): the
	// peer has most likely reset the link and redelivered elsewhere
	// what it had sent us, so frames still in the pipe from before are
	// not to be handled (a stale delivery would reach a client again,
	// unflagged). Start afresh, as run does for a silent peer.
	stale := p.inEpoch != 0 && now.Sub(p.lastHeard) > linkTimeout
	if stale {
		p.inEpoch, p.inSeq = 0, 0
		l.breakOutLocked(p)
	}
	p.lastHeard = now
	reset, gap := stale, stale
	switch {
	case stale:
	case m.linkEpoch != p.inEpoch:
		// A new epoch: the peer restarted or reset the link. What we had
		// with it is gone; this frame starts afresh (seq 1), or we ask
		// for another reset if it does not. We reset too if epochs went
		// unseen, even with nothing known of the peer: their frames
		// were lost.
		reset = p.inEpoch != 0 || epochSkipped(p.lastEpoch, m.linkEpoch)
		p.inEpoch, p.inSeq = m.linkEpoch, 0
		p.lastEpoch = m.linkEpoch
		if m.linkSeq != 1 {
			gap = true
		}
	case m.linkSeq != p.inSeq+1:
		gap = true
	}
	if gap {
		p.inEpoch, p.inSeq = 0, 0
		l.breakOutLocked(p)
	} else {
		p.inSeq = m.linkSeq
	}
	p.mu.Unlock()
	if m.kind == kLinkReset {
		// The peer saw a gap in our frames: our epoch is already new
		// when gap; otherwise start one now.
		if !gap {
			p.mu.Lock()
			l.breakOutLocked(p)
			p.mu.Unlock()
		}
		l.n.resetPeer(from)
		return false
	}
	if reset || gap {
		l.n.resetPeer(from)
	}
	if gap {
		l.send(from, &rpcMsg{kind: kLinkReset})
		return false
	}
	return true
}

// run pings every peer and resets the links of peers not heard from.
func (l *links) run(done <-chan struct{}) {
	// Four times per lease at least: the pings also show the fence that
	// the peer is in touch when no Raft message comes from it (neither
	// leads a group the other follows, between a leader's loss and the
	// next election), and a ping or two late on a busy machine must not
	// look like a cut.
	t := time.NewTicker(min(pingInterval, l.n.lease()/4))
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			l.n.rpc.activated(nil) // requests parked too long
			for _, id := range l.n.peerIDs() {
				l.send(id, &rpcMsg{kind: kPing})
				p := l.peer(id)
				p.mu.Lock()
				silent := now.Sub(p.lastHeard) > linkTimeout
				if silent {
					p.lastHeard = now
					p.inEpoch, p.inSeq = 0, 0
					l.breakOutLocked(p)
				}
				p.mu.Unlock()
				if silent {
					l.n.log.Debug().Uint64("peer", id).Msg("forwarding link silent: resetting it")
					l.n.resetPeer(id)
				}
			}
		}
	}
}

package core

// The fence (cluster mode). A mirror hands out flagged redelivered what
// its upstream says may meanwhile have gone to another consumer
// (DoubtingUpstream), but a delivery handed out unflagged before its
// source became doubtful may still be on its way: in the front-end's
// writer, or in the kernel's send queue of a connection whose client
// cannot be reached (a partition around this node), retransmitted until
// the network heals. It then arrives, unflagged, after the group has
// redelivered it (flagged) elsewhere. Those bytes cannot be recalled,
// but they can be dropped: the cluster calls FenceDoubtful while the
// sources of its deliveries are doubtful, and each connection holding
// such a delivery is closed abortively (SessionOptions.Abort: a TCP
// reset, the send queue discarded). Its client reconnects and gets the
// messages again, flagged, from their group.

// FencingCluster is implemented by a Cluster that fences the access
// broker's connections: New calls FenceBroker once with the broker it
// serves, before the broker opens any session, and the cluster calls
// b.FenceDoubtful from then on whenever the sources of its deliveries
// may have become doubtful.
type FencingCluster interface {
	FenceBroker(b *Broker)
}

// FencedConnection describes a connection FenceDoubtful closed.
type FencedConnection struct {
	ID         uint64 // the connection id (Session.ID, Broker.Connections)
	Protocol   string
	User       string
	ClientID   string
	RemoteAddr string
	// Deliveries is how many unacknowledged deliveries it held that were
	// handed out unflagged and whose source is now doubtful.
	Deliveries int
}

// FenceDoubtful closes abortively (SessionOptions.Abort) every client
// connection that holds an unacknowledged delivery of a mirror queue
// that was handed out unflagged (not marked redelivered) and whose
// upstream now says it is doubtful (DoubtingUpstream), and returns them.
// A connection is fenced once: a later call skips it while it closes.
// Connections whose front-end gives no Abort are left alone.
//
// It takes each session's and queue's lock in turn, never two at once,
// and calls Abort with no lock held. Its cost is in the number of
// consumers and of their unacknowledged deliveries, so the cluster calls
// it only while something may be doubtful; a broker with no Cluster
// returns at once.
func (b *Broker) FenceDoubtful() []FencedConnection {
	if b.cluster == nil {
		return nil
	}
	b.sessMu.Lock()
	sessions := make([]*Session, 0, len(b.sessions))
	for _, s := range b.sessions {
		if s.opts.Abort != nil && !s.fenced.Load() {
			sessions = append(sessions, s)
		}
	}
	b.sessMu.Unlock()
	var fenced []FencedConnection
	var aborts []func()
	var cs []*Consumer
	for _, s := range sessions {
		cs = cs[:0]
		s.mu.Lock()
		for c := range s.consumers {
			if c.q.doubt != nil {
				cs = append(cs, c)
			}
		}
		s.mu.Unlock()
		n := 0
		for _, c := range cs {
			n += c.doubtfulInflight()
		}
		if n == 0 || s.fenced.Swap(true) {
			continue
		}
		fenced = append(fenced, FencedConnection{ID: s.id, Protocol: s.opts.Protocol, User: s.opts.User,
			ClientID: s.opts.ClientID, RemoteAddr: s.opts.RemoteAddr, Deliveries: n})
		aborts = append(aborts, s.opts.Abort)
	}
	for _, abort := range aborts {
		abort()
	}
	return fenced
}

// doubtfulInflight counts the consumer's unacknowledged deliveries that
// went out unflagged and whose upstream is now doubtful.
func (c *Consumer) doubtfulInflight() int {
	q := c.q
	n := 0
	q.mu.Lock()
	defer q.mu.Unlock()
	if c.closed || c.live == 0 {
		return 0
	}
	for _, sl := range c.inflight {
		if r := sl.r; r != nil && !r.recovered && r.failures == 0 && q.doubt.Doubtful(r.tag) {
			n++
		}
	}
	return n
}

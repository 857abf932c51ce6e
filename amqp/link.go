package amqp

import (
	"errors"
	"fmt"

	"github.com/junctionmq/junction/amqp/internal/encoding"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
)

// link is one attached link. role is the broker's role: RoleSender
// links deliver a queue to a client receiver; RoleReceiver links take a
// client sender's messages (or, with coordinator set, its transaction
// requests).
type link struct {
	sess   *session
	name   string
	handle uint32
	role   frames.Role

	// Broker as sender. cons is set at attach; dcBase + deliveries made
	// by cons is the link's delivery-count (drain advances dcBase).
	cons    *core.Consumer
	settled bool   // deliveries are sent pre-settled
	dcBase  uint32 // read loop
	subName string // durable subscription, deleted by a closing detach
	temp    string // dynamic queue, deleted with the link

	// Broker as receiver.
	addr        string // empty: anonymous relay (each message's to)
	rt          core.RoutingType
	coordinator bool
	partial     *incoming // a delivery being reassembled (read loop)

	// Guarded by c.mu: shared with the writer, which tops up credit as
	// confirmations come back.
	detached      bool
	deliveryCount uint32 // the client sender's, as the broker counts it
	credit        uint32 // what remains of the credit granted
	unconfirmed   int    // unsettled deliveries not yet confirmed
	held          bool   // credit withheld: the address is blocked (hold.go)
}

// incoming is a delivery from a client being reassembled.
type incoming struct {
	id      uint32
	settled bool
	txn     []byte // transactional-state's txn-id, if any
	buf     []byte
	// A large body streamed to its file (stream.go), or noStream when
	// it cannot be and the message is reassembled in memory.
	stream   *inStream
	noStream bool
}

// linkErr refuses or closes a link with a condition.
type linkError struct{ e *frames.Error }

func (e *linkError) Error() string { return string(e.e.Condition) + ": " + e.e.Description }

func linkErr(cond encoding.Symbol, format string, args ...any) error {
	return &linkError{&frames.Error{Condition: cond, Description: fmt.Sprintf(format, args...)}}
}

// attach handles an attach: the client's role decides the broker's.
func (s *session) attach(a *frames.Attach) error {
	if a.Handle > s.c.s.cfg.HandleMax {
		return connErr(frames.ErrCondFramingError, "handle %d exceeds handle-max %d", a.Handle, s.c.s.cfg.HandleMax)
	}
	if s.links[a.Handle] != nil {
		return sessionErr(frames.ErrCondHandleInUse, "handle %d is already attached", a.Handle)
	}
	l := &link{sess: s, name: a.Name, handle: a.Handle}
	var reply *frames.Attach
	var err error
	// The broker's role is the opposite of the client's.
	l.role = frames.RoleReceiver
	if a.Role == frames.RoleReceiver {
		l.role = frames.RoleSender
	}
	switch {
	case s.c.s.cfg.MaxLinks > 0 && s.c.links() >= s.c.s.cfg.MaxLinks:
		err = linkErr(frames.ErrCondResourceLimitExceeded, "the connection has %d links, the broker's limit", s.c.s.cfg.MaxLinks)
	case l.role == frames.RoleSender:
		reply, err = l.attachSender(a)
	default:
		reply, err = l.attachReceiver(a)
	}
	var le *linkError
	if errors.As(err, &le) {
		// The refusal pattern (Part 2 §2.6.3): an attach with a null
		// terminus on the broker's side, then a closing detach.
		refusal := &frames.Attach{Name: a.Name, Handle: a.Handle, Role: l.role, SndSettleMode: a.SndSettleMode, RcvSettleMode: a.RcvSettleMode}
		if l.role == frames.RoleSender {
			refusal.Target = a.Target
			refusal.InitialDeliveryCount = &zero32
		} else {
			refusal.Source = a.Source
		}
		s.c.enqueue(outItem{sess: s, body: refusal})
		s.c.enqueue(outItem{sess: s, body: &frames.Detach{Handle: a.Handle, Closed: true, Error: le.e}})
		s.c.debug().Str("link", a.Name).Str("condition", string(le.e.Condition)).Str("description", le.e.Description).Msg("link refused")
		return nil
	}
	if err != nil {
		return err
	}
	s.links[a.Handle] = l
	s.c.enqueue(outItem{sess: s, body: reply})
	if l.role == frames.RoleReceiver {
		s.c.enqueue(outItem{kind: kindFlow, sess: s, body: l.grant()})
	}
	return nil
}

// links counts the links attached on the connection.
func (c *conn) links() int {
	n := 0
	for _, s := range c.sessions {
		n += len(s.links)
	}
	return n
}

// attachSender attaches a link on which the broker delivers a queue or
// a subscription to a client receiver.
func (l *link) attachSender(a *frames.Attach) (*frames.Attach, error) {
	c := l.sess.c
	src := a.Source
	if src == nil {
		return nil, linkErr(frames.ErrCondInvalidField, "a receiving link needs a source")
	}
	opts := core.ConsumerOptions{Handler: l.deliver}
	reply := *src
	switch {
	case src.Dynamic:
		name, err := c.core.CreateTemporaryQueue()
		if err != nil {
			return nil, linkErr(conditionOf(err), "%v", err)
		}
		l.temp = name
		opts.Address, opts.RoutingType = name, core.Anycast
		reply.Address = &name
	default:
		addr, rt, err := c.resolve(derefString(src.Address), src.Capabilities)
		if err != nil {
			return nil, err
		}
		opts.Address, opts.RoutingType = addr, rt
	}
	if opts.RoutingType == core.Multicast {
		switch {
		case hasCap(src.Capabilities, capShared):
			opts.SharedSubscriptionName = subscriptionName(a.Name)
		case src.Durable != 0 && src.ExpiryPolicy == expiryNever:
			// A durable subscription named by container-id and link
			// name, as Artemis and Qpid JMS have it.
			opts.SubscriptionName = a.Name
			l.subName = a.Name
		}
	}
	for key, f := range src.Filter {
		switch {
		case f != nil && key == frames.SelectorFilterName || frames.IsFilter(f, frames.SelectorFilterCode, frames.SelectorFilterName):
			sel, ok := f.Value.(string)
			if !ok {
				return nil, linkErr(frames.ErrCondInvalidField, "selector filter %q is not a string", key)
			}
			opts.Selector = sel
		case f != nil && key == frames.NoLocalFilterName || frames.IsFilter(f, frames.NoLocalFilterCode, frames.NoLocalFilterName):
			opts.NoLocal = true
		default:
			// Filters the broker does not apply must not be echoed: the
			// client then knows they are not in force (Part 3 §3.5.3).
			delete(reply.Filter, key)
		}
	}
	cons, err := c.core.Subscribe(opts)
	if err != nil {
		if l.temp != "" {
			c.s.broker.DeleteQueue(l.temp)
		}
		return nil, linkErr(conditionOf(err), "%v", err)
	}
	l.cons = cons
	l.settled = a.SndSettleMode == frames.SndSettled
	return &frames.Attach{
		Name: a.Name, Handle: a.Handle, Role: frames.RoleSender,
		SndSettleMode: a.SndSettleMode, RcvSettleMode: a.RcvSettleMode,
		Source: &reply, Target: a.Target,
		InitialDeliveryCount: &zero32,
		OfferedCapabilities:  a.DesiredCapabilities,
	}, nil
}

// attachReceiver attaches a link on which a client sends to an address,
// to whatever each message's to names (anonymous relay), or to the
// transaction coordinator.
func (l *link) attachReceiver(a *frames.Attach) (*frames.Attach, error) {
	c := l.sess.c
	reply := &frames.Attach{
		Name: a.Name, Handle: a.Handle, Role: frames.RoleReceiver,
		SndSettleMode: a.SndSettleMode, RcvSettleMode: frames.RcvFirst,
		Source: a.Source, Target: a.Target, Coordinator: a.Coordinator,
		MaxMessageSize: uint64(c.maxMessageSize()),
	}
	switch {
	case a.Coordinator != nil:
		if !hasCap(a.Coordinator.Capabilities, capLocalTx) && len(a.Coordinator.Capabilities) > 0 {
			return nil, linkErr(frames.ErrCondNotImplemented, "only local transactions are supported")
		}
		l.coordinator = true
		reply.Coordinator = &frames.Coordinator{Capabilities: []encoding.Symbol{capLocalTx}}
	case a.Target == nil:
		return nil, linkErr(frames.ErrCondInvalidField, "a sending link needs a target")
	case a.Target.Dynamic:
		name, err := c.core.CreateTemporaryQueue()
		if err != nil {
			return nil, linkErr(conditionOf(err), "%v", err)
		}
		l.temp, l.addr, l.rt = name, name, core.Anycast
		t := *a.Target
		t.Address = &name
		reply.Target = &t
	case derefString(a.Target.Address) == "":
		// Anonymous relay: each message's to decides.
	default:
		addr, rt, err := c.resolve(*a.Target.Address, a.Target.Capabilities)
		if err != nil {
			return nil, err
		}
		// Refused at attach rather than message by message: send, and
		// what auto-creating the address needs.
		if err := c.core.AuthorizeSend(addr, rt); err != nil {
			return nil, linkErr(conditionOf(err), "%v", err)
		}
		l.addr, l.rt = addr, rt
	}
	if a.InitialDeliveryCount != nil {
		l.deliveryCount = *a.InitialDeliveryCount
	}
	return reply, nil
}

// refillLocked tops up a client sender's credit when less than a third
// remains, counting unconfirmed deliveries against it: the credit
// bounds what a producer has in flight, confirmed or not. It returns
// the flow to send, or nil. c.mu is held. Callers outside hold.go use
// refill, which withholds credit while the address is blocked.
func (l *link) refillLocked() *frames.Flow {
	if !l.refillDueLocked() {
		return nil // nothing used up, or not worth a frame yet
	}
	want := int(l.sess.c.s.cfg.LinkCredit) - l.unconfirmed
	l.credit = uint32(want)
	return l.flowLocked()
}

func (l *link) flowLocked() *frames.Flow {
	h, dc, cr := l.handle, l.deliveryCount, l.credit
	return &frames.Flow{Handle: &h, DeliveryCount: &dc, LinkCredit: &cr}
}

// deliver is the core consumer's handler: it queues the delivery for
// the writer. Called with the queue's lock held.
func (l *link) deliver(d core.Delivery) {
	l.sess.c.enqueue(outItem{kind: kindDelivery, sess: l.sess, link: l, d: d})
}

// flow applies the link part of a flow.
func (l *link) flow(f *frames.Flow) error {
	c := l.sess.c
	if l.role == frames.RoleReceiver {
		if f.Echo {
			c.mu.Lock()
			fl := l.flowLocked()
			c.mu.Unlock()
			c.enqueue(outItem{kind: kindFlow, sess: l.sess, body: fl})
		}
		return nil
	}
	if f.LinkCredit != nil {
		// credit = receiver's delivery-count + link-credit − sender's
		// delivery-count (Part 2 §2.6.7), computed under the queue's
		// lock so that a delivery in progress is counted.
		rcvDC := l.dcBase
		if f.DeliveryCount != nil {
			rcvDC = *f.DeliveryCount
		}
		limit := rcvDC + *f.LinkCredit
		base := l.dcBase
		l.cons.UpdateCredit(func(delivered uint64) int {
			left := limit - (base + uint32(delivered))
			if left > 1<<31 {
				return 0 // the client counted fewer deliveries than were sent
			}
			return int(left)
		})
	}
	if f.Drain {
		unused, delivered := l.cons.Drain()
		l.dcBase += uint32(unused)
		dc, zero, h := l.dcBase+uint32(delivered), uint32(0), l.handle
		c.enqueue(outItem{kind: kindFlow, sess: l.sess, body: &frames.Flow{Handle: &h, DeliveryCount: &dc, LinkCredit: &zero, Drain: true}})
		return nil
	}
	if f.Echo {
		delivered := l.cons.Delivered()
		dc, cr, h := l.dcBase+uint32(delivered), uint32(l.cons.Credit()), l.handle
		avail := uint32(l.cons.Available())
		c.enqueue(outItem{kind: kindFlow, sess: l.sess, body: &frames.Flow{Handle: &h, DeliveryCount: &dc, LinkCredit: &cr, Available: &avail}})
	}
	return nil
}

// detach handles the client's detach and answers it.
func (s *session) detach(d *frames.Detach) error {
	l := s.links[d.Handle]
	if l == nil {
		return nil // the answer to the broker's own detach of a refused link
	}
	delete(s.links, d.Handle)
	l.close(d.Closed)
	s.c.enqueue(outItem{sess: s, body: &frames.Detach{Handle: d.Handle, Closed: d.Closed}})
	return nil
}

// close ends the link. Its consumer's unsettled deliveries go back to
// the queue; with closed, a durable subscription is deleted too; a
// dynamic queue is deleted either way.
func (l *link) close(closed bool) {
	c := l.sess.c
	c.mu.Lock()
	l.detached = true
	c.mu.Unlock()
	if p := l.partial; p != nil && p.stream != nil {
		p.stream.abort(errLinkClosed) // its file goes; never confirmed
		l.partial = nil
	}
	if l.cons != nil {
		l.cons.Close()
	}
	if closed && l.subName != "" {
		if err := c.core.Unsubscribe(l.subName); err != nil {
			c.debug().Err(err).Str("subscription", l.subName).Msg("unsubscribe on detach")
		}
	}
	if l.temp != "" {
		c.s.broker.DeleteQueue(l.temp)
	}
}

// detachWith closes the link with an error, from the broker's side.
func (l *link) detachWith(e *frames.Error) {
	s := l.sess
	delete(s.links, l.handle)
	l.close(false)
	s.c.enqueue(outItem{sess: s, body: &frames.Detach{Handle: l.handle, Closed: true, Error: e}})
}

func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func hasCap(caps []encoding.Symbol, c encoding.Symbol) bool {
	for _, x := range caps {
		if x == c {
			return true
		}
	}
	return false
}

// subscriptionName strips the suffixes Qpid JMS adds to the link name of
// a shared subscription ("name|global", "name|volatile1").
func subscriptionName(link string) string {
	for i := len(link) - 1; i >= 0; i-- {
		if link[i] == '|' {
			return link[:i]
		}
	}
	return link
}

// Terminus values the broker reads.
const (
	expiryNever = encoding.Symbol("never")
	capLocalTx  = encoding.Symbol("amqp:local-transactions")
)

package mqtt

import (
	"errors"
	"strings"
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/junctionmq/junction/core"
)

// A persistent MQTT session (MQTT 3 clean session false, or MQTT 5 with a
// session expiry interval) is served from core, not from mochi: each of
// its subscriptions is a durable core subscription of the client id
// "mqtt/<client id>", named "q<QoS>/<filter>". So its messages are
// journaled like any durable queue's: they wait while the client is
// away, survive a restart and kill -9, and an MQTT publisher's PUBACK
// waits for them to be on disk. mochi keeps the subscription in the
// client's session state (for SUBACK and UNSUBSCRIBE) but not in its
// fan-out index, so each message is delivered once, by the bridge.

// clientIDPrefix namespaces MQTT client ids among core's.
const clientIDPrefix = "mqtt/"

// persistentSession reports whether cl's session outlives its connection.
func persistentSession(cl *mochi.Client) bool {
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props.SessionExpiryInterval > 0
	}
	return !cl.Properties.Clean
}

func subName(filter string, qos byte) string {
	return "q" + string('0'+qos) + "/" + filter
}

func parseSubName(name string) (filter string, qos byte, ok bool) {
	if len(name) < 3 || name[0] != 'q' || name[2] != '/' || name[1] < '0' || name[1] > '2' {
		return "", 0, false
	}
	return name[3:], name[1] - '0', true
}

// pclient delivers the core-served subscriptions of one connection (a
// persistent session's, and shared subscriptions) to it. Its writer
// goroutine owns the packet ids it hands out. It does not own the core
// session: clientState closes that after the pclient.
type pclient struct {
	br   *bridge
	cl   *mochi.Client
	sess *core.Session

	mu      sync.Mutex
	subs    map[string]*psub     // guarded by mu, by filter
	pending map[uint16]delivered // guarded by mu: QoS 1 deliveries awaiting PUBACK
	queue   []outgoing           // guarded by mu
	nextID  uint16               // guarded by mu
	closed  bool                 // guarded by mu

	wake    chan struct{}
	ackWake chan struct{} // kicked by PUBACKs, for a writer waiting on the window
	done    chan struct{}
	wg      sync.WaitGroup
}

type psub struct {
	filter string // as the client gave it, $share/GROUP/... included
	qos    byte
	shared bool
	cons   *core.Consumer
}

type outgoing struct {
	d   core.Delivery
	sub *psub
}

type delivered struct {
	cons *core.Consumer
	id   uint64
}

func newPClient(br *bridge, cl *mochi.Client, sess *core.Session) *pclient {
	p := &pclient{
		br: br, cl: cl, sess: sess,
		subs: make(map[string]*psub), pending: make(map[uint16]delivered),
		wake: make(chan struct{}, 1), ackWake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	p.wg.Add(1)
	go p.writeLoop()
	return p
}

// resume re-attaches the session's durable subscriptions (after a
// reconnect or a broker restart), or drops them on a clean start.
func (p *pclient) resume(clean bool) {
	for _, info := range p.sess.DurableSubscriptions() {
		filter, qos, ok := parseSubName(info.Name)
		if !ok {
			continue
		}
		if clean {
			p.sess.Unsubscribe(info.Name)
			continue
		}
		p.subscribe(filter, qos)
	}
}

// subscribe attaches (creating if needed) the core subscription for
// filter at qos, replacing one at another QoS: a shared subscription for
// $share/GROUP/filter, else the session's durable subscription.
func (p *pclient) subscribe(filter string, qos byte) {
	p.mu.Lock()
	old := p.subs[filter]
	p.mu.Unlock()
	if old != nil {
		if old.qos == qos {
			return
		}
		p.drop(old)
	}
	s := &psub{filter: filter, qos: qos}
	credit := p.br.s.cfg.ReceiveMaximum
	if rm := int(p.cl.Properties.Props.ReceiveMaximum); rm > 0 && rm < credit {
		credit = rm // the client's Receive Maximum bounds what is in flight to it [MQTT-3.3.4-7]
	}
	opts := core.ConsumerOptions{
		RoutingType: core.Multicast,
		Credit:      credit,
		Handler:     func(d core.Delivery) { p.push(outgoing{d, s}) },
	}
	if group, f, ok := splitShared(filter); ok {
		s.shared = true
		opts.Address = FilterToPattern(f)
		opts.SharedSubscriptionName = group
	} else {
		opts.Address = FilterToPattern(filter)
		opts.SubscriptionName = subName(filter, qos)
		opts.MaxBytes = p.br.s.cfg.MaxSessionBytes
	}
	cons, err := p.sess.Subscribe(opts)
	if err != nil {
		p.br.log.Warn().Err(err).Str("client", p.cl.ID).Str("filter", filter).Msg("mqtt: durable subscription failed")
		return
	}
	s.cons = cons
	p.mu.Lock()
	p.subs[filter] = s
	p.mu.Unlock()
}

// unsubscribe ends the core subscription for filter.
func (p *pclient) unsubscribe(filter string) {
	p.mu.Lock()
	s := p.subs[filter]
	p.mu.Unlock()
	if s != nil {
		p.drop(s)
	}
}

// drop closes s's consumer and, for a durable subscription, deletes it.
func (p *pclient) drop(s *psub) {
	p.mu.Lock()
	if p.subs[s.filter] == s {
		delete(p.subs, s.filter)
	}
	p.mu.Unlock()
	s.cons.Close()
	if !s.shared {
		p.sess.Unsubscribe(subName(s.filter, s.qos))
	}
}

// splitShared splits an MQTT 5 shared subscription filter
// $share/GROUP/filter.
func splitShared(filter string) (group, f string, ok bool) {
	rest, ok := strings.CutPrefix(filter, "$share/")
	if !ok {
		return "", "", false
	}
	group, f, ok = strings.Cut(rest, "/")
	return group, f, ok && group != "" && f != ""
}

// push queues a delivery for the writer; called under a core queue lock,
// so it only appends.
func (p *pclient) push(o outgoing) {
	p.mu.Lock()
	p.queue = append(p.queue, o)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// writeLoop writes deliveries as PUBLISH packets: QoS 1 for a durable
// message on a QoS 1 or 2 subscription (acked in core on PUBACK), else
// QoS 0 (acked once written).
func (p *pclient) writeLoop() {
	defer p.wg.Done()
	var batch []outgoing
	for {
		select {
		case <-p.done:
			return
		case <-p.wake:
		}
		p.mu.Lock()
		batch, p.queue = p.queue, batch[:0]
		p.mu.Unlock()
		// The batch goes out in as few writes as the window allows.
		cc := corkOf(p.cl)
		if len(batch) < 2 {
			cc = nil
		}
		if cc != nil {
			cc.cork()
		}
		for _, o := range batch {
			m := o.d.Message
			pk := publishFromMessage(m, time.Now())
			pk.FixedHeader.Qos = 0
			if m.Durable && o.sub.qos > 0 {
				// All of the connection's subscriptions share the client's
				// Receive Maximum [MQTT-3.3.4-7]: wait for PUBACKs first
				// (having sent what the client is to acknowledge).
				if !p.waitWindow(cc) {
					if cc != nil {
						cc.uncork()
					}
					return
				}
				pk.FixedHeader.Qos = 1
				pk.FixedHeader.Dup = o.d.Redelivered()
				// The delivery's own consumer: o.sub.cons is set only when
				// Subscribe returns, after its first deliveries.
				pk.PacketID = p.allocID(delivered{o.d.Consumer, o.d.ID})
			} else {
				pk.PacketID = 0
			}
			if err := p.cl.WritePacket(pk); err != nil {
				// The connection is gone; OnDisconnect closes the
				// consumers and their deliveries return to the queues.
				if cc != nil {
					cc.uncork()
				}
				return
			}
			if pk.FixedHeader.Qos == 0 {
				o.d.Consumer.Ack(o.d.ID)
				o.d.Consumer.Flow(1)
			}
		}
		if cc != nil && cc.uncork() != nil {
			return
		}
		clear(batch)
	}
}

// window is how many QoS 1 deliveries may await PUBACK at once: the
// client's Receive Maximum (MQTT 5), else the configured one.
func (p *pclient) window() int {
	w := p.br.s.cfg.ReceiveMaximum
	if rm := int(p.cl.Properties.Props.ReceiveMaximum); rm > 0 && rm < w {
		w = rm
	}
	return w
}

// waitWindow blocks the writer while the window is full, first writing
// what cc (if not nil) holds; false when the pclient is closing.
func (p *pclient) waitWindow(cc *corkConn) bool {
	for {
		p.mu.Lock()
		n := len(p.pending)
		p.mu.Unlock()
		if n < p.window() {
			return true
		}
		if cc != nil {
			err := cc.uncork()
			cc.cork()
			if err != nil {
				return false
			}
		}
		select {
		case <-p.done:
			return false
		case <-p.ackWake:
		}
	}
}

// allocID hands out a packet id not in use by this session's deliveries
// nor by mochi's own in-flight messages to the client.
func (p *pclient) allocID(d delivered) uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		p.nextID++
		if p.nextID == 0 {
			p.nextID = 1
		}
		if _, used := p.pending[p.nextID]; used {
			continue
		}
		if _, used := p.cl.State.Inflight.Get(p.nextID); used {
			continue
		}
		p.pending[p.nextID] = d
		return p.nextID
	}
}

// acked settles the delivery a PUBACK names.
func (p *pclient) acked(id uint16) {
	p.mu.Lock()
	d, ok := p.pending[id]
	delete(p.pending, id)
	p.mu.Unlock()
	if ok {
		d.cons.Ack(d.id)
		d.cons.Flow(1)
		select {
		case p.ackWake <- struct{}{}:
		default:
		}
	}
}

// close stops the writer. Closing the core session afterwards detaches
// the consumers; their unacked messages go back to their subscriptions
// (for a persistent session, until the next connection).
func (p *pclient) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	close(p.done)
	p.wg.Wait()
}

// openSession opens the client's core session: with a client id for a
// persistent session, whose durable subscriptions it resumes.
func (br *bridge) openSession(cl *mochi.Client, user string) (*core.Session, *pclient, error) {
	if !persistentSession(cl) {
		// A clean, non-persistent client may have left a persistent
		// session behind: a clean start discards it [MQTT-3.1.2-6].
		if old, err := br.claim(core.SessionOptions{ClientID: clientIDPrefix + cl.ID}); err == nil {
			for _, info := range old.DurableSubscriptions() {
				old.Unsubscribe(info.Name)
			}
			old.Close()
		}
		s, err := br.b.NewSession(br.clientOptions(cl, user, ""))
		return s, nil, err
	}
	s, err := br.claim(br.clientOptions(cl, user, clientIDPrefix+cl.ID))
	if err != nil {
		return nil, nil, err
	}
	p := newPClient(br, cl, s)
	p.resume(cl.Properties.Clean)
	// mochi put the subscriptions it inherited from the previous
	// connection back into its fan-out index; core serves them.
	for _, sub := range cl.State.Subscriptions.GetAll() {
		br.s.mochi.Topics.Unsubscribe(sub.Filter, cl.ID)
	}
	return s, p, nil
}

// errAdminClose is the stop cause of a client closed through
// core.Broker.CloseConnection.
var errAdminClose = errors.New("mqtt: connection closed by an administrator")

// clientOptions are the core session options of MQTT client cl: a
// connection of protocol "mqtt" that an administrator may close, which
// stops the client in mochi (closing its network connection; mochi's
// OnDisconnect then closes the session). The session is also closed at
// once: a publish waiting in core for room (address-full-policy BLOCK)
// holds mochi's read loop, and with it OnDisconnect, until it gives up.
// The bridge's own sessions have no Protocol and are not connections.
func (br *bridge) clientOptions(cl *mochi.Client, user, clientID string) core.SessionOptions {
	return core.SessionOptions{
		User: user, ClientID: clientID,
		Protocol: "mqtt", RemoteAddr: cl.Net.Remote,
		Close: func() {
			cl.Stop(errAdminClose)
			if cs := br.state(cl); cs != nil {
				cs.sess.Close()
			}
		},
	}
}

// closeSessions closes the core sessions of every client, for the
// server's Close: publishes waiting in core for room give up, so that
// the clients' read loops end (mochi's Close waits for them).
func (br *bridge) closeSessions() {
	br.mu.Lock()
	ss := make([]*core.Session, 0, len(br.sessions))
	for _, cs := range br.sessions {
		ss = append(ss, cs.sess)
	}
	br.mu.Unlock()
	for _, s := range ss {
		s.Close()
	}
}

// onSubscribed moves subscriptions that core serves from mochi's
// fan-out to core: all of a persistent session's, and shared ones of any
// client (so that MQTT and other protocols share one group).
func (br *bridge) onSubscribed(cs *clientState, pk packets.Packet, codes []byte) {
	for i, sub := range pk.Filters {
		if i >= len(codes) || codes[i] >= packets.ErrUnspecifiedError.Code {
			continue
		}
		_, _, shared := splitShared(sub.Filter)
		if !shared && cs.p == nil {
			continue // a clean session's plain subscription stays with mochi
		}
		br.s.mochi.Topics.Unsubscribe(sub.Filter, cs.cl.ID)
		cs.pclient(br).subscribe(sub.Filter, min(sub.Qos, 2))
	}
}

// claim opens a core session with the client's id, waiting a little for
// the previous connection of the same client to let go of it: its
// teardown (OnDisconnect) may still be running when the client is back.
func (br *bridge) claim(o core.SessionOptions) (*core.Session, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		s, err := br.b.NewSession(o)
		if !errors.Is(err, core.ErrClientIDInUse) || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

package mqtt

import (
	"errors"
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/junctionmq/junction/core/guard"
)

// quotaFilter replaces a filter refused for the subscription limit in
// the packet mochi processes: an empty filter is invalid to mochi
// [MQTT-4.7.3-1], so it subscribes nothing and answers a failure code,
// which limitHook then turns into quota exceeded.
const quotaFilter = ""

// limitHook tells each connection's packetLimit whether its client
// speaks MQTT 5, and enforces Config.MaxSubscriptions. mochi has no hook
// that refuses one filter of a SUBSCRIBE with a code of the hook's
// choosing (its ACL check is an OR across hooks, and answers
// not-authorized), so OnSubscribe blanks each filter over the limit and
// OnSubscribed, which mochi v2.7.9 calls with the very reason codes it
// then writes in SUBACK, sets quota exceeded (0x97) on them for MQTT 5;
// MQTT 3.1.1 clients get 0x80, the only failure code 3.1.1 has.
// Registered after the bridge, so the bridge sees the failure first and
// serves nothing for those filters.
type limitHook struct {
	mochi.HookBase
	srv *Server
	max int // subscriptions per client; 0 or negative: no limit

	mu      sync.Mutex
	refused map[*mochi.Client][]int // filter indexes blanked by OnSubscribe, until OnSubscribed
}

func newLimitHook(srv *Server, max int) *limitHook {
	return &limitHook{srv: srv, max: max, refused: make(map[*mochi.Client][]int)}
}

// ID implements mochi.Hook.
func (h *limitHook) ID() string { return "junction-limits" }

// Provides implements mochi.Hook.
func (h *limitHook) Provides(b byte) bool {
	switch b {
	case mochi.OnConnect, mochi.OnSessionEstablished, mochi.OnSubscribe, mochi.OnSubscribed, mochi.OnDisconnect:
		return true
	}
	return false
}

// OnConnect runs in the client's read goroutine, after mochi has parsed
// CONNECT, before it reads another packet.
func (h *limitHook) OnConnect(cl *mochi.Client, _ packets.Packet) error {
	if cc := corkOf(cl); cc != nil && cc.limit != nil {
		cc.limit.v5 = cl.Properties.ProtocolVersion == 5
	}
	return nil
}

// OnDisconnect forgets the client, should a SUBSCRIBE have been cut
// short between OnSubscribe and OnSubscribed.
func (h *limitHook) OnDisconnect(cl *mochi.Client, _ error, _ bool) {
	h.mu.Lock()
	delete(h.refused, cl)
	h.mu.Unlock()
}

// OnSessionEstablished marks the connection as mochi's client (it is in
// mochi's client list by now), which Server.Close leaves to mochi.
func (h *limitHook) OnSessionEstablished(cl *mochi.Client, _ packets.Packet) {
	if cc := corkOf(cl); cc != nil {
		// Authenticated: the CONNECT's bytes go back to the
		// pre-authentication budget. This runs in the goroutine of
		// ServeConn, the account's.
		if cc.preauth != nil {
			cc.preauth.Close()
		}
		h.srv.mu.Lock()
		if _, ok := h.srv.conns[cc]; ok {
			h.srv.conns[cc] = true
		}
		h.srv.mu.Unlock()
	}
}

// OnSubscribe blanks the filters that would take the client past its
// subscription limit. A filter it already has replaces a subscription
// and does not count.
func (h *limitHook) OnSubscribe(cl *mochi.Client, pk packets.Packet) packets.Packet {
	if h.max <= 0 {
		return pk
	}
	n := cl.State.Subscriptions.Len()
	var refused []int
	var filters packets.Subscriptions
	for i, sub := range pk.Filters {
		if _, ok := cl.State.Subscriptions.Get(sub.Filter); ok {
			continue
		}
		if n < h.max {
			n++
			continue
		}
		if filters == nil {
			// A copy: the packet's slice is mochi's.
			filters = append(packets.Subscriptions(nil), pk.Filters...)
		}
		filters[i].Filter = quotaFilter
		refused = append(refused, i)
	}
	if refused == nil {
		return pk
	}
	pk.Filters = filters
	h.mu.Lock()
	h.refused[cl] = refused
	h.mu.Unlock()
	return pk
}

// OnSubscribed sets quota exceeded on the filters OnSubscribe refused.
func (h *limitHook) OnSubscribed(cl *mochi.Client, pk packets.Packet, codes []byte) {
	h.mu.Lock()
	refused, ok := h.refused[cl]
	delete(h.refused, cl)
	h.mu.Unlock()
	if !ok || cl.Properties.ProtocolVersion < 5 {
		return
	}
	for _, i := range refused {
		if i < len(codes) && codes[i] >= packets.ErrUnspecifiedError.Code {
			codes[i] = packets.ErrQuotaExceeded.Code
		}
	}
}

// packetLimit refuses, on the read side, a packet larger than the
// broker's maximum packet size (advertised in CONNACK; a client must
// not exceed it [MQTT-3.2.2-15]) the way MQTT 5 §4.13 asks: DISCONNECT
// with reason 0x95 (packet too large), then close. mochi checks
// the size too, but closes without a word; so the connection follows the
// packet framing (a first byte, a remaining length of one to four bytes,
// then that many bytes) of what it hands mochi, and stops before the
// header of a packet over the limit: mochi never sees it, and its read
// fails with packets.ErrPacketTooLarge, which ends the client as mochi's
// own check would. An MQTT 3.1.1 client, and any client whose CONNECT is
// too large (its version is not known yet), is just closed: 3.1.1 has no
// server DISCONNECT. It also tells the connection's frame clock where
// each packet begins and ends. Only mochi's read goroutine uses it.
type packetLimit struct {
	max   int // largest packet: the remaining length plus one, as mochi counts
	v5    bool
	clock *guard.Clock // nil: no frame clock to tell

	skip   int // bytes of the current packet's body still to come
	hdr    int // bytes of the current fixed header seen; 0 between packets
	length int // the remaining length decoded so far
	mult   int
	done   bool // refused: every read fails
	said   bool // refuse has run
	off    bool // the framing was malformed: mochi ends the client
}

// disconnectTooLarge is an MQTT 5 DISCONNECT, reason 0x95, no properties.
var disconnectTooLarge = []byte{0xe0, 0x02, packets.ErrPacketTooLarge.Code, 0x00}

// disconnectTimeout is an MQTT 5 DISCONNECT, reason 0x8D (keep alive
// timeout), for a packet that took longer than the frame clock allows:
// MQTT 5 has no closer reason for a packet that stopped arriving.
var disconnectTimeout = []byte{0xe0, 0x02, packets.ErrKeepAliveTimeout.Code, 0x00}

// Read reads for mochi: see packetLimit.
func (c *corkConn) Read(p []byte) (int, error) {
	l := c.limit
	if l == nil || l.off {
		n, err := c.readBuffered(p)
		return n, c.checkTimeout(err)
	}
	if l.done {
		return 0, l.refuse(c)
	}
	n, err := c.readBuffered(p)
	if cut, over := l.scan(p[:n]); over {
		l.done = true
		if cut == 0 {
			return 0, l.refuse(c)
		}
		return cut, nil // the packets before it; the next read fails
	}
	return n, c.checkTimeout(err)
}

// checkTimeout passes err on; when it is the frame clock's, it first
// counts the close and says DISCONNECT 0x8D to an MQTT 5 client, once.
// mochi's read loop ends on the error and closes the connection.
func (c *corkConn) checkTimeout(err error) error {
	if !errors.Is(err, guard.ErrFrameTimeout) || c.timeoutSaid {
		return err
	}
	c.timeoutSaid = true
	if c.timedOut != nil {
		c.timedOut()
	}
	if c.limit != nil && c.limit.v5 {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write(disconnectTimeout)
	}
	return err
}

// refuse says DISCONNECT 0x95 to an MQTT 5 client, once, and returns the
// error that ends mochi's read loop. It runs when mochi reads past the
// packets before the large one, so a CONNECT among them has been seen
// (limitHook.OnConnect) and the version is known.
func (l *packetLimit) refuse(c *corkConn) error {
	if l.v5 && !l.said {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write(disconnectTooLarge)
	}
	l.said = true
	return packets.ErrPacketTooLarge
}

// scan follows the framing through b, the next bytes of the stream. Over
// the limit, it returns true and how many bytes of b come before the
// packet's first byte (0 when its header began in an earlier read).
func (l *packetLimit) scan(b []byte) (int, bool) {
	start := 0
	for i := 0; i < len(b); {
		if l.skip > 0 {
			n := min(l.skip, len(b)-i)
			l.skip -= n
			i += n
			if l.skip == 0 {
				l.end()
			}
			continue
		}
		if l.hdr == 0 { // a packet's first byte
			start = i
			l.hdr, l.length, l.mult = 1, 0, 1
			if l.clock != nil {
				l.clock.Start()
			}
			i++
			continue
		}
		c := b[i]
		i++
		l.length += int(c&0x7f) * l.mult
		l.mult *= 128
		l.hdr++
		if c&0x80 != 0 {
			if l.hdr == 5 {
				// A fifth length byte: malformed, which mochi refuses.
				l.off = true
				return 0, false
			}
			continue
		}
		l.hdr = 0
		if l.length+1 > l.max {
			return start, true
		}
		l.skip = l.length
		if l.skip == 0 {
			l.end()
		}
	}
	return 0, false
}

// end tells the frame clock a packet is complete.
func (l *packetLimit) end() {
	if l.clock != nil {
		l.clock.End()
	}
}

package mqtt

import (
	"errors"
	"sync"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/junctionmq/junction/core"
)

// acker sends the PUBACKs of a connection's pipelined QoS 1 publishes:
// each is routed into core at once and acknowledged when core confirms it
// (after the journal's sync when it reaches a durable queue), in the
// order the publishes arrived [MQTT-4.6.0-2], by a goroutine of its own,
// so that a slow client never holds up the journal's completions.
type acker struct {
	cl  *mochi.Client
	br  *bridge
	max int // pending publishes before the connection's reads wait

	mu     sync.Mutex
	cond   *sync.Cond
	slots  []*ackSlot // guarded by mu, in arrival order
	closed bool       // guarded by mu

	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

type ackSlot struct {
	id    uint16
	ready bool
	err   error
}

func newAcker(br *bridge, cl *mochi.Client, max int) *acker {
	a := &acker{cl: cl, br: br, max: max, wake: make(chan struct{}, 1), done: make(chan struct{})}
	a.cond = sync.NewCond(&a.mu)
	a.wg.Add(1)
	go a.loop()
	return a
}

// reserve takes the next slot for packet id, waiting while max publishes
// are pending (back-pressure on a client that pipelines too far). It
// returns nil once the acker is closed.
func (a *acker) reserve(id uint16) *ackSlot {
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.slots) >= a.max && !a.closed {
		a.cond.Wait()
	}
	if a.closed {
		return nil
	}
	s := &ackSlot{id: id}
	a.slots = append(a.slots, s)
	return s
}

// complete records the outcome of a slot's publish; called from core's
// or the journal's goroutine, so it only marks and wakes.
func (a *acker) complete(s *ackSlot, err error) {
	a.mu.Lock()
	s.ready, s.err = true, err
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *acker) loop() {
	defer a.wg.Done()
	for {
		select {
		case <-a.done:
			return
		case <-a.wake:
		}
		a.mu.Lock()
		n := 0
		for n < len(a.slots) && a.slots[n].ready {
			n++
		}
		ready := append([]*ackSlot(nil), a.slots[:n]...)
		a.slots = a.slots[n:]
		a.cond.Broadcast()
		a.mu.Unlock()
		if !a.send(ready) {
			return
		}
	}
}

// send writes the PUBACKs of ready slots, in one write; false once the
// connection is being closed.
func (a *acker) send(ready []*ackSlot) bool {
	cc := corkOf(a.cl)
	if len(ready) < 2 {
		cc = nil // nothing to gather
	}
	if cc != nil {
		cc.cork()
	}
	for _, s := range ready {
		if s.err == nil {
			a.cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: s.id})
			continue
		}
		reason := packets.ErrUnspecifiedError
		if errors.Is(s.err, core.ErrUnauthorized) {
			reason = packets.ErrNotAuthorized // core has logged it
		} else if refusedFull(s.err) {
			reason = packets.ErrQuotaExceeded // core has counted and logged it
		} else {
			a.br.log.Warn().Err(s.err).Str("client", a.cl.ID).Msg("mqtt publish not accepted")
		}
		if a.cl.Properties.ProtocolVersion == 5 {
			a.cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: s.id,
				ReasonCode: reason.Code})
			continue
		}
		// MQTT 3 has no negative acknowledgement: close the connection
		// rather than confirm what was not stored (after the PUBACKs
		// before it).
		if cc != nil {
			cc.uncork()
		}
		a.br.s.mochi.DisconnectClient(a.cl, packets.ErrUnspecifiedError)
		return false
	}
	if cc != nil {
		cc.uncork()
	}
	return true
}

// close stops the acker; pending publishes get no PUBACK (the client
// resends them on its next connection).
func (a *acker) close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	a.cond.Broadcast()
	a.mu.Unlock()
	close(a.done)
	a.wg.Wait()
}

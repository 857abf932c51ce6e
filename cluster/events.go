package cluster

import (
	"strconv"

	"github.com/junctionmq/junction/core"
)

// Broker events in a cluster (core/events.go). Each node's access
// broker publishes its own events and those of the group brokers this
// node runs: a group broker hands its events to the access broker
// (core.Config.EventsTo, core.Broker.ForwardEvent) rather than
// publishing them itself, whether or not the notification address is
// in its group, so that one path, one bounded buffer and one count of
// dropped events serve the node. The access broker sends each event as
// a client's non-durable multicast send to the notification address's
// group, stamped with this node's id (core.PropEventNode); that group's
// broker creates the notification address when it becomes active, as a
// single broker does at start. A group broker's events about the
// sessions and consumers the access brokers open on it are dropped: the
// access brokers' own events tell of them once, as the client sees them.

// NodeName implements core.EventCluster: events say this node's id.
func (a *access) NodeName() string { return strconv.FormatUint(a.n.cfg.NodeID, 10) }

// groupEvents makes a group broker's configuration hand its events to
// the node's access broker.
func (n *Node) groupEvents(cfg *core.Config) {
	if !cfg.Events.Enabled {
		return
	}
	cfg.EventsTo = n.groupEvent
}

// groupEvent takes an event of one of this node's group brokers: the
// access broker publishes it (without waiting; before the access broker
// exists, the event is lost).
func (n *Node) groupEvent(e core.Event) {
	if b := n.fence.broker.Load(); b != nil {
		b.ForwardEvent(e)
	}
}

// groupEventsStarted creates the notification address on the broker of
// its group, once the broker is active.
func (n *Node) groupEventsStarted(g *group, b *core.Broker) {
	ev := n.cfg.Broker.Events
	if !ev.Enabled {
		return
	}
	addr := ev.Address
	if addr == "" {
		addr = core.DefaultNotificationAddress
	}
	if n.groupOf(addr) != g.id {
		return
	}
	if err := b.CreateAddress(addr, core.Multicast); err != nil {
		n.log.Warn().Err(err).Uint64("group", g.id).Str("address", addr).Msg("notification address not created")
	}
}

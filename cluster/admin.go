package cluster

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/junctionmq/junction/core"
)

// Administration (core.ClusterAdmin): the console, the API and the admin
// CLI of any node see the whole cluster. A question goes to the leader
// of every group (or of the group holding a name) as kAdmin, its
// arguments and answer in JSON, a browsed page's messages in
// core.EncodeMessage's format.

const (
	adminQueueStats uint8 = iota + 1
	adminAddresses
	adminAddressStats
	adminCreateQueue
	adminCreateAddress
	adminDeleteQueue
	adminDeleteAddress
	adminPurge
	adminMove
	adminBrowse
	adminBlocked // Broker.Blocked (full.go)
)

type adminArgs struct {
	Name    string           `json:"name,omitempty"`
	To      string           `json:"to,omitempty"`
	Routing core.RoutingType `json:"routing,omitempty"`
	N       int              `json:"n,omitempty"`
	M       int              `json:"m,omitempty"`
}

var _ core.ClusterAdmin = (*access)(nil)

// admin asks group g's leader one administrative question.
func (a *access) admin(g uint64, op uint8, args adminArgs) ([]byte, error) {
	leader, err := a.n.waitLeader(context.Background(), g)
	if err != nil {
		return nil, err
	}
	arg, _ := json.Marshal(args)
	_, p, err := a.request(context.Background(), nil, leader, &rpcMsg{kind: kAdmin, group: g, n: uint64(op), str: string(arg)})
	return p, err
}

// adminAll asks every group; a group that cannot answer is an error.
func (a *access) adminAll(op uint8, args adminArgs) ([][]byte, error) {
	var out [][]byte
	for g := uint64(1); g <= uint64(a.n.cfg.Groups); g++ {
		p, err := a.admin(g, op, args)
		if err != nil {
			return nil, fmt.Errorf("group %d: %w", g, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// groupsOfName lists the groups that hold a part of queue or address
// name: its own group, or every group when groupsFor says so.
func (a *access) groupsOfName(name string) []uint64 {
	return a.n.groupsFor(core.ConsumerOptions{Queue: name})
}

func (a *access) QueueStats() []core.QueueStats {
	ps, err := a.adminAll(adminQueueStats, adminArgs{})
	if err != nil {
		a.n.log.Warn().Err(err).Msg("queue statistics incomplete")
	}
	byName := map[string]*core.QueueStats{}
	for _, p := range ps {
		var sts []core.QueueStats
		if json.Unmarshal(p, &sts) != nil {
			continue
		}
		for _, st := range sts {
			if x := byName[st.Name]; x != nil {
				mergeQueueStats(x, st)
			} else {
				byName[st.Name] = &st
			}
		}
	}
	out := make([]core.QueueStats, 0, len(byName))
	for _, st := range byName {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(x, y core.QueueStats) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// mergeQueueStats adds another group's part of a queue to x.
func mergeQueueStats(x *core.QueueStats, y core.QueueStats) {
	x.Depth += y.Depth
	x.InFlight += y.InFlight
	x.Scheduled += y.Scheduled
	x.Consumers += y.Consumers
	x.Enqueued += y.Enqueued
	x.Dequeued += y.Dequeued
	x.Expired += y.Expired
	x.DeadLettered += y.DeadLettered
	x.Bytes += y.Bytes
	x.Paged += y.Paged
	x.Dropped += y.Dropped
	x.SlowKilled += y.SlowKilled
	if !y.OldestMessage.IsZero() && (x.OldestMessage.IsZero() || y.OldestMessage.Before(x.OldestMessage)) {
		x.OldestMessage = y.OldestMessage
	}
}

func (a *access) Addresses() []core.AddressInfo {
	ps, _ := a.adminAll(adminAddresses, adminArgs{})
	byName := map[string]*core.AddressInfo{}
	for _, p := range ps {
		var as []core.AddressInfo
		if json.Unmarshal(p, &as) != nil {
			continue
		}
		for _, x := range as {
			if y := byName[x.Name]; y != nil {
				y.Anycast = y.Anycast || x.Anycast
				y.Multicast = y.Multicast || x.Multicast
				y.Temporary = y.Temporary || x.Temporary
				for _, q := range x.Queues {
					if !slices.Contains(y.Queues, q) {
						y.Queues = append(y.Queues, q)
					}
				}
			} else {
				byName[x.Name] = &x
			}
		}
	}
	out := make([]core.AddressInfo, 0, len(byName))
	for _, x := range byName {
		slices.Sort(x.Queues)
		out = append(out, *x)
	}
	slices.SortFunc(out, func(x, y core.AddressInfo) int { return strings.Compare(x.Name, y.Name) })
	return out
}

func (a *access) AddressStats() []core.AddressStats {
	ps, _ := a.adminAll(adminAddressStats, adminArgs{})
	byName := map[string]*core.AddressStats{}
	for _, p := range ps {
		var as []core.AddressStats
		if json.Unmarshal(p, &as) != nil {
			continue
		}
		for _, x := range as {
			if y := byName[x.Name]; y != nil {
				y.Anycast = y.Anycast || x.Anycast
				y.Multicast = y.Multicast || x.Multicast
				y.Queues += x.Queues
				y.Routed += x.Routed
				y.Unrouted += x.Unrouted
			} else {
				byName[x.Name] = &x
			}
		}
	}
	out := make([]core.AddressStats, 0, len(byName))
	for _, x := range byName {
		out = append(out, *x)
	}
	slices.SortFunc(out, func(x, y core.AddressStats) int { return strings.Compare(x.Name, y.Name) })
	return out
}

func (a *access) CreateQueue(name string, rt core.RoutingType) error {
	_, err := a.admin(a.n.groupOf(name), adminCreateQueue, adminArgs{Name: name, Routing: rt})
	return err
}

func (a *access) CreateAddress(name string, rt core.RoutingType) error {
	_, err := a.admin(a.n.groupOf(name), adminCreateAddress, adminArgs{Name: name, Routing: rt})
	return err
}

// onParts applies op to every group holding a part of name; it succeeds
// if one did, and fails with the first error but "not found" otherwise.
func (a *access) onParts(name string, op uint8, args adminArgs) ([][]byte, error) {
	var out [][]byte
	var firstErr error
	for _, g := range a.groupsOfName(name) {
		p, err := a.admin(g, op, args)
		switch {
		case err == nil:
			out = append(out, p)
		case errors.Is(err, core.ErrQueueNotFound), errors.Is(err, core.ErrAddressNotFound):
			if firstErr == nil {
				firstErr = err
			}
		default:
			return out, err
		}
	}
	if len(out) == 0 {
		return nil, firstErr
	}
	return out, nil
}

func (a *access) DeleteQueue(name string) error {
	_, err := a.onParts(name, adminDeleteQueue, adminArgs{Name: name})
	return err
}

func (a *access) DeleteAddress(name string) error {
	_, err := a.onParts(name, adminDeleteAddress, adminArgs{Name: name})
	return err
}

func (a *access) PurgeQueue(name string) (int, error) {
	ps, err := a.onParts(name, adminPurge, adminArgs{Name: name})
	n := 0
	for _, p := range ps {
		var k int
		json.Unmarshal(p, &k)
		n += k
	}
	return n, err
}

// MoveMessages moves messages within a group: from's part in every group
// it has one, to to when to lives in that group.
func (a *access) MoveMessages(from, to string, max int) (int, error) {
	gto := a.n.groupOf(to)
	groups := a.groupsOfName(from)
	if !slices.Contains(groups, gto) {
		return 0, fmt.Errorf("%w: %q and %q are in different groups of the cluster; move messages by consuming and sending them", core.ErrInvalidAddress, from, to)
	}
	p, err := a.admin(gto, adminMove, adminArgs{Name: from, To: to, N: max})
	var n int
	json.Unmarshal(p, &n)
	return n, err
}

// Browse pages through the parts of a queue in group order.
func (a *access) Browse(name string, offset, limit int) ([]core.BrowsedMessage, int, error) {
	if limit <= 0 {
		limit = 100
	}
	var page []core.BrowsedMessage
	total := 0
	var lastErr error
	found := false
	for _, g := range a.groupsOfName(name) {
		lo := max(offset-total, 0)
		n := 0
		if len(page) < limit {
			n = limit - len(page)
		}
		p, err := a.admin(g, adminBrowse, adminArgs{Name: name, N: lo, M: max(n, 1)})
		if err != nil {
			lastErr = err
			continue
		}
		found = true
		ms, count, err := decodeBrowse(p)
		if err != nil {
			return nil, 0, err
		}
		if n > 0 && offset < total+count {
			page = append(page, ms[:min(len(ms), n)]...)
		}
		total += count
	}
	if !found {
		return nil, 0, lastErr
	}
	return page, total, nil
}

// serveAdmin answers kAdmin on a group this node leads.
func (sv *server) serveAdmin(group uint64, op uint8, arg string) ([]byte, error) {
	b, err := sv.broker(group)
	if err != nil {
		return nil, err
	}
	var args adminArgs
	if err := json.Unmarshal([]byte(arg), &args); err != nil {
		return nil, fmt.Errorf("%w: admin arguments", errBadFrame)
	}
	switch op {
	case adminQueueStats:
		return json.Marshal(b.QueueStats())
	case adminAddresses:
		return json.Marshal(b.Addresses())
	case adminAddressStats:
		return json.Marshal(b.AddressStats())
	case adminCreateQueue:
		return nil, b.CreateQueue(args.Name, args.Routing)
	case adminCreateAddress:
		return nil, b.CreateAddress(args.Name, args.Routing)
	case adminDeleteQueue:
		return nil, b.DeleteQueue(args.Name)
	case adminDeleteAddress:
		return nil, b.DeleteAddress(args.Name)
	case adminPurge:
		n, err := b.PurgeQueue(args.Name)
		p, _ := json.Marshal(n)
		return p, err
	case adminMove:
		n, err := b.MoveMessages(args.Name, args.To, args.N)
		p, _ := json.Marshal(n)
		return p, err
	case adminBlocked:
		return json.Marshal(b.Blocked(args.Name))
	case adminBrowse:
		ms, total, err := b.Browse(args.Name, args.N, args.M)
		if err != nil {
			return nil, err
		}
		return encodeBrowse(ms, total), nil
	}
	return nil, fmt.Errorf("%w: admin operation %d", errBadFrame, op)
}

func encodeBrowse(ms []core.BrowsedMessage, total int) []byte {
	b := binary.AppendUvarint(nil, uint64(total))
	b = binary.AppendUvarint(b, uint64(len(ms)))
	for _, m := range ms {
		b = binary.AppendUvarint(b, uint64(m.DeliveryCount))
		var flags byte
		if m.InFlight {
			flags |= 1
		}
		if m.Scheduled {
			flags |= 2
		}
		b = append(b, flags)
		b = appendBytes(b, core.EncodeMessage(m.Message))
	}
	return b
}

func decodeBrowse(p []byte) ([]core.BrowsedMessage, int, error) {
	d := reader{b: p}
	total := int(d.uvarint())
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		return nil, 0, errBadFrame
	}
	out := make([]core.BrowsedMessage, 0, n)
	for range n {
		bm := core.BrowsedMessage{DeliveryCount: uint32(d.uvarint())}
		flags := d.byte()
		bm.InFlight, bm.Scheduled = flags&1 != 0, flags&2 != 0
		m, err := core.DecodeMessage(d.bytes())
		if err != nil || d.err != nil {
			return nil, 0, errBadFrame
		}
		bm.Message = m
		out = append(out, bm)
	}
	return out, total, nil
}

// Memory implements core.ClusterMemory: the messages held by the brokers
// of the groups this node leads, against the node's budget (which they
// share: Config.Broker).
func (a *access) Memory() core.MemoryStats {
	st := core.MemoryStats{Max: a.n.cfg.Broker.MaxMemory}
	for _, g := range a.n.groups {
		if b, _ := g.activeBroker(); b != nil {
			st.Used += b.Memory().Used
		}
	}
	return st
}

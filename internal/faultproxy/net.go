package faultproxy

import (
	"errors"
	"fmt"
	"slices"
)

// Net is a proxy for every ordered pair of nodes: node a reaches node b
// at Addr(a, b), which forwards to b's real address (SetTarget). Cuts
// use Drop (a blackhole); Proxy gives each link's own controls.
type Net struct {
	ids     []uint64
	proxies map[link]*Proxy
}

type link struct{ from, to uint64 }

// NewNet starts the proxies for nodes ids. Until SetTarget(id, ...)
// connections towards id are reset.
func NewNet(ids ...uint64) (*Net, error) {
	n := &Net{ids: slices.Clone(ids), proxies: make(map[link]*Proxy)}
	for _, a := range ids {
		for _, b := range ids {
			if a == b {
				continue
			}
			if _, dup := n.proxies[link{a, b}]; dup {
				n.Close()
				return nil, fmt.Errorf("faultproxy: node %d listed twice", a)
			}
			p, err := New("")
			if err != nil {
				n.Close()
				return nil, err
			}
			n.proxies[link{a, b}] = p
		}
	}
	return n, nil
}

// SetTarget sets node id's real address, where every proxy towards id
// forwards.
func (n *Net) SetTarget(id uint64, addr string) {
	for l, p := range n.proxies {
		if l.to == id {
			p.SetTarget(addr)
		}
	}
}

// Proxy returns the proxy node from uses to reach node to, or nil.
func (n *Net) Proxy(from, to uint64) *Proxy { return n.proxies[link{from, to}] }

// Addr returns the address node from must dial to reach node to.
func (n *Net) Addr(from, to uint64) string { return n.proxies[link{from, to}].Addr() }

// Peers returns, for node from, every other node's address as from must
// dial it: a ready peer table.
func (n *Net) Peers(from uint64) map[uint64]string {
	m := make(map[uint64]string, len(n.ids)-1)
	for _, to := range n.ids {
		if to != from {
			m[to] = n.Addr(from, to)
		}
	}
	return m
}

// Partition cuts, both ways, every link between nodes of different
// groups and lets the links within a group pass; a node in no group is
// cut from all. It replaces whatever cuts were in place.
func (n *Net) Partition(groups ...[]uint64) {
	group := make(map[uint64]int)
	for i, g := range groups {
		for _, id := range g {
			group[id] = i + 1
		}
	}
	for l, p := range n.proxies {
		ga, gb := group[l.from], group[l.to]
		if ga != 0 && ga == gb {
			p.Pass()
		} else {
			p.Drop()
		}
	}
}

// Isolate cuts node id from every other node, both ways; the others
// still reach each other.
func (n *Net) Isolate(id uint64) {
	var rest []uint64
	for _, x := range n.ids {
		if x != id {
			rest = append(rest, x)
		}
	}
	n.Partition([]uint64{id}, rest)
}

// OneWay cuts the link from node from to node to, in that direction
// only, leaving the other links as they are.
func (n *Net) OneWay(from, to uint64) { n.proxies[link{from, to}].Drop() }

// Heal lets every link pass.
func (n *Net) Heal() {
	for _, p := range n.proxies {
		p.Pass()
	}
}

// Close closes every proxy; see Proxy.Close.
func (n *Net) Close() error {
	var errs []error
	for _, p := range n.proxies {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

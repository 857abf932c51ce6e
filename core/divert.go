package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/junctionmq/junction/core/selector"
	"github.com/junctionmq/junction/core/wildcard"
)

// Composite destinations, diverts and virtual topics: ways one send
// reaches several addresses. Each copy is routed, journaled and
// confirmed like any send; the producer's confirmation waits for all of
// them.
//
//   - A composite address (ActiveMQ's composite destinations) lists
//     destinations separated by commas, each with its routing type:
//     "queue://a,topic://b" (see CompositeAddress, which front-ends use to
//     write one). A send to it is a send to each part.
//   - A divert (Artemis's) copies, or with Exclusive moves, what reaches
//     an address (or a wildcard pattern) to other addresses, optionally
//     only the messages its selector matches. A diverted copy is not
//     diverted again.
//   - With Config.VirtualTopics, a send to VirtualTopic.X is also copied
//     to every anycast queue named Consumer.NAME.VirtualTopic.X
//     (ActiveMQ's virtual topics): each consumer group has its queue.
//
// A send that reaches several addresses is not atomic: when one part
// fails (a FAIL queue full, an address that cannot be auto-created) the
// producer gets the error while the parts already routed stay; a resend
// may duplicate them (at least once). A transaction makes it all or
// nothing.

// ErrDivertExists and ErrDivertNotFound answer CreateDivert and
// DeleteDivert; ErrInvalidDivert is a divert that does not validate
// (Divert.Validate, CreateDivert), whatever field is wrong.
var (
	ErrDivertExists   = errors.New("core: divert exists")
	ErrDivertNotFound = errors.New("core: divert not found")
	ErrInvalidDivert  = errors.New("core: invalid divert")
)

// divertError is what Validate reports: its text names the divert and
// the field (`divert "a": filter: ...`), and it is ErrInvalidDivert and
// its cause (a selector's syntax error, ErrInvalidAddress for a
// forwarding address) for errors.Is and errors.As.
type divertError struct {
	msg   string
	cause error
}

func (e *divertError) Error() string { return e.msg }

func (e *divertError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrInvalidDivert}
	}
	return []error{ErrInvalidDivert, e.cause}
}

// invalidDivert is a divertError about divert name: "divert %q: " and
// the message; cause may be nil.
func invalidDivert(name string, cause error, format string, a ...any) error {
	return &divertError{fmt.Sprintf("divert %q: ", name) + fmt.Sprintf(format, a...), cause}
}

// errDivertsInCluster refuses the API's diverts on a cluster node. A
// cluster applies diverts where a send enters it, on the node's access
// broker, from the node's configuration file (which every node must
// share, as it shares address settings). One made through the API would
// be in force on that node only, and lost with its process: an access
// broker keeps no journal.
var errDivertsInCluster = fmt.Errorf("%w: a cluster node takes its diverts from its configuration file, the same on every node; "+
	"one made through the API would apply on this node only", ErrNotInCluster)

// errVirtualTopicsInCluster refuses to change the virtual-topic setting
// of a cluster node's access broker: it reports its groups' (a consumer
// queue lives in its topic's group, whose broker copies to it; see
// VirtualTopicOf), which take it when the node starts.
var errVirtualTopicsInCluster = fmt.Errorf("%w: a cluster node's groups take the virtual-topic setting when it starts", ErrNotInCluster)

// Divert copies or moves what reaches an address to other addresses.
type Divert struct {
	// Name identifies the divert.
	Name string `yaml:"name" json:"name"`
	// Address is the address (or wildcard pattern) whose messages are
	// diverted.
	Address string `yaml:"address" json:"address"`
	// ForwardingAddress is where the copies go: one address or several,
	// comma-separated, each optionally prefixed queue:// or topic://.
	ForwardingAddress string `yaml:"forwarding-address" json:"forwardingAddress"`
	// Exclusive moves the messages: they no longer reach Address's own
	// queues. Otherwise they reach both.
	Exclusive bool `yaml:"exclusive" json:"exclusive"`
	// Filter is a selector: only the messages it matches are diverted.
	Filter string `yaml:"filter" json:"filter,omitempty"`
	// RoutingType of the copies, for forwarding addresses without a
	// prefix: PASS (the message's; the default), ANYCAST, MULTICAST or
	// STRIP (the forwarding address's default).
	RoutingType string `yaml:"routing-type" json:"routingType,omitempty"`
	// fromConfig marks a divert of the configuration file, which a
	// reload replaces (the API's are kept).
	fromConfig bool
	// recID is the bindings-journal record of a divert made through the
	// API (persistDivert); 0 when it has none.
	recID uint64
}

// Validate checks a divert. Its errors are ErrInvalidDivert, with a
// text that names the divert and the field at fault.
func (d *Divert) Validate() error {
	if d.Name == "" {
		return &divertError{"divert: name is required", nil}
	}
	if d.Address == "" {
		return invalidDivert(d.Name, nil, "address is required")
	}
	if err := wildcard.Validate(d.Address); err != nil {
		return invalidDivert(d.Name, err, "address %q has an empty word", d.Address)
	}
	if strings.TrimSpace(d.ForwardingAddress) == "" {
		return invalidDivert(d.Name, nil, "forwarding-address is required")
	}
	if _, err := d.compile(); err != nil {
		return err
	}
	return nil
}

// compiled is a divert ready to apply.
type compiled struct {
	d       Divert
	pattern bool
	sel     *selector.Selector
	to      []destination
	rt      string // upper case; "" = PASS
}

// destination is one part of a composite address or of a divert's
// forwarding address.
type destination struct {
	addr string
	rt   RoutingType
}

func (d *Divert) compile() (*compiled, error) {
	c := &compiled{d: *d, pattern: wildcard.IsPattern(d.Address), rt: strings.ToUpper(strings.TrimSpace(d.RoutingType))}
	switch c.rt {
	case "", "PASS":
		c.rt = ""
	case "ANYCAST", "MULTICAST", "STRIP":
	default:
		return nil, invalidDivert(d.Name, nil, "routing-type must be PASS, ANYCAST, MULTICAST or STRIP; got %q", d.RoutingType)
	}
	sel, err := parseSelector(d.Filter)
	if err != nil {
		return nil, invalidDivert(d.Name, err, "filter: %s", strings.TrimPrefix(err.Error(), ErrInvalidSelector.Error()+": "))
	}
	c.sel = sel
	for _, part := range strings.Split(d.ForwardingAddress, ",") {
		addr, rt := ParseDestination(strings.TrimSpace(part))
		if err := validAddress(addr); err != nil {
			// validAddress says "core: invalid address: <why>": the
			// divert's text says the why.
			return nil, invalidDivert(d.Name, err, "forwarding-address: %s", strings.TrimPrefix(err.Error(), ErrInvalidAddress.Error()+": "))
		}
		if addr == d.Address && !c.pattern {
			return nil, invalidDivert(d.Name, nil, "forwards to its own address %q", addr)
		}
		c.to = append(c.to, destination{addr, rt})
	}
	return c, nil
}

// divertTable is the broker's diverts and virtual-topic setting,
// replaced whole on every change (read without a lock on each send).
type divertTable struct {
	list []*compiled
	vt   bool

	// vtQueues caches, per virtual topic address, the queues of its
	// consumer groups, as of routeGen gen.
	mu       sync.Mutex
	gen      uint64
	vtQueues map[string][]string
}

// VirtualTopicPrefix and VirtualTopicConsumerPrefix are ActiveMQ's
// names: a send to VirtualTopic.X is copied to each queue
// Consumer.NAME.VirtualTopic.X.
const (
	VirtualTopicPrefix         = "VirtualTopic."
	VirtualTopicConsumerPrefix = "Consumer."
)

// VirtualTopicOf returns the virtual topic whose consumer queue queue
// is (VirtualTopic.X for Consumer.NAME.VirtualTopic.X), if it is one.
// A NAME holding ".VirtualTopic." is cut at its first: the topic is the
// longest the name allows. A cluster places a consumer queue in its
// topic's group, whose broker copies the topic's messages to it.
func VirtualTopicOf(queue string) (string, bool) {
	rest, ok := strings.CutPrefix(queue, VirtualTopicConsumerPrefix)
	if !ok || len(rest) < 2 {
		return "", false
	}
	i := strings.Index(rest[1:], "."+VirtualTopicPrefix)
	if i < 0 {
		return "", false
	}
	topic := rest[1+i+1:]
	if len(topic) <= len(VirtualTopicPrefix) {
		return "", false
	}
	return topic, true
}

// setDivertsLocked installs the diverts (checked) and the virtual-topic
// setting (b.divMu held).
func (b *Broker) setDivertsLocked(list []Divert, vt bool) error {
	t := &divertTable{vt: vt}
	seen := make(map[string]bool, len(list))
	for i := range list {
		if seen[list[i].Name] {
			return fmt.Errorf("%w: %q", ErrDivertExists, list[i].Name)
		}
		seen[list[i].Name] = true
		c, err := list[i].compile()
		if err != nil {
			return err
		}
		t.list = append(t.list, c)
	}
	if len(t.list) == 0 && !vt {
		b.diverts.Store(nil)
		return nil
	}
	b.diverts.Store(t)
	return nil
}

// Diverts returns the diverts in force.
func (b *Broker) Diverts() []Divert {
	t := b.diverts.Load()
	if t == nil {
		return []Divert{}
	}
	out := make([]Divert, 0, len(t.list))
	for _, c := range t.list {
		d := c.d
		d.fromConfig, d.recID = false, 0
		out = append(out, d)
	}
	return out
}

// VirtualTopics reports whether ActiveMQ's virtual topics are on: on
// a cluster's access broker, whether its groups apply them (it applies
// none itself).
func (b *Broker) VirtualTopics() bool {
	if b.cluster != nil {
		return b.groupsVT
	}
	t := b.diverts.Load()
	return t != nil && t.vt
}

// CreateDivert adds a divert. With a bindings journal it is written
// there first (synced), so it is in force again after a restart, as the
// configuration file's are; without one it lasts until the broker stops.
func (b *Broker) CreateDivert(d Divert) error {
	if b.cluster != nil {
		return errDivertsInCluster
	}
	if err := d.Validate(); err != nil {
		return fmt.Errorf("core: invalid %w", err) // core: invalid divert "a": filter: ...
	}
	d.fromConfig, d.recID = false, 0
	b.divMu.Lock()
	defer b.divMu.Unlock()
	cur := b.divertsLocked()
	if slices.ContainsFunc(cur, func(x Divert) bool { return x.Name == d.Name }) {
		return fmt.Errorf("%w: %q", ErrDivertExists, d.Name)
	}
	if err := b.persistDivert(&d); err != nil {
		return err
	}
	if err := b.setDivertsLocked(append(cur, d), b.VirtualTopics()); err != nil {
		b.forgetDiverts([]Divert{d})
		return err
	}
	return nil
}

// DeleteDivert removes a divert (and its record, for one made through
// the API). A divert of the configuration file comes back with the next
// reload or restart unless the file no longer names it.
func (b *Broker) DeleteDivert(name string) error {
	if b.cluster != nil {
		return errDivertsInCluster
	}
	b.divMu.Lock()
	defer b.divMu.Unlock()
	cur := b.divertsLocked()
	i := slices.IndexFunc(cur, func(x Divert) bool { return x.Name == name })
	if i < 0 {
		return fmt.Errorf("%w: %q", ErrDivertNotFound, name)
	}
	if err := b.unpersistDivert(cur[i]); err != nil {
		return err
	}
	return b.setDivertsLocked(slices.Delete(cur, i, i+1), b.VirtualTopics())
}

// ReloadDiverts replaces the configuration's diverts and the
// virtual-topic setting, keeping those created through the API (a name
// of the configuration's replaces an API divert of that name, and its
// record).
func (b *Broker) ReloadDiverts(list []Divert, vt bool) error {
	if b.cluster != nil {
		if vt != b.groupsVT {
			return errVirtualTopicsInCluster
		}
		vt = false // the groups' brokers apply them
	}
	for i := range list {
		if err := list[i].Validate(); err != nil {
			return err
		}
		list[i].fromConfig, list[i].recID = true, 0
	}
	b.divMu.Lock()
	defer b.divMu.Unlock()
	cur := b.divertsLocked()
	next := slices.Clone(list)
	var replaced []Divert
	for _, d := range cur {
		switch {
		case d.fromConfig:
		case slices.ContainsFunc(list, func(x Divert) bool { return x.Name == d.Name }):
			replaced = append(replaced, d)
		default:
			next = append(next, d)
		}
	}
	if err := b.setDivertsLocked(next, vt); err != nil {
		return err
	}
	b.forgetDiverts(replaced)
	return nil
}

// installDiverts puts in force, at start, the API's diverts recovered
// from the bindings journal, then the configuration's.
func (b *Broker) installDiverts(list []Divert, vt bool) error {
	b.divMu.Lock()
	api := b.apiDiverts
	b.apiDiverts = nil
	err := b.setDivertsLocked(api, false)
	b.divMu.Unlock()
	if err != nil {
		return fmt.Errorf("core: recovering diverts: %w", err)
	}
	return b.ReloadDiverts(list, vt)
}

// forgetDiverts deletes the records of API diverts no longer in force;
// a failure is logged (the journal has failed, and says so to every
// producer).
func (b *Broker) forgetDiverts(list []Divert) {
	for _, d := range list {
		if err := b.unpersistDivert(d); err != nil {
			b.log.Error().Err(err).Str("divert", d.Name).Msg("deleting a divert's record failed: it may come back after a restart")
		}
	}
}

// divertsLocked returns the diverts with their origin (b.divMu held).
func (b *Broker) divertsLocked() []Divert {
	t := b.diverts.Load()
	if t == nil {
		return nil
	}
	out := make([]Divert, 0, len(t.list))
	for _, c := range t.list {
		out = append(out, c.d)
	}
	return out
}

// divert returns the copies m makes (prepared by the caller), and
// whether an exclusive divert took m away from its own address.
func (t *divertTable) divert(b *Broker, m *Message) (copies []*Message, exclusive bool) {
	for _, c := range t.list {
		if c.pattern {
			if !subscriptionMatch(c.d.Address, m.Address) {
				continue
			}
		} else if c.d.Address != m.Address {
			continue
		}
		if c.sel != nil && !c.sel.Matches(func(name string) (any, bool) { return selectorValue(m, 0, name) }) {
			continue
		}
		for _, to := range c.to {
			rt := to.rt
			if rt == RoutingDefault {
				switch c.rt {
				case "":
					rt = m.RoutingType
				case "ANYCAST":
					rt = Anycast
				case "MULTICAST":
					rt = Multicast
				}
			}
			copies = append(copies, divertCopy(m, to.addr, rt))
		}
		exclusive = exclusive || c.d.Exclusive
	}
	if t.vt && strings.HasPrefix(m.Address, VirtualTopicPrefix) {
		for _, q := range t.consumerQueues(b, m.Address) {
			copies = append(copies, divertCopy(m, q, Anycast))
		}
	}
	return copies, exclusive
}

// consumerQueues returns the names of the queues
// Consumer.*.VirtualTopic.X of address VirtualTopic.X.
func (t *divertTable) consumerQueues(b *Broker, address string) []string {
	gen := b.routeGen.Load()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.vtQueues == nil || t.gen != gen {
		t.vtQueues, t.gen = make(map[string][]string), gen
	}
	if qs, ok := t.vtQueues[address]; ok {
		return qs
	}
	var qs []string
	suffix := "." + address
	b.mu.RLock()
	for name, q := range b.queues {
		if q.routing != Anycast || !strings.HasPrefix(name, VirtualTopicConsumerPrefix) || !strings.HasSuffix(name, suffix) ||
			len(name) <= len(VirtualTopicConsumerPrefix)+len(suffix) {
			continue
		}
		qs = append(qs, name)
	}
	b.mu.RUnlock()
	slices.Sort(qs)
	if len(t.vtQueues) > 1000 {
		clear(t.vtQueues)
	}
	t.vtQueues[address] = qs
	return qs
}

// divertCopy is m sent to addr: the body and the rest shared, its
// properties copied with the original address added (Artemis's
// _AMQ_ORIG_ADDRESS).
func divertCopy(m *Message, addr string, rt RoutingType) *Message {
	c := m.shallowCopy()
	c.ID = 0
	c.Address, c.RoutingType = addr, rt
	c.origin = m.origin
	c.Properties = make(map[string]any, len(m.Properties)+1)
	for k, v := range m.Properties {
		c.Properties[k] = v
	}
	c.Properties[PropOriginalAddress] = m.Address
	return c
}

// routeDiverted routes m (unless an exclusive divert took it) and its
// copies, and confirms once all are confirmed. m goes first, as its
// producer asked (a BLOCK queue may make it wait: nothing else is
// routed then); the copies are the broker's own sends.
func (b *Broker) routeDiverted(m *Message, copies []*Message, exclusive bool, now time.Time, o sendOpts) (bool, error) {
	f := &fan{done: o.done}
	if !exclusive {
		mo := o
		mo.diverted, mo.done = true, f.part()
		p, err := b.routeWith(m, now, mo)
		if err != nil {
			f.abort()
			return false, err
		}
		if !p {
			f.skip(mo.done)
		}
	} else {
		// The message itself is taken by the divert; its address counts
		// it as routed.
		b.mu.RLock()
		a := b.addresses[m.Address]
		b.mu.RUnlock()
		if a != nil {
			a.routed.Add(1)
		}
	}
	for _, c := range copies {
		if err := b.prepare(c, m.UserID, now); err != nil {
			f.abort()
			return false, err
		}
		c.origin = m.origin
		done := f.part()
		p, err := b.routeWith(c, now, sendOpts{done: done, diverted: true})
		if err != nil {
			f.abort()
			return false, fmt.Errorf("diverting to %q: %w", c.Address, err)
		}
		if !p {
			f.skip(done)
		}
	}
	return f.seal(), nil
}

// fan joins the confirmations of the parts of one send.
type fan struct {
	done func(error)

	mu     sync.Mutex
	left   int
	err    error
	sealed bool
	over   bool
}

// part returns the callback of one more part (nil when nobody waits).
func (f *fan) part() func(error) {
	if f.done == nil {
		return nil
	}
	f.mu.Lock()
	f.left++
	f.mu.Unlock()
	return f.finish
}

func (f *fan) finish(err error) {
	f.mu.Lock()
	f.left--
	if err != nil && f.err == nil {
		f.err = err
	}
	fire := f.sealed && !f.over && f.left == 0
	if fire {
		f.over = true
	}
	e := f.err
	f.mu.Unlock()
	if fire {
		f.done(e)
	}
}

// skip forgets a part whose callback will not be called.
func (f *fan) skip(done func(error)) {
	if done == nil {
		return
	}
	f.mu.Lock()
	f.left--
	f.mu.Unlock()
}

// abort: the send failed; the parts' callbacks confirm nothing.
func (f *fan) abort() {
	f.mu.Lock()
	f.over = true
	f.mu.Unlock()
}

// seal ends the parts. It returns true when done is or will be called
// by the fan, false when nothing was pending and the caller confirms.
func (f *fan) seal() bool {
	if f.done == nil {
		return false
	}
	f.mu.Lock()
	f.sealed = true
	if f.left > 0 {
		f.mu.Unlock()
		return true
	}
	f.over = true
	err := f.err
	f.mu.Unlock()
	if err != nil {
		f.done(err)
		return true
	}
	return false
}

// CompositeAddress writes a comma-separated list of destinations as the
// composite address core sends to each of: every part keeps its
// queue:// or topic:// prefix, a bare part takes the routing type of the
// part before it, the first one rt (anycast when RoutingDefault), as
// ActiveMQ's composite destinations do. A list of one is returned as it
// is.
func CompositeAddress(list string, rt RoutingType) string {
	if !strings.Contains(list, ",") {
		return list
	}
	if rt == RoutingDefault {
		rt = Anycast
	}
	parts := strings.Split(list, ",")
	for i, p := range parts {
		addr, prt := ParseDestination(strings.TrimSpace(p))
		if prt == RoutingDefault {
			prt = rt
		}
		rt = prt
		parts[i] = FormatDestination(addr, prt)
	}
	return strings.Join(parts, ",")
}

// parseComposite splits a composite address: at least two parts, each
// with its queue:// or topic:// prefix. Anything else is an ordinary
// address (an MQTT topic may hold a comma).
func parseComposite(addr string) ([]destination, bool) {
	if !strings.Contains(addr, ",") || !strings.Contains(addr, "://") {
		return nil, false
	}
	parts := strings.Split(addr, ",")
	out := make([]destination, 0, len(parts))
	for _, p := range parts {
		a, rt := ParseDestination(p)
		if rt == RoutingDefault {
			return nil, false
		}
		out = append(out, destination{a, rt})
	}
	return out, true
}

// IsComposite reports whether addr is a composite address (one a
// consumer cannot read).
func IsComposite(addr string) bool {
	_, ok := parseComposite(addr)
	return ok
}

// sendComposite sends a copy of m to each part (each checked,
// authorized and confirmed like a send of its own); done gets the
// confirmation once every part is confirmed.
func (s *Session) sendComposite(ctx context.Context, m *Message, parts []destination, done func(error)) error {
	f := &fan{done: done}
	for _, p := range parts {
		c := m.shallowCopy()
		c.ID = 0
		c.Address, c.RoutingType = p.addr, p.rt
		if err := s.send(ctx, c, f.part()); err != nil {
			f.abort()
			return fmt.Errorf("composite destination %q: %w", p.addr, err)
		}
	}
	if !f.seal() && done != nil {
		done(nil)
	}
	return nil
}

// expandTx returns what a transaction's send of m becomes: one message
// per part of a composite address, each followed by its diverted copies
// (and without itself when an exclusive divert takes it). The copies
// are journaled and routed with the transaction.
func (t *Tx) expand(m *Message) []*Message {
	var ms []*Message
	if parts, ok := parseComposite(m.Address); ok {
		for _, p := range parts {
			c := m.shallowCopy()
			c.ID = 0
			c.Address, c.RoutingType = p.addr, p.rt
			ms = append(ms, c)
		}
	} else {
		ms = []*Message{m}
	}
	dt := t.s.b.diverts.Load()
	if dt == nil {
		return ms
	}
	out := make([]*Message, 0, len(ms))
	for _, x := range ms {
		copies, exclusive := dt.divert(t.s.b, x)
		if !exclusive {
			out = append(out, x)
		}
		out = append(out, copies...)
	}
	return out
}

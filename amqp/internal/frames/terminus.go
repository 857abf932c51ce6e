package frames

import (
	"fmt"
	"slices"

	"github.com/junctionmq/junction/amqp/internal/encoding"
)

// Terminus durability (the Durable field of Source and Target).
const (
	DurableNone          uint32 = 0
	DurableConfiguration uint32 = 1
	DurableUnsettled     uint32 = 2
)

// Terminus expiry policies.
const (
	ExpiryLinkDetach      encoding.Symbol = "link-detach"
	ExpirySessionEnd      encoding.Symbol = "session-end" // the default
	ExpiryConnectionClose encoding.Symbol = "connection-close"
	ExpiryNever           encoding.Symbol = "never"
)

// Distribution modes of a source.
const (
	DistributionMove encoding.Symbol = "move"
	DistributionCopy encoding.Symbol = "copy"
)

// Source is the source terminus of a link (0x28).
type Source struct {
	Address               *string         // nil when null
	Durable               uint32          // DurableNone, DurableConfiguration or DurableUnsettled
	ExpiryPolicy          encoding.Symbol // decoded as ExpirySessionEnd when null or empty
	Timeout               uint32          // seconds
	Dynamic               bool
	DynamicNodeProperties encoding.Map
	DistributionMode      encoding.Symbol
	// Filter is the filter-set: symbol keys, described filters (descriptor
	// uint64 or Symbol) as values; a null value decodes as a nil entry.
	Filter         map[encoding.Symbol]*encoding.Described
	DefaultOutcome DeliveryState
	Outcomes       []encoding.Symbol
	Capabilities   []encoding.Symbol
}

// expiry writes an expiry policy, as null when it is the default.
func (e *fieldWriter) expiry(p encoding.Symbol) {
	if p == ExpirySessionEnd {
		p = ""
	}
	e.sym(p)
}

func (s *Source) encode(w *encoding.Writer) {
	f := beginComposite(w, codeSource)
	f.strp(s.Address)
	f.uint(s.Durable, DurableNone)
	f.expiry(s.ExpiryPolicy)
	f.uint(s.Timeout, 0)
	f.bool(s.Dynamic)
	f.mapf(s.DynamicNodeProperties)
	f.sym(s.DistributionMode)
	if len(s.Filter) > 0 {
		appendFilter(w, s.Filter)
		f.next()
	} else {
		f.null()
	}
	f.state(s.DefaultOutcome)
	f.syms(s.Outcomes)
	f.syms(s.Capabilities)
	f.end()
}

// appendFilter writes a filter-set, keys sorted.
func appendFilter(w *encoding.Writer, fs map[encoding.Symbol]*encoding.Described) {
	keys := make([]encoding.Symbol, 0, len(fs))
	for k := range fs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	m := w.BeginMap()
	for _, k := range keys {
		w.Symbol(k)
		_ = w.Value(fs[k]) // a nil filter is written as null
	}
	w.EndMap(m, 2*len(keys))
}

func readSource(r *encoding.Reader) (*Source, error) {
	f, err := readComposite(r, codeSource, "source")
	if err != nil {
		return nil, err
	}
	s := new(Source)
	f.strp(&s.Address, nil)
	f.uint(&s.Durable)
	f.sym(&s.ExpiryPolicy)
	if s.ExpiryPolicy == "" {
		s.ExpiryPolicy = ExpirySessionEnd
	}
	f.uint(&s.Timeout)
	f.bool(&s.Dynamic)
	f.mapf(&s.DynamicNodeProperties)
	f.sym(&s.DistributionMode)
	if f.next() {
		m, err := f.r.ReadMap()
		f.fail(err)
		s.Filter, err = filterSet(m)
		f.fail(err)
	}
	f.state(&s.DefaultOutcome)
	f.syms(&s.Outcomes)
	f.syms(&s.Capabilities)
	return s, f.err
}

// filterSet converts a decoded filter-set map.
func filterSet(m encoding.Map) (map[encoding.Symbol]*encoding.Described, error) {
	if len(m) == 0 {
		return nil, nil
	}
	fs := make(map[encoding.Symbol]*encoding.Described, len(m))
	for _, e := range m {
		var k encoding.Symbol
		switch key := e.Key.(type) {
		case encoding.Symbol:
			k = key
		case string: // lenient: some clients send string keys
			k = encoding.Symbol(key)
		default:
			return nil, fmt.Errorf("%w: filter-set key of type %T", ErrInvalidField, e.Key)
		}
		switch v := e.Value.(type) {
		case nil:
			fs[k] = nil
		case *encoding.Described:
			fs[k] = v
		default:
			return nil, fmt.Errorf("%w: filter %q is a %T, not a described value", ErrInvalidField, k, e.Value)
		}
	}
	return fs, nil
}

// Target is the target terminus of a link (0x29).
type Target struct {
	Address               *string // nil when null
	Durable               uint32
	ExpiryPolicy          encoding.Symbol // decoded as ExpirySessionEnd when null or empty
	Timeout               uint32          // seconds
	Dynamic               bool
	DynamicNodeProperties encoding.Map
	Capabilities          []encoding.Symbol
}

func (t *Target) encode(w *encoding.Writer) {
	f := beginComposite(w, codeTarget)
	f.strp(t.Address)
	f.uint(t.Durable, DurableNone)
	f.expiry(t.ExpiryPolicy)
	f.uint(t.Timeout, 0)
	f.bool(t.Dynamic)
	f.mapf(t.DynamicNodeProperties)
	f.syms(t.Capabilities)
	f.end()
}

// Coordinator is the target of a link to a transaction coordinator (0x30).
type Coordinator struct {
	Capabilities []encoding.Symbol // txn-capabilities
}

func (c *Coordinator) encode(w *encoding.Writer) {
	f := beginComposite(w, codeCoordinator)
	f.syms(c.Capabilities)
	f.end()
}

// readTarget reads an attach's target field: a target or a coordinator.
func readTarget(r *encoding.Reader) (*Target, *Coordinator, error) {
	code, err := readDescriptor(r)
	if err != nil {
		return nil, nil, fmt.Errorf("target: %w", err)
	}
	switch code {
	case codeTarget:
		f, err := readFields(r, "target")
		if err != nil {
			return nil, nil, err
		}
		t := new(Target)
		f.strp(&t.Address, nil)
		f.uint(&t.Durable)
		f.sym(&t.ExpiryPolicy)
		if t.ExpiryPolicy == "" {
			t.ExpiryPolicy = ExpirySessionEnd
		}
		f.uint(&t.Timeout)
		f.bool(&t.Dynamic)
		f.mapf(&t.DynamicNodeProperties)
		f.syms(&t.Capabilities)
		return t, nil, f.err
	case codeCoordinator:
		f, err := readFields(r, "coordinator")
		if err != nil {
			return nil, nil, err
		}
		c := new(Coordinator)
		f.syms(&c.Capabilities)
		return nil, c, f.err
	}
	return nil, nil, fmt.Errorf("%w: descriptor %#x where a target was expected", ErrInvalidField, code)
}

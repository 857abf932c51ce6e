package frames

import (
	"fmt"

	"github.com/junctionmq/junction/amqp/internal/encoding"
)

// DeliveryState is the state of a delivery: *Received, or an outcome
// (*Accepted, *Rejected, *Released, *Modified), or, on transactional links,
// *Declared or *TransactionalState.
type DeliveryState interface {
	deliveryState()
}

func (*Received) deliveryState()           {}
func (*Accepted) deliveryState()           {}
func (*Rejected) deliveryState()           {}
func (*Released) deliveryState()           {}
func (*Modified) deliveryState()           {}
func (*Declared) deliveryState()           {}
func (*TransactionalState) deliveryState() {}

// Received is the received delivery state (0x23): how much of a delivery
// has arrived, for resuming it.
type Received struct {
	SectionNumber uint32 // mandatory
	SectionOffset uint64 // mandatory
}

// Accepted is the accepted outcome (0x24).
type Accepted struct{}

// Rejected is the rejected outcome (0x25).
type Rejected struct {
	Error *Error
}

// Released is the released outcome (0x26).
type Released struct{}

// Modified is the modified outcome (0x27).
type Modified struct {
	DeliveryFailed     bool
	UndeliverableHere  bool
	MessageAnnotations encoding.Map
}

// Declared is the outcome of a successful declare (0x33).
type Declared struct {
	TxnID []byte // mandatory
}

// TransactionalState is the state of a delivery enlisted in a transaction
// (0x34).
type TransactionalState struct {
	TxnID   []byte        // mandatory
	Outcome DeliveryState // the provisional outcome, if any
}

// appendState writes a delivery state, and reports false (writing nothing)
// for a nil one.
func appendState(w *encoding.Writer, s DeliveryState) bool {
	switch s := s.(type) {
	case *Received:
		if s == nil {
			return false
		}
		f := beginComposite(w, codeReceived)
		f.uintReq(s.SectionNumber)
		w.Ulong(s.SectionOffset)
		f.next()
		f.end()
	case *Accepted:
		if s == nil {
			return false
		}
		f := beginComposite(w, codeAccepted)
		f.end()
	case *Rejected:
		if s == nil {
			return false
		}
		f := beginComposite(w, codeRejected)
		f.error(s.Error)
		f.end()
	case *Released:
		if s == nil {
			return false
		}
		f := beginComposite(w, codeReleased)
		f.end()
	case *Modified:
		if s == nil {
			return false
		}
		f := beginComposite(w, codeModified)
		f.bool(s.DeliveryFailed)
		f.bool(s.UndeliverableHere)
		f.mapf(s.MessageAnnotations)
		f.end()
	case *Declared:
		if s == nil {
			return false
		}
		f := beginComposite(w, codeDeclared)
		f.binReq(s.TxnID)
		f.end()
	case *TransactionalState:
		if s == nil {
			return false
		}
		f := beginComposite(w, codeTransactionalState)
		f.binReq(s.TxnID)
		f.state(s.Outcome)
		f.end()
	default:
		return false
	}
	return true
}

// readState reads a delivery state (the caller has ruled out null).
func readState(r *encoding.Reader) (DeliveryState, error) {
	code, err := readDescriptor(r)
	if err != nil {
		return nil, fmt.Errorf("delivery state: %w", err)
	}
	switch code {
	case codeReceived:
		f, err := readFields(r, "received")
		if err != nil {
			return nil, err
		}
		s := new(Received)
		f.need("section-number")
		f.uint(&s.SectionNumber)
		f.need("section-offset")
		f.ulong(&s.SectionOffset)
		return s, f.err
	case codeAccepted:
		_, err := readFields(r, "accepted")
		return &Accepted{}, err
	case codeRejected:
		f, err := readFields(r, "rejected")
		if err != nil {
			return nil, err
		}
		s := new(Rejected)
		f.error(&s.Error)
		return s, f.err
	case codeReleased:
		_, err := readFields(r, "released")
		return &Released{}, err
	case codeModified:
		f, err := readFields(r, "modified")
		if err != nil {
			return nil, err
		}
		s := new(Modified)
		f.bool(&s.DeliveryFailed)
		f.bool(&s.UndeliverableHere)
		f.mapf(&s.MessageAnnotations)
		return s, f.err
	case codeDeclared:
		f, err := readFields(r, "declared")
		if err != nil {
			return nil, err
		}
		s := new(Declared)
		f.need("txn-id")
		f.bin(&s.TxnID)
		return s, f.err
	case codeTransactionalState:
		f, err := readFields(r, "transactional-state")
		if err != nil {
			return nil, err
		}
		s := new(TransactionalState)
		f.need("txn-id")
		f.bin(&s.TxnID)
		f.state(&s.Outcome)
		return s, f.err
	}
	return nil, fmt.Errorf("%w: descriptor %#x where a delivery state was expected", ErrInvalidField, code)
}

// Declare is the transaction control message that starts a transaction
// (0x31), sent as the amqp-value body of a message to a coordinator.
type Declare struct {
	GlobalID any // global transaction id; unused by AMQP 1.0 brokers, usually nil
}

// Discharge is the transaction control message that ends a transaction
// (0x32): committing it, or rolling it back when Fail is set.
type Discharge struct {
	TxnID []byte // mandatory
	Fail  bool
}

// Described returns d as the described value that a message body carries.
func (d *Declare) Described() *encoding.Described {
	fields := []any{}
	if d.GlobalID != nil {
		fields = []any{d.GlobalID}
	}
	return &encoding.Described{Descriptor: codeDeclare, Value: fields}
}

// Described returns d as the described value that a message body carries.
func (d *Discharge) Described() *encoding.Described {
	fields := []any{d.TxnID}
	if d.Fail {
		fields = append(fields, true)
	}
	return &encoding.Described{Descriptor: codeDischarge, Value: fields}
}

// DecodeTxControl decodes a transaction control message from the decoded
// amqp-value body of a message sent to a coordinator (an
// *encoding.Described or encoding.Described). It returns a *Declare or a
// *Discharge.
func DecodeTxControl(body any) (any, error) {
	var d *encoding.Described
	switch v := body.(type) {
	case *encoding.Described:
		d = v
	case encoding.Described:
		d = &v
	}
	if d == nil {
		return nil, fmt.Errorf("%w: transaction control body of type %T", ErrUnexpectedBody, body)
	}
	code, ok := descriptorCode(d.Descriptor)
	if !ok || code != codeDeclare && code != codeDischarge {
		return nil, fmt.Errorf("%w: transaction control descriptor %v", ErrUnexpectedBody, d.Descriptor)
	}
	var fields []any
	switch v := d.Value.(type) {
	case nil:
	case []any:
		fields = v
	default:
		return nil, fmt.Errorf("%w: transaction control value of type %T", ErrUnexpectedBody, d.Value)
	}
	field := func(i int) any {
		if i < len(fields) {
			return fields[i]
		}
		return nil
	}
	if code == codeDeclare {
		return &Declare{GlobalID: field(0)}, nil
	}
	x := new(Discharge)
	id, ok := field(0).([]byte)
	if !ok {
		if field(0) == nil {
			return nil, fmt.Errorf("%w: discharge txn-id", ErrMissingField)
		}
		return nil, fmt.Errorf("%w: discharge txn-id of type %T", ErrInvalidField, field(0))
	}
	x.TxnID = id
	switch fail := field(1).(type) {
	case nil:
	case bool:
		x.Fail = fail
	default:
		return nil, fmt.Errorf("%w: discharge fail of type %T", ErrInvalidField, fail)
	}
	return x, nil
}

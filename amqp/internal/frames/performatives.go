package frames

import (
	"fmt"
	"math"
	"time"

	"github.com/junctionmq/junction/amqp/internal/encoding"
)

// Role is the role of a link endpoint.
type Role bool

// Link roles.
const (
	RoleSender   Role = false
	RoleReceiver Role = true
)

// String returns "sender" or "receiver".
func (r Role) String() string {
	if r == RoleReceiver {
		return "receiver"
	}
	return "sender"
}

// SndSettleMode is the settlement policy of a sender.
type SndSettleMode uint8

// Sender settle modes.
const (
	SndUnsettled SndSettleMode = 0 // deliveries are sent unsettled
	SndSettled   SndSettleMode = 1 // deliveries are sent settled
	SndMixed     SndSettleMode = 2 // either (the default)
)

// RcvSettleMode is the settlement policy of a receiver.
type RcvSettleMode uint8

// Receiver settle modes.
const (
	RcvFirst  RcvSettleMode = 0 // settle on receipt (the default)
	RcvSecond RcvSettleMode = 1 // settle after the sender settles
)

// Open is the open performative (0x10), which negotiates connection
// parameters.
type Open struct {
	ContainerID  string // mandatory
	Hostname     string
	MaxFrameSize uint32        // decoded as 4294967295 when null
	ChannelMax   uint16        // decoded as 65535 when null
	IdleTimeout  time.Duration // milliseconds on the wire; 0 means none

	OutgoingLocales     []encoding.Symbol
	IncomingLocales     []encoding.Symbol
	OfferedCapabilities []encoding.Symbol
	DesiredCapabilities []encoding.Symbol
	Properties          encoding.Map
}

func (o *Open) encode(w *encoding.Writer) {
	f := beginComposite(w, codeOpen)
	f.strReq(o.ContainerID)
	f.str(o.Hostname)
	f.uint(o.MaxFrameSize, math.MaxUint32)
	f.ushort(o.ChannelMax, math.MaxUint16)
	f.millis(o.IdleTimeout)
	f.syms(o.OutgoingLocales)
	f.syms(o.IncomingLocales)
	f.syms(o.OfferedCapabilities)
	f.syms(o.DesiredCapabilities)
	f.mapf(o.Properties)
	f.end()
}

func decodeOpen(r *encoding.Reader) (*Open, error) {
	f, err := readFields(r, "open")
	if err != nil {
		return nil, err
	}
	o := &Open{MaxFrameSize: math.MaxUint32, ChannelMax: math.MaxUint16}
	f.need("container-id")
	f.str(&o.ContainerID)
	f.str(&o.Hostname)
	f.uint(&o.MaxFrameSize)
	f.ushort(&o.ChannelMax)
	f.millis(&o.IdleTimeout)
	f.syms(&o.OutgoingLocales)
	f.syms(&o.IncomingLocales)
	f.syms(&o.OfferedCapabilities)
	f.syms(&o.DesiredCapabilities)
	f.mapf(&o.Properties)
	return o, f.err
}

// Begin is the begin performative (0x11), which starts a session.
type Begin struct {
	RemoteChannel  *uint16 // set when answering a peer's begin
	NextOutgoingID uint32  // mandatory
	IncomingWindow uint32  // mandatory
	OutgoingWindow uint32  // mandatory
	HandleMax      uint32  // decoded as 4294967295 when null

	OfferedCapabilities []encoding.Symbol
	DesiredCapabilities []encoding.Symbol
	Properties          encoding.Map
}

func (b *Begin) encode(w *encoding.Writer) {
	f := beginComposite(w, codeBegin)
	f.ushortp(b.RemoteChannel)
	f.uintReq(b.NextOutgoingID)
	f.uintReq(b.IncomingWindow)
	f.uintReq(b.OutgoingWindow)
	f.uint(b.HandleMax, math.MaxUint32)
	f.syms(b.OfferedCapabilities)
	f.syms(b.DesiredCapabilities)
	f.mapf(b.Properties)
	f.end()
}

func decodeBegin(r *encoding.Reader) (*Begin, error) {
	f, err := readFields(r, "begin")
	if err != nil {
		return nil, err
	}
	b := &Begin{HandleMax: math.MaxUint32}
	f.ushortp(&b.RemoteChannel)
	f.need("next-outgoing-id")
	f.uint(&b.NextOutgoingID)
	f.need("incoming-window")
	f.uint(&b.IncomingWindow)
	f.need("outgoing-window")
	f.uint(&b.OutgoingWindow)
	f.uint(&b.HandleMax)
	f.syms(&b.OfferedCapabilities)
	f.syms(&b.DesiredCapabilities)
	f.mapf(&b.Properties)
	return b, f.err
}

// Attach is the attach performative (0x12), which attaches a link.
type Attach struct {
	Name   string // mandatory
	Handle uint32 // mandatory
	Role   Role   // mandatory

	SndSettleMode SndSettleMode // decoded as SndMixed when null
	RcvSettleMode RcvSettleMode // decoded as RcvFirst when null

	Source      *Source      // nil when null
	Target      *Target      // nil when null or when the target is a coordinator
	Coordinator *Coordinator // set when the target is a coordinator (0x30)

	Unsettled            encoding.Map
	IncompleteUnsettled  bool
	InitialDeliveryCount *uint32
	MaxMessageSize       uint64 // 0 (or null) means no limit

	OfferedCapabilities []encoding.Symbol
	DesiredCapabilities []encoding.Symbol
	Properties          encoding.Map
}

func (a *Attach) encode(w *encoding.Writer) {
	f := beginComposite(w, codeAttach)
	f.strReq(a.Name)
	f.uintReq(a.Handle)
	f.boolReq(bool(a.Role))
	f.ubyte(uint8(a.SndSettleMode), uint8(SndMixed))
	f.ubyte(uint8(a.RcvSettleMode), uint8(RcvFirst))
	if a.Source != nil {
		a.Source.encode(w)
		f.next()
	} else {
		f.null()
	}
	switch {
	case a.Coordinator != nil:
		a.Coordinator.encode(w)
		f.next()
	case a.Target != nil:
		a.Target.encode(w)
		f.next()
	default:
		f.null()
	}
	f.mapf(a.Unsettled)
	f.bool(a.IncompleteUnsettled)
	f.uintp(a.InitialDeliveryCount)
	f.ulong(a.MaxMessageSize, 0)
	f.syms(a.OfferedCapabilities)
	f.syms(a.DesiredCapabilities)
	f.mapf(a.Properties)
	f.end()
}

func decodeAttach(r *encoding.Reader) (*Attach, error) {
	f, err := readFields(r, "attach")
	if err != nil {
		return nil, err
	}
	a := &Attach{SndSettleMode: SndMixed}
	f.need("name")
	f.str(&a.Name)
	f.need("handle")
	f.uint(&a.Handle)
	f.need("role")
	f.bool((*bool)(&a.Role))
	f.ubyte((*uint8)(&a.SndSettleMode))
	if a.SndSettleMode > SndMixed {
		f.fail(fmt.Errorf("%w: snd-settle-mode %d", ErrInvalidField, a.SndSettleMode))
	}
	f.ubyte((*uint8)(&a.RcvSettleMode))
	if a.RcvSettleMode > RcvSecond {
		f.fail(fmt.Errorf("%w: rcv-settle-mode %d", ErrInvalidField, a.RcvSettleMode))
	}
	if f.next() {
		a.Source, err = readSource(&f.r)
		f.fail(err)
	}
	if f.next() {
		a.Target, a.Coordinator, err = readTarget(&f.r)
		f.fail(err)
	}
	f.mapf(&a.Unsettled)
	f.bool(&a.IncompleteUnsettled)
	f.uintp(&a.InitialDeliveryCount, nil)
	f.ulong(&a.MaxMessageSize)
	f.syms(&a.OfferedCapabilities)
	f.syms(&a.DesiredCapabilities)
	f.mapf(&a.Properties)
	return a, f.err
}

// Flow is the flow performative (0x13), which updates session and link
// flow-control state.
type Flow struct {
	NextIncomingID *uint32
	IncomingWindow uint32 // mandatory
	NextOutgoingID uint32 // mandatory
	OutgoingWindow uint32 // mandatory
	Handle         *uint32
	DeliveryCount  *uint32
	LinkCredit     *uint32
	Available      *uint32
	Drain          bool
	Echo           bool
	Properties     encoding.Map
}

func (fl *Flow) encode(w *encoding.Writer) {
	f := beginComposite(w, codeFlow)
	f.uintp(fl.NextIncomingID)
	f.uintReq(fl.IncomingWindow)
	f.uintReq(fl.NextOutgoingID)
	f.uintReq(fl.OutgoingWindow)
	f.uintp(fl.Handle)
	f.uintp(fl.DeliveryCount)
	f.uintp(fl.LinkCredit)
	f.uintp(fl.Available)
	f.bool(fl.Drain)
	f.bool(fl.Echo)
	f.mapf(fl.Properties)
	f.end()
}

// flowAlloc holds a Flow and the values its pointers point at, so that
// decoding one takes a single allocation.
type flowAlloc struct {
	fl                                                 Flow
	nextIncomingID, handle, deliveryCount, credit, avl uint32
}

func decodeFlow(r *encoding.Reader) (*Flow, error) {
	f, err := readFields(r, "flow")
	if err != nil {
		return nil, err
	}
	a := new(flowAlloc)
	fl := &a.fl
	f.uintp(&fl.NextIncomingID, &a.nextIncomingID)
	f.need("incoming-window")
	f.uint(&fl.IncomingWindow)
	f.need("next-outgoing-id")
	f.uint(&fl.NextOutgoingID)
	f.need("outgoing-window")
	f.uint(&fl.OutgoingWindow)
	f.uintp(&fl.Handle, &a.handle)
	f.uintp(&fl.DeliveryCount, &a.deliveryCount)
	f.uintp(&fl.LinkCredit, &a.credit)
	f.uintp(&fl.Available, &a.avl)
	f.bool(&fl.Drain)
	f.bool(&fl.Echo)
	f.mapf(&fl.Properties)
	return fl, f.err
}

// Transfer is the transfer performative (0x14), which carries (a fragment
// of) a message. Continuation frames of a multi-frame delivery may leave
// every field but Handle unset.
type Transfer struct {
	Handle        uint32 // mandatory
	DeliveryID    *uint32
	DeliveryTag   []byte // aliases the frame body when decoded
	MessageFormat *uint32
	Settled       *bool // nil when absent
	More          bool
	RcvSettleMode *RcvSettleMode
	State         DeliveryState
	Resume        bool
	Aborted       bool
	Batchable     bool
}

func (t *Transfer) encode(w *encoding.Writer) {
	f := beginComposite(w, codeTransfer)
	f.uintReq(t.Handle)
	f.uintp(t.DeliveryID)
	f.bin(t.DeliveryTag)
	f.uintp(t.MessageFormat)
	f.boolp(t.Settled)
	f.bool(t.More)
	if t.RcvSettleMode != nil {
		w.Ubyte(uint8(*t.RcvSettleMode))
		f.next()
	} else {
		f.null()
	}
	f.state(t.State)
	f.bool(t.Resume)
	f.bool(t.Aborted)
	f.bool(t.Batchable)
	f.end()
}

// transferAlloc holds a Transfer and the values its pointers point at, so
// that decoding one takes a single allocation.
type transferAlloc struct {
	t             Transfer
	deliveryID    uint32
	messageFormat uint32
	settled       bool
	rcvSettleMode RcvSettleMode
}

func decodeTransfer(r *encoding.Reader) (*Transfer, error) {
	f, err := readFields(r, "transfer")
	if err != nil {
		return nil, err
	}
	a := new(transferAlloc)
	t := &a.t
	f.need("handle")
	f.uint(&t.Handle)
	f.uintp(&t.DeliveryID, &a.deliveryID)
	f.bin(&t.DeliveryTag)
	f.uintp(&t.MessageFormat, &a.messageFormat)
	f.boolp(&t.Settled, &a.settled)
	f.bool(&t.More)
	if f.next() {
		v, err := f.r.ReadUbyte()
		f.fail(err)
		if v > uint8(RcvSecond) {
			f.fail(fmt.Errorf("%w: rcv-settle-mode %d", ErrInvalidField, v))
		}
		a.rcvSettleMode = RcvSettleMode(v)
		t.RcvSettleMode = &a.rcvSettleMode
	}
	f.state(&t.State)
	f.bool(&t.Resume)
	f.bool(&t.Aborted)
	f.bool(&t.Batchable)
	return t, f.err
}

// Disposition is the disposition performative (0x15), which settles or
// updates the state of a range of deliveries.
type Disposition struct {
	Role      Role   // mandatory
	First     uint32 // mandatory
	Last      *uint32
	Settled   bool
	State     DeliveryState
	Batchable bool
}

func (d *Disposition) encode(w *encoding.Writer) {
	f := beginComposite(w, codeDisposition)
	f.boolReq(bool(d.Role))
	f.uintReq(d.First)
	f.uintp(d.Last)
	f.bool(d.Settled)
	f.state(d.State)
	f.bool(d.Batchable)
	f.end()
}

// dispositionAlloc holds a Disposition and its Last value.
type dispositionAlloc struct {
	d    Disposition
	last uint32
}

func decodeDisposition(r *encoding.Reader) (*Disposition, error) {
	f, err := readFields(r, "disposition")
	if err != nil {
		return nil, err
	}
	a := new(dispositionAlloc)
	d := &a.d
	f.need("role")
	f.bool((*bool)(&d.Role))
	f.need("first")
	f.uint(&d.First)
	f.uintp(&d.Last, &a.last)
	f.bool(&d.Settled)
	f.state(&d.State)
	f.bool(&d.Batchable)
	return d, f.err
}

// Detach is the detach performative (0x16), which detaches (and with
// Closed, closes) a link.
type Detach struct {
	Handle uint32 // mandatory
	Closed bool
	Error  *Error
}

func (d *Detach) encode(w *encoding.Writer) {
	f := beginComposite(w, codeDetach)
	f.uintReq(d.Handle)
	f.bool(d.Closed)
	f.error(d.Error)
	f.end()
}

func decodeDetach(r *encoding.Reader) (*Detach, error) {
	f, err := readFields(r, "detach")
	if err != nil {
		return nil, err
	}
	d := new(Detach)
	f.need("handle")
	f.uint(&d.Handle)
	f.bool(&d.Closed)
	f.error(&d.Error)
	return d, f.err
}

// End is the end performative (0x17), which ends a session.
type End struct {
	Error *Error
}

func (e *End) encode(w *encoding.Writer) {
	f := beginComposite(w, codeEnd)
	f.error(e.Error)
	f.end()
}

func decodeEnd(r *encoding.Reader) (*End, error) {
	f, err := readFields(r, "end")
	if err != nil {
		return nil, err
	}
	e := new(End)
	f.error(&e.Error)
	return e, f.err
}

// Close is the close performative (0x18), which closes a connection.
type Close struct {
	Error *Error
}

func (c *Close) encode(w *encoding.Writer) {
	f := beginComposite(w, codeClose)
	f.error(c.Error)
	f.end()
}

func decodeClose(r *encoding.Reader) (*Close, error) {
	f, err := readFields(r, "close")
	if err != nil {
		return nil, err
	}
	c := new(Close)
	f.error(&c.Error)
	return c, f.err
}

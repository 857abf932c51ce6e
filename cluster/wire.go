package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/junctionmq/junction/core"
)

// Forwarding protocol. An access broker's sessions reach a group through
// the node that leads it: requests go to the leader, replies and
// deliveries come back. When the leader is this node they are passed as
// values (local link); otherwise they travel as frames on the transport's
// RPC lane. One frame carries one message:
//
//	u8  kind
//	uv  link epoch (sender's, see links.go), uv link sequence
//	uv  group, uv group epoch (the serving broker's activation; 0 when
//	    the sender does not know it yet)
//	... kind's fields, uvarints and byte strings (uv length + bytes);
//	    messages in core.EncodeMessage's format
//
// Every request that expects an answer carries a request id (rid) that
// the answer repeats; rid 0 asks for none.
type msgKind uint8

const (
	kOpen         msgKind = iota + 1 // sid, user, client id, protocol, remote address
	kCloseSession                    // sid
	kSend                            // sid, rid, message
	kAttach                          // sid, cid, rid, consumer options
	kFlow                            // cid, n
	kDrain                           // cid
	kSettle                          // cid, tag, outcome
	kDetach                          // cid
	kCommit                          // sid, rid, sends, acks (cid, tag)
	kUnsubscribe                     // sid, rid, name
	kCreateTemp                      // sid, rid
	kRetain                          // rid, message
	kCatalog                         // rid, what, argument
	kResult                          // rid, error, string, payload
	kDeliver                         // cid, tag, count, redelivered, message
	kSessionLost                     // sid, reason
	kConsumerLost                    // cid, reason
	kPing                            // nothing: keeps an idle link's sequence checked
	kLinkReset                       // the receiver saw a gap: reset everything with the sender
	kMember                          // rid, change (n), node id (tag), address: a membership change for the group's leader
	kAdmin                           // rid, operation (n), JSON arguments (str): an administrative question (admin.go)
	kRecord                          // sid, rid, operation (n: recSet, recClear), key or prefix (str), value (payload): a client record (records.go)
	kMark                            // cid, rid, tag, mark (n): Consumer.Mark of an upstream delivery
)

// Client record operations (kRecord's n).
const (
	recSet   uint64 = 1
	recClear uint64 = 2
)

// Catalog questions (kCatalog's what).
const (
	catRoutingTypes uint8 = iota + 1
	catDurableSubs
	catDurableClientIDs
	catRetained
	catClientRecords
	catRecordHolders
)

// rpcMsg is one message of the protocol, decoded.
type rpcMsg struct {
	kind       msgKind
	linkEpoch  uint64
	linkSeq    uint64
	group      uint64
	groupEpoch uint64

	sid, cid, rid uint64
	n             uint64 // flow credit; catalog what; settle outcome
	tag           uint64
	count         uint32
	redelivered   bool
	mark          uint32 // kDeliver: the delivery's mark (0: none)
	str           string // name; error text; temp queue name; catalog argument
	errCode       uint8
	payload       []byte // catalog answers
	msg           *core.Message
	sends         []*core.Message
	acks          []ackRef
	records       []core.ClientRecord // kCommit: client records written with the transaction
	open          core.SessionOptions
	opts          core.ConsumerOptions
}

type ackRef struct{ cid, tag uint64 }

// encode appends the frame for m.
func (m *rpcMsg) encode(b []byte) []byte {
	b = append(b, byte(m.kind))
	for _, v := range []uint64{m.linkEpoch, m.linkSeq, m.group, m.groupEpoch} {
		b = binary.AppendUvarint(b, v)
	}
	switch m.kind {
	case kOpen:
		b = binary.AppendUvarint(b, m.sid)
		b = appendStr(b, m.open.User)
		b = appendStr(b, m.open.ClientID)
		b = appendStr(b, m.open.Protocol)
		b = appendStr(b, m.open.RemoteAddr)
	case kCloseSession:
		b = binary.AppendUvarint(b, m.sid)
	case kSend:
		b = binary.AppendUvarint(b, m.sid)
		b = binary.AppendUvarint(b, m.rid)
		b = appendBytes(b, core.EncodeMessage(m.msg))
	case kAttach:
		b = binary.AppendUvarint(b, m.sid)
		b = binary.AppendUvarint(b, m.cid)
		b = binary.AppendUvarint(b, m.rid)
		o := &m.opts
		b = appendStr(b, o.Address)
		b = append(b, byte(o.RoutingType))
		b = appendStr(b, o.SubscriptionName)
		b = appendStr(b, o.SharedSubscriptionName)
		b = appendStr(b, o.Queue)
		b = appendStr(b, o.Selector)
		var flags byte
		if o.Exclusive {
			flags |= 1
		}
		if o.NoLocal {
			flags |= 2
		}
		b = append(b, flags)
		b = binary.AppendUvarint(b, uint64(max(o.MaxBytes, 0)))
	case kFlow:
		b = binary.AppendUvarint(b, m.cid)
		b = binary.AppendUvarint(b, m.n)
	case kDrain, kDetach:
		b = binary.AppendUvarint(b, m.cid)
	case kSettle:
		b = binary.AppendUvarint(b, m.cid)
		b = binary.AppendUvarint(b, m.tag)
		b = binary.AppendUvarint(b, m.n)
	case kCommit:
		b = binary.AppendUvarint(b, m.sid)
		b = binary.AppendUvarint(b, m.rid)
		b = binary.AppendUvarint(b, uint64(len(m.sends)))
		for _, s := range m.sends {
			b = appendBytes(b, core.EncodeMessage(s))
		}
		b = binary.AppendUvarint(b, uint64(len(m.acks)))
		for _, a := range m.acks {
			b = binary.AppendUvarint(b, a.cid)
			b = binary.AppendUvarint(b, a.tag)
		}
		b = binary.AppendUvarint(b, uint64(len(m.records)))
		for _, r := range m.records {
			b = appendStr(b, r.Key)
			b = appendBytes(b, r.Value)
		}
	case kRecord:
		b = binary.AppendUvarint(b, m.sid)
		b = binary.AppendUvarint(b, m.rid)
		b = binary.AppendUvarint(b, m.n)
		b = appendStr(b, m.str)
		b = appendBytes(b, m.payload)
	case kMark:
		b = binary.AppendUvarint(b, m.cid)
		b = binary.AppendUvarint(b, m.rid)
		b = binary.AppendUvarint(b, m.tag)
		b = binary.AppendUvarint(b, m.n)
	case kUnsubscribe:
		b = binary.AppendUvarint(b, m.sid)
		b = binary.AppendUvarint(b, m.rid)
		b = appendStr(b, m.str)
	case kCreateTemp:
		b = binary.AppendUvarint(b, m.sid)
		b = binary.AppendUvarint(b, m.rid)
	case kRetain:
		b = binary.AppendUvarint(b, m.rid)
		b = appendBytes(b, core.EncodeMessage(m.msg))
	case kCatalog:
		b = binary.AppendUvarint(b, m.rid)
		b = binary.AppendUvarint(b, m.n)
		b = appendStr(b, m.str)
	case kResult:
		b = binary.AppendUvarint(b, m.rid)
		b = append(b, m.errCode)
		b = appendStr(b, m.str)
		b = appendBytes(b, m.payload)
	case kDeliver:
		b = binary.AppendUvarint(b, m.cid)
		b = binary.AppendUvarint(b, m.tag)
		b = binary.AppendUvarint(b, uint64(m.count))
		if m.redelivered {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.AppendUvarint(b, uint64(m.mark))
		b = appendBytes(b, core.EncodeMessage(m.msg))
	case kAdmin:
		b = binary.AppendUvarint(b, m.rid)
		b = binary.AppendUvarint(b, m.n)
		b = appendStr(b, m.str)
	case kMember:
		b = binary.AppendUvarint(b, m.rid)
		b = binary.AppendUvarint(b, m.n)
		b = binary.AppendUvarint(b, m.tag)
		b = appendStr(b, m.str)
	case kSessionLost:
		b = binary.AppendUvarint(b, m.sid)
		b = appendStr(b, m.str)
	case kConsumerLost:
		b = binary.AppendUvarint(b, m.cid)
		b = appendStr(b, m.str)
	case kPing, kLinkReset:
	}
	return b
}

var errBadFrame = errors.New("cluster: malformed forwarding frame")

// decodeRPC decodes a frame; it owns nothing of p afterwards.
func decodeRPC(p []byte) (*rpcMsg, error) {
	d := reader{b: p}
	m := &rpcMsg{kind: msgKind(d.byte())}
	m.linkEpoch = d.uvarint()
	m.linkSeq = d.uvarint()
	m.group = d.uvarint()
	m.groupEpoch = d.uvarint()
	msg := func() *core.Message {
		b := d.bytes()
		if d.err != nil {
			return nil
		}
		x, err := core.DecodeMessage(b)
		if err != nil {
			d.fail()
			return nil
		}
		return x
	}
	switch m.kind {
	case kOpen:
		m.sid = d.uvarint()
		m.open.User = d.str()
		m.open.ClientID = d.str()
		m.open.Protocol = d.str()
		m.open.RemoteAddr = d.str()
	case kCloseSession:
		m.sid = d.uvarint()
	case kSend:
		m.sid = d.uvarint()
		m.rid = d.uvarint()
		m.msg = msg()
	case kAttach:
		m.sid = d.uvarint()
		m.cid = d.uvarint()
		m.rid = d.uvarint()
		o := &m.opts
		o.Address = d.str()
		o.RoutingType = core.RoutingType(d.byte())
		o.SubscriptionName = d.str()
		o.SharedSubscriptionName = d.str()
		o.Queue = d.str()
		o.Selector = d.str()
		flags := d.byte()
		o.Exclusive = flags&1 != 0
		o.NoLocal = flags&2 != 0
		o.MaxBytes = int64(d.uvarint())
	case kFlow:
		m.cid = d.uvarint()
		m.n = d.uvarint()
	case kDrain, kDetach:
		m.cid = d.uvarint()
	case kSettle:
		m.cid = d.uvarint()
		m.tag = d.uvarint()
		m.n = d.uvarint()
	case kCommit:
		m.sid = d.uvarint()
		m.rid = d.uvarint()
		n := d.uvarint()
		if n > uint64(len(d.b)) {
			return nil, errBadFrame
		}
		for range n {
			if x := msg(); x != nil {
				m.sends = append(m.sends, x)
			}
		}
		n = d.uvarint()
		if n > uint64(len(d.b)) {
			return nil, errBadFrame
		}
		for range n {
			m.acks = append(m.acks, ackRef{d.uvarint(), d.uvarint()})
		}
		n = d.uvarint()
		if n > uint64(len(d.b)) {
			return nil, errBadFrame
		}
		for range n {
			key := d.str()
			m.records = append(m.records, core.ClientRecord{Key: key, Value: d.bytes()})
		}
	case kRecord:
		m.sid = d.uvarint()
		m.rid = d.uvarint()
		m.n = d.uvarint()
		m.str = d.str()
		m.payload = d.bytes()
	case kMark:
		m.cid = d.uvarint()
		m.rid = d.uvarint()
		m.tag = d.uvarint()
		m.n = d.uvarint()
	case kUnsubscribe:
		m.sid = d.uvarint()
		m.rid = d.uvarint()
		m.str = d.str()
	case kCreateTemp:
		m.sid = d.uvarint()
		m.rid = d.uvarint()
	case kRetain:
		m.rid = d.uvarint()
		m.msg = msg()
	case kCatalog:
		m.rid = d.uvarint()
		m.n = d.uvarint()
		m.str = d.str()
	case kResult:
		m.rid = d.uvarint()
		m.errCode = d.byte()
		m.str = d.str()
		m.payload = d.bytes()
	case kDeliver:
		m.cid = d.uvarint()
		m.tag = d.uvarint()
		m.count = uint32(d.uvarint())
		m.redelivered = d.byte() != 0
		m.mark = uint32(d.uvarint())
		m.msg = msg()
	case kAdmin:
		m.rid = d.uvarint()
		m.n = d.uvarint()
		m.str = d.str()
	case kMember:
		m.rid = d.uvarint()
		m.n = d.uvarint()
		m.tag = d.uvarint()
		m.str = d.str()
	case kSessionLost:
		m.sid = d.uvarint()
		m.str = d.str()
	case kConsumerLost:
		m.cid = d.uvarint()
		m.str = d.str()
	case kPing, kLinkReset:
	default:
		return nil, fmt.Errorf("%w: kind %d", errBadFrame, m.kind)
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, fmt.Errorf("%w: kind %d", errBadFrame, m.kind)
	}
	return m, nil
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Errors cross the wire as a code naming core's sentinel, so that the
// access broker's front-ends map them as they would a local error, plus
// the text.
var wireErrors = []error{
	nil, // 0: no error
	core.ErrClosed, core.ErrSessionClosed, core.ErrInvalidMessage, core.ErrInvalidAddress,
	core.ErrAddressNotFound, core.ErrQueueNotFound, core.ErrQueueExists, core.ErrRoutingMismatch,
	core.ErrUnknownDelivery, core.ErrConsumerClosed, core.ErrTxClosed, core.ErrSubscriptionInUse,
	core.ErrClientIDRequired, core.ErrAuthFailed, core.ErrAddressFull, core.ErrInvalidSelector,
	core.ErrUnauthorized, core.ErrUnavailable, core.ErrCrossGroupTx, core.ErrPersistence,
	core.ErrDiskFull, core.ErrClientIDInUse, core.ErrQuotaExceeded, core.ErrDuplicateID,
	core.ErrTooLarge, core.ErrUnroutable,
}

// errCodeOther marks an error that wraps none of wireErrors.
const errCodeOther = 255

func errCode(err error) (uint8, string) {
	if err == nil {
		return 0, ""
	}
	var az *core.AuthzError
	if errors.As(err, &az) {
		// The text carries user, permission and address; the code
		// makes it ErrUnauthorized again (see wireError).
		return codeOf(core.ErrUnauthorized), az.User + "\x00" + string(az.Permission) + "\x00" + az.Address
	}
	for i, e := range wireErrors {
		if i > 0 && errors.Is(err, e) {
			return uint8(i), err.Error()
		}
	}
	return errCodeOther, err.Error()
}

func codeOf(target error) uint8 {
	for i, e := range wireErrors {
		if e == target {
			return uint8(i)
		}
	}
	return errCodeOther
}

// wireError rebuilds an error sent by errCode.
func wireError(code uint8, text string) error {
	switch {
	case code == 0:
		return nil
	case code == codeOf(core.ErrUnauthorized):
		var az core.AuthzError
		if parts := splitNUL(text); len(parts) == 3 {
			az.User, az.Permission, az.Address = parts[0], core.Permission(parts[1]), parts[2]
			return &az
		}
		return fmt.Errorf("%w: %s", core.ErrUnauthorized, text)
	case int(code) < len(wireErrors):
		return remoteError{sentinel: wireErrors[code], text: text}
	}
	return errors.New(text)
}

func splitNUL(s string) []string {
	var out []string
	for {
		i := indexByte(s, 0)
		if i < 0 {
			return append(out, s)
		}
		out = append(out, s[:i])
		s = s[i+1:]
	}
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// remoteError is an error of another node: its text as given there, and
// errors.Is the same sentinel.
type remoteError struct {
	sentinel error
	text     string
}

func (e remoteError) Error() string { return e.text }
func (e remoteError) Unwrap() error { return e.sentinel }

package frames

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/junctionmq/junction/amqp/internal/encoding"
)

func hx(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

func ptr[T any](v T) *T { return &v }

// frameBody splits a whole frame into its header and body.
func frameBody(t testing.TB, frame []byte) (Header, []byte) {
	t.Helper()
	h, err := ParseHeader(frame)
	if err != nil {
		t.Fatal(err)
	}
	if int(h.Size) != len(frame) {
		t.Fatalf("frame size %d, have %d bytes", h.Size, len(frame))
	}
	return h, frame[int(h.DataOffset)*4:]
}

var (
	selector = &encoding.Described{Descriptor: SelectorFilterCode, Value: "color = 'blue'"}
	noLocal  = &encoding.Described{Descriptor: NoLocalFilterName, Value: []any{}}
	someErr  = &Error{Condition: ErrCondNotFound, Description: "no such queue",
		Info: encoding.Map{{Key: encoding.Symbol("queue"), Value: "q1"}}}
)

// bodies are performatives with every field set, and with none but the
// mandatory ones.
var bodies = []struct {
	frameType uint8
	body      Body
}{
	{TypeAMQP, &Open{ContainerID: "c1", MaxFrameSize: math.MaxUint32, ChannelMax: math.MaxUint16}},
	{TypeAMQP, &Open{
		ContainerID: "container", Hostname: "example.com", MaxFrameSize: 65536, ChannelMax: 255,
		IdleTimeout:     30 * time.Second,
		OutgoingLocales: []encoding.Symbol{"en-US"}, IncomingLocales: []encoding.Symbol{"en-US", "fr"},
		OfferedCapabilities: []encoding.Symbol{"ANONYMOUS-RELAY"}, DesiredCapabilities: []encoding.Symbol{"x"},
		Properties: encoding.Map{{Key: encoding.Symbol("product"), Value: "junction"}, {Key: encoding.Symbol("n"), Value: uint32(7)}},
	}},
	{TypeAMQP, &Begin{IncomingWindow: 100, OutgoingWindow: 200, HandleMax: math.MaxUint32}},
	{TypeAMQP, &Begin{RemoteChannel: ptr(uint16(3)), NextOutgoingID: 1, IncomingWindow: 2048,
		OutgoingWindow: 2048, HandleMax: 63, OfferedCapabilities: []encoding.Symbol{"a"},
		DesiredCapabilities: []encoding.Symbol{"b"}, Properties: encoding.Map{{Key: encoding.Symbol("p"), Value: true}}}},
	{TypeAMQP, &Attach{Name: "l", Handle: 0, Role: RoleSender, SndSettleMode: SndMixed}},
	{TypeAMQP, &Attach{
		Name: "link-1", Handle: 7, Role: RoleReceiver, SndSettleMode: SndSettled, RcvSettleMode: RcvSecond,
		Source: &Source{
			Address: ptr("queue.a"), Durable: DurableUnsettled, ExpiryPolicy: ExpiryNever, Timeout: 60,
			Dynamic: true, DynamicNodeProperties: encoding.Map{{Key: encoding.Symbol("lifetime-policy"), Value: &encoding.Described{Descriptor: uint64(0x2b), Value: []any{}}}},
			DistributionMode: DistributionCopy,
			Filter: map[encoding.Symbol]*encoding.Described{
				"jms-selector": selector, "no-local": noLocal, "null-filter": nil},
			DefaultOutcome: &Modified{DeliveryFailed: true},
			Outcomes:       []encoding.Symbol{"amqp:accepted:list", "amqp:rejected:list"},
			Capabilities:   []encoding.Symbol{"queue"},
		},
		Target: &Target{Address: ptr(""), Durable: DurableConfiguration, ExpiryPolicy: ExpiryLinkDetach,
			Timeout: 5, Dynamic: true, DynamicNodeProperties: encoding.Map{{Key: encoding.Symbol("x"), Value: int64(-1)}},
			Capabilities: []encoding.Symbol{"topic"}},
		Unsettled:            encoding.Map{{Key: []byte("tag1"), Value: &encoding.Described{Descriptor: uint64(0x24), Value: []any{}}}},
		IncompleteUnsettled:  true,
		InitialDeliveryCount: ptr(uint32(0)),
		MaxMessageSize:       1 << 20,
		OfferedCapabilities:  []encoding.Symbol{"SHARED-SUBS"},
		DesiredCapabilities:  []encoding.Symbol{"DELAYED_DELIVERY"},
		Properties:           encoding.Map{{Key: encoding.Symbol("k"), Value: "v"}},
	}},
	{TypeAMQP, &Attach{Name: "txn", Handle: 1, Role: RoleSender, SndSettleMode: SndMixed,
		Source:      &Source{ExpiryPolicy: ExpirySessionEnd, Outcomes: []encoding.Symbol{"amqp:accepted:list"}},
		Coordinator: &Coordinator{Capabilities: []encoding.Symbol{"amqp:local-transactions"}}}},
	{TypeAMQP, &Flow{IncomingWindow: 1, NextOutgoingID: 2, OutgoingWindow: 3}},
	{TypeAMQP, &Flow{NextIncomingID: ptr(uint32(10)), IncomingWindow: 11, NextOutgoingID: 12,
		OutgoingWindow: 13, Handle: ptr(uint32(0)), DeliveryCount: ptr(uint32(300)),
		LinkCredit: ptr(uint32(math.MaxUint32)), Available: ptr(uint32(5)), Drain: true, Echo: true,
		Properties: encoding.Map{{Key: encoding.Symbol("p"), Value: nil}}}},
	{TypeAMQP, &Transfer{Handle: 0}},
	{TypeAMQP, &Transfer{Handle: 3, DeliveryID: ptr(uint32(99)), DeliveryTag: []byte{1, 2, 3, 4},
		MessageFormat: ptr(uint32(0)), Settled: ptr(false), More: true, RcvSettleMode: ptr(RcvSecond),
		State: &TransactionalState{TxnID: []byte("tx"), Outcome: &Accepted{}}, Resume: true,
		Aborted: true, Batchable: true}},
	{TypeAMQP, &Transfer{Handle: 1, DeliveryTag: []byte{}, Settled: ptr(true)}},
	{TypeAMQP, &Disposition{Role: RoleReceiver, First: 5}},
	{TypeAMQP, &Disposition{Role: RoleSender, First: 5, Last: ptr(uint32(9)), Settled: true,
		State: &Received{SectionNumber: 1, SectionOffset: 1 << 40}, Batchable: true}},
	{TypeAMQP, &Disposition{Role: RoleReceiver, First: 1, State: &Accepted{}}},
	{TypeAMQP, &Disposition{Role: RoleReceiver, First: 1, State: &Rejected{Error: someErr}}},
	{TypeAMQP, &Disposition{Role: RoleReceiver, First: 1, State: &Rejected{}}},
	{TypeAMQP, &Disposition{Role: RoleReceiver, First: 1, State: &Released{}}},
	{TypeAMQP, &Disposition{Role: RoleReceiver, First: 1, State: &Modified{DeliveryFailed: true,
		UndeliverableHere: true, MessageAnnotations: encoding.Map{{Key: encoding.Symbol("x-opt-a"), Value: "b"}}}}},
	{TypeAMQP, &Disposition{Role: RoleReceiver, First: 1, State: &Declared{TxnID: []byte{0, 0, 0, 1}}}},
	{TypeAMQP, &Disposition{Role: RoleReceiver, First: 1, State: &TransactionalState{TxnID: []byte{1}}}},
	{TypeAMQP, &Detach{Handle: 2}},
	{TypeAMQP, &Detach{Handle: 2, Closed: true, Error: someErr}},
	{TypeAMQP, &End{}},
	{TypeAMQP, &End{Error: &Error{Condition: ErrCondWindowViolation}}},
	{TypeAMQP, &Close{}},
	{TypeAMQP, &Close{Error: someErr}},
	{TypeSASL, &SASLMechanisms{Mechanisms: []encoding.Symbol{"PLAIN", "ANONYMOUS"}}},
	{TypeSASL, &SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00user\x00pass"), Hostname: "h"}},
	{TypeSASL, &SASLInit{Mechanism: "ANONYMOUS"}},
	{TypeSASL, &SASLInit{Mechanism: "EXTERNAL", InitialResponse: []byte{}}},
	{TypeSASL, &SASLChallenge{Challenge: []byte("c")}},
	{TypeSASL, &SASLResponse{Response: []byte("r")}},
	{TypeSASL, &SASLOutcome{Code: SASLCodeOK}},
	{TypeSASL, &SASLOutcome{Code: SASLCodeSysTemp, AdditionalData: []byte("later")}},
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range bodies {
		var payload []byte
		if _, ok := tc.body.(*Transfer); ok {
			payload = []byte("message bytes")
		}
		frame := Append([]byte("prefix"), tc.frameType, 5, tc.body, payload)
		frame = frame[len("prefix"):]
		h, body := frameBody(t, frame)
		if h.Type != tc.frameType || h.Channel != 5 || h.DataOffset != 2 {
			t.Errorf("%T: header %+v", tc.body, h)
		}
		got, p, err := Decode(h.Type, body)
		if err != nil {
			t.Errorf("%T: % x: %v", tc.body, body, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.body) {
			t.Errorf("round trip of %#v gave %#v", tc.body, got)
		}
		if !bytes.Equal(p, payload) {
			t.Errorf("%T: payload %q", tc.body, p)
		}
		if n := PerformativeSize(tc.body); n != len(body)-len(payload) {
			t.Errorf("%T: PerformativeSize %d, encoded %d", tc.body, n, len(body)-len(payload))
		}
	}
}

func TestParseHeader(t *testing.T) {
	h, err := ParseHeader(hx("00 00 01 00 03 01 00 07"))
	if err != nil || h != (Header{Size: 256, DataOffset: 3, Type: TypeSASL, Channel: 7}) {
		t.Errorf("got %+v, %v", h, err)
	}
	for _, bad := range []string{"00 00 00 08 02 00 00", "00 00 00 07 02 00 00 00",
		"00 00 00 08 01 00 00 00", "00 00 00 0b 03 00 00 00"} {
		if _, err := ParseHeader(hx(bad)); !errors.Is(err, ErrInvalidHeader) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if !bytes.Equal(AppendEmpty(nil), hx("00 00 00 08 02 00 00 00")) {
		t.Errorf("AppendEmpty: % x", AppendEmpty(nil))
	}
	if b, p, err := Decode(TypeAMQP, nil); b != nil || p != nil || err != nil {
		t.Errorf("heartbeat: %v %v %v", b, p, err)
	}
}

func TestDecodeWireForms(t *testing.T) {
	for _, tc := range []struct {
		name      string
		frameType uint8
		body      string
		want      Body
	}{
		{"open with only container-id", TypeAMQP, "00 53 10 c0 03 01 a1 00",
			&Open{MaxFrameSize: math.MaxUint32, ChannelMax: math.MaxUint16}},
		{"open, symbolic descriptor, list32, wide uints", TypeAMQP,
			"00 a3 0e" + hex.EncodeToString([]byte("amqp:open:list")) +
				"d0 00 00 00 10 00 00 00 04 a1 01 63 40 70 00 00 02 00 60 00 09",
			&Open{ContainerID: "c", MaxFrameSize: 512, ChannelMax: 9}},
		{"open, descriptor as ulong", TypeAMQP, "00 80 00 00 00 00 00 00 00 10 c0 06 03 a1 01 63 40 43",
			&Open{ContainerID: "c", MaxFrameSize: 0, ChannelMax: math.MaxUint16}},
		{"open, single symbols for multiple fields", TypeAMQP,
			"00 53 10 c0 10 09 a1 01 63 40 40 40 40 a3 01 61 40 40 a3 01 62",
			&Open{ContainerID: "c", MaxFrameSize: math.MaxUint32, ChannelMax: math.MaxUint16,
				OutgoingLocales: []encoding.Symbol{"a"}, DesiredCapabilities: []encoding.Symbol{"b"}}},
		{"close with extra trailing fields", TypeAMQP, "00 53 18 c0 05 03 40 41 52 09", &Close{}},
		{"end, null list", TypeAMQP, "00 53 17 40", &End{}},
		{"end, list0", TypeAMQP, "00 53 17 45", &End{}},
		{"transfer with handle only, smalluint", TypeAMQP, "00 53 14 c0 03 01 52 05", &Transfer{Handle: 5}},
		{"flow with wide uints", TypeAMQP, "00 53 13 c0 0d 04 40 70 00 00 00 01 43 70 00 00 00 02",
			&Flow{IncomingWindow: 1, OutgoingWindow: 2, NextOutgoingID: 0}},
		{"disposition, role as 0x56", TypeAMQP, "00 53 15 c0 05 02 56 01 52 03",
			&Disposition{Role: RoleReceiver, First: 3}},
		{"disposition, symbolic accepted", TypeAMQP,
			"00 53 15 c0 1b 05 41 43 40 41 00 a3 12" + hex.EncodeToString([]byte("amqp:accepted:list")) + "45",
			&Disposition{Role: RoleReceiver, Settled: true, State: &Accepted{}}},
		{"sasl-init, mechanism as sym32", TypeSASL, "00 53 41 c0 09 01 b3 00 00 00 03 61 62 63",
			&SASLInit{Mechanism: "abc"}},
		{"sasl-mechanisms, single symbol", TypeSASL, "00 53 40 c0 08 01 a3 05 50 4c 41 49 4e",
			&SASLMechanisms{Mechanisms: []encoding.Symbol{"PLAIN"}}},
	} {
		got, _, err := Decode(tc.frameType, hx(tc.body))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %#v, want %#v", tc.name, got, tc.want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		frameType uint8
		body      string
		want      error
	}{
		{"open, no fields", TypeAMQP, "00 53 10 45", ErrMissingField},
		{"open, null container-id", TypeAMQP, "00 53 10 c0 02 01 40", ErrMissingField},
		{"begin, no windows", TypeAMQP, "00 53 11 c0 03 02 40 43", ErrMissingField},
		{"begin, null outgoing-window", TypeAMQP, "00 53 11 c0 05 04 40 43 43 40", ErrMissingField},
		{"attach, name only", TypeAMQP, "00 53 12 c0 03 01 a1 00", ErrMissingField},
		{"attach, null role", TypeAMQP, "00 53 12 c0 05 03 a1 00 43 40", ErrMissingField},
		{"attach, snd-settle-mode 3", TypeAMQP, "00 53 12 c0 07 04 a1 00 43 41 50 03", ErrInvalidField},
		{"attach, bad target descriptor", TypeAMQP, "00 53 12 c0 0c 07 a1 00 43 41 40 40 40 00 53 28 45", ErrInvalidField},
		{"attach, filter key not symbol", TypeAMQP,
			"00 53 12 c0 19 06 a1 00 43 41 40 40 00 53 28 c0 0d 08 40 40 40 40 40 40 40 c1 03 02 43 40", ErrInvalidField},
		{"flow, empty", TypeAMQP, "00 53 13 45", ErrMissingField},
		{"flow, null incoming-window", TypeAMQP, "00 53 13 c0 03 02 40 40", ErrMissingField},
		{"transfer, null handle", TypeAMQP, "00 53 14 c0 02 01 40", ErrMissingField},
		{"transfer, rcv-settle-mode 2", TypeAMQP, "00 53 14 c0 09 07 43 40 40 40 40 40 50 02", ErrInvalidField},
		{"disposition, no first", TypeAMQP, "00 53 15 c0 02 01 41", ErrMissingField},
		{"detach, empty", TypeAMQP, "00 53 16 45", ErrMissingField},
		{"detach, error without condition", TypeAMQP, "00 53 16 c0 07 03 43 40 00 53 1d 45", ErrMissingField},
		{"disposition, received without offset", TypeAMQP,
			"00 53 15 c0 0c 05 41 43 40 40 00 53 23 c0 02 01 43", ErrMissingField},
		{"disposition, unknown state", TypeAMQP, "00 53 15 c0 09 05 41 43 40 40 00 53 99 45", ErrInvalidField},
		{"sasl-init, empty", TypeSASL, "00 53 41 45", ErrMissingField},
		{"sasl-mechanisms, null", TypeSASL, "00 53 40 c0 02 01 40", ErrMissingField},
		{"sasl-outcome, empty", TypeSASL, "00 53 44 45", ErrMissingField},
		{"sasl-challenge, empty", TypeSASL, "00 53 42 45", ErrMissingField},
		{"sasl-response, empty", TypeSASL, "00 53 43 45", ErrMissingField},
		{"open in a SASL frame", TypeSASL, "00 53 10 c0 03 01 a1 00", ErrUnexpectedBody},
		{"sasl-init in an AMQP frame", TypeAMQP, "00 53 41 c0 03 01 a3 00", ErrUnexpectedBody},
		{"unknown frame type", 7, "00 53 10 c0 03 01 a1 00", ErrUnexpectedBody},
		{"unknown descriptor", TypeAMQP, "00 53 1f 45", ErrUnexpectedBody},
		{"unknown symbolic descriptor", TypeAMQP, "00 a3 01 78 45", ErrUnexpectedBody},
		{"not described", TypeAMQP, "45", encoding.ErrInvalidType},
		{"bytes after open", TypeAMQP, "00 53 10 c0 03 01 a1 00 40", ErrUnexpectedBody},
		{"truncated list", TypeAMQP, "00 53 10 c0 05 01 a1 00", encoding.ErrTruncated},
		{"hostile list count", TypeAMQP, "00 53 10 d0 00 00 00 05 ff ff ff ff 40", encoding.ErrInvalidSize},
		{"hostile binary size", TypeAMQP, "00 53 14 c0 08 03 43 43 b0 7f ff ff ff", encoding.ErrTruncated},
		{"bad utf8 container-id", TypeAMQP, "00 53 10 c0 04 01 a1 01 ff", encoding.ErrInvalidUTF8},
		{"wrong type for handle", TypeAMQP, "00 53 14 c0 03 01 a1 00", encoding.ErrInvalidType},
	} {
		_, _, err := Decode(tc.frameType, hx(tc.body))
		if tc.want == nil {
			if err == nil {
				t.Errorf("%s: decoded", tc.name)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestDecodeFilterSet(t *testing.T) {
	var w encoding.Writer
	w.Descriptor(codeAttach)
	m := w.BeginList()
	w.String("l")
	w.Uint(0)
	w.Bool(true)
	w.Null()
	w.Null()
	w.Descriptor(codeSource)
	s := w.BeginList()
	for range 7 {
		w.Null()
	}
	fm := w.BeginMap()
	w.String("sel") // a string key: accepted
	w.SymbolDescriptor(SelectorFilterName)
	w.String("a = 1")
	w.EndMap(fm, 2)
	w.EndList(s, 8)
	w.EndList(m, 6)
	b, _, err := Decode(TypeAMQP, w.B)
	if err != nil {
		t.Fatal(err)
	}
	f := b.(*Attach).Source.Filter["sel"]
	if !IsFilter(f, SelectorFilterCode, SelectorFilterName) || f.Value != "a = 1" {
		t.Errorf("filter %#v", f)
	}
	if IsFilter(f, NoLocalFilterCode, NoLocalFilterName) || IsFilter(nil, 0, "") {
		t.Error("IsFilter matched the wrong filter")
	}
	if !IsFilter(selector, SelectorFilterCode, SelectorFilterName) {
		t.Error("IsFilter did not match by code")
	}
}

func TestError(t *testing.T) {
	if s := someErr.Error(); s != "amqp:not-found: no such queue" {
		t.Error(s)
	}
	if s := (&Error{Condition: ErrCondStolen}).Error(); s != "amqp:link:stolen" {
		t.Error(s)
	}
}

func TestTxControl(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want any
	}{
		{(&Declare{}).Described(), &Declare{}},
		{*(&Declare{GlobalID: "g"}).Described(), &Declare{GlobalID: "g"}},
		{(&Discharge{TxnID: []byte{1}}).Described(), &Discharge{TxnID: []byte{1}}},
		{(&Discharge{TxnID: []byte{1}, Fail: true}).Described(), &Discharge{TxnID: []byte{1}, Fail: true}},
		{&encoding.Described{Descriptor: encoding.Symbol("amqp:discharge:list"), Value: []any{[]byte{2}, nil}},
			&Discharge{TxnID: []byte{2}}},
		{&encoding.Described{Descriptor: uint64(0x31), Value: nil}, &Declare{}},
	} {
		// Through a message, as the server sees it.
		msg := AppendMessage(nil, &Message{BodyKind: BodyValue, Value: tc.in})
		m, err := ParseMessage(msg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeTxControl(m.Value)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%#v: got %#v, %v", tc.in, got, err)
		}
	}
	for _, tc := range []struct {
		in   any
		want error
	}{
		{"declare", ErrUnexpectedBody},
		{&encoding.Described{Descriptor: uint64(0x33), Value: []any{}}, ErrUnexpectedBody},
		{&encoding.Described{Descriptor: uint64(0x32), Value: []any{}}, ErrMissingField},
		{&encoding.Described{Descriptor: uint64(0x32), Value: []any{"id"}}, ErrInvalidField},
		{&encoding.Described{Descriptor: uint64(0x32), Value: []any{[]byte{1}, "yes"}}, ErrInvalidField},
		{&encoding.Described{Descriptor: uint64(0x31), Value: "x"}, ErrUnexpectedBody},
	} {
		if _, err := DecodeTxControl(tc.in); !errors.Is(err, tc.want) {
			t.Errorf("%#v: got %v, want %v", tc.in, err, tc.want)
		}
	}
}

func TestAppendIgnoresUnencodableValues(t *testing.T) {
	o := &Open{ContainerID: "c", Properties: encoding.Map{{Key: encoding.Symbol("f"), Value: func() {}}}}
	_, body := frameBody(t, Append(nil, TypeAMQP, 0, o, nil))
	got, _, err := Decode(TypeAMQP, body)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := got.(*Open).Properties.Get(encoding.Symbol("f")); v != nil {
		t.Errorf("property %v", v)
	}
}

func TestTrailingNullsOmitted(t *testing.T) {
	// A settled transfer continuation: only the handle is sent.
	_, body := frameBody(t, Append(nil, TypeAMQP, 0, &Transfer{Handle: 1}, nil))
	if !bytes.Equal(body, hx("00 53 14 c0 03 01 52 01")) {
		t.Errorf("% x", body)
	}
	_, body = frameBody(t, Append(nil, TypeAMQP, 0, &Disposition{Role: RoleReceiver, First: 0,
		Settled: true, State: &Accepted{}}, nil))
	if !bytes.Equal(body, hx("00 53 15 c0 09 05 41 43 40 41 00 53 24 45")) {
		t.Errorf("% x", body)
	}
}

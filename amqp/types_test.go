package amqp_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/amqp/amqptest"
	"github.com/junctionmq/junction/amqp/internal/encoding"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
)

// everyType is a value of each AMQP type (Part 1 §1.6), keyed by its
// name: the primitive types, the compound ones, an array and a described
// value.
func everyType() encoding.Map {
	return encoding.Map{
		{Key: "boolean", Value: true},
		{Key: "ubyte", Value: uint8(200)},
		{Key: "ushort", Value: uint16(60000)},
		{Key: "uint", Value: uint32(4000000000)},
		{Key: "ulong", Value: uint64(7)},
		{Key: "ulong-big", Value: uint64(1<<63 + 5)},
		{Key: "byte", Value: int8(-7)},
		{Key: "short", Value: int16(-300)},
		{Key: "int", Value: int32(-7)},
		{Key: "long", Value: int64(-9_000_000_000_000)},
		{Key: "float", Value: float32(1.5)},
		{Key: "double", Value: -2.25},
		{Key: "decimal32", Value: encoding.Decimal32{0x22, 0x50, 0x00, 0x01}},
		{Key: "decimal64", Value: encoding.Decimal64{0x22, 0x38, 0, 0, 0, 0, 0, 0x2a}},
		{Key: "decimal128", Value: encoding.Decimal128{0x22, 0x08, 15: 0x7b}},
		{Key: "char", Value: encoding.Char('é')},
		{Key: "timestamp", Value: time.UnixMilli(1_700_000_000_123).UTC()},
		{Key: "uuid", Value: encoding.UUID{0xf8, 0x1d, 0x4f, 0xae, 0x7d, 0xec, 0x11, 0xd0, 0xa7, 0x65, 0x00, 0xa0, 0xc9, 0x1e, 0x6b, 0xf6}},
		{Key: "binary", Value: []byte{0, 1, 2, 0xff}},
		{Key: "string", Value: "grüße 日本"},
		{Key: "symbol", Value: encoding.Symbol("a-symbol")},
		{Key: "null", Value: nil},
		{Key: "list", Value: []any{int32(1), "two", nil}},
		{Key: "map", Value: encoding.Map{{Key: "k", Value: int16(3)}, {Key: encoding.Symbol("s"), Value: false}}},
		{Key: "array", Value: encoding.Array{int32(1), int32(-2), int32(3)}},
		{Key: "described", Value: &encoding.Described{Descriptor: encoding.Symbol("com.example:point"), Value: []any{1.0, 2.0}}},
	}
}

// annotations is everyType keyed by symbols, for the annotation maps.
func annotations(prefix string) encoding.Map {
	var m encoding.Map
	for _, e := range everyType() {
		m = append(m, encoding.MapEntry{Key: encoding.Symbol(prefix + e.Key.(string)), Value: e.Value})
	}
	return m
}

// typedMessage is a message with every type in every section that
// holds values of any type, and the given message and correlation ids.
func typedMessage(id, corr any) *frames.Message {
	subject, rtg := "subj", "rtg"
	seq := uint32(9)
	return &frames.Message{
		Header:              &frames.MessageHeader{Durable: true, Priority: 4},
		DeliveryAnnotations: annotations("x-opt-da-"),
		MessageAnnotations:  annotations("x-opt-ma-"),
		Properties: &frames.MessageProperties{
			MessageID: id, CorrelationID: corr, Subject: &subject, ReplyToGroupID: &rtg, GroupSequence: &seq,
			ContentType: "application/octet-stream", ContentEncoding: "gzip",
		},
		ApplicationProperties: everyType(),
		BodyKind:              frames.BodyData,
		Data:                  [][]byte{[]byte("typed")},
		RawFooter:             footerSection(),
	}
}

func footerSection() []byte {
	var w encoding.Writer
	w.Descriptor(0x78)
	if err := w.Map(annotations("x-opt-f-")); err != nil {
		panic(err)
	}
	return w.B
}

// section returns the bytes of a map section as the encoder writes it.
func section(code uint64, m encoding.Map) []byte {
	var w encoding.Writer
	w.Descriptor(code)
	if err := w.Map(m); err != nil {
		panic(err)
	}
	return w.B
}

// checkTyped fails unless got carries what sent did: every value in
// the application properties and annotations of the same type and
// encoding, the footer as sent, the properties' ids of their types,
// and no delivery annotations (they are for one hop).
func checkTyped(t *testing.T, what string, sent *frames.Message, payload []byte) {
	t.Helper()
	got, err := frames.ParseMessage(payload)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	app := map[string]any{}
	for _, e := range got.ApplicationProperties {
		app[e.Key.(string)] = e.Value
	}
	for _, e := range sent.ApplicationProperties {
		v, ok := app[e.Key.(string)]
		if !ok || !reflect.DeepEqual(v, e.Value) {
			t.Errorf("%s: application property %q is %T %#v, want %T %#v", what, e.Key, v, v, e.Value, e.Value)
		}
	}
	if len(got.ApplicationProperties) != len(sent.ApplicationProperties) {
		t.Errorf("%s: %d application properties, want %d: %v", what, len(got.ApplicationProperties), len(sent.ApplicationProperties), got.ApplicationProperties)
	}
	// The section as a whole: each value with its encoding (the order of
	// the entries is the producer's).
	if want := section(0x74, sent.ApplicationProperties); !bytes.Equal(got.RawApplicationProperties, want) {
		t.Errorf("%s: application-properties\n% x\nwant\n% x", what, got.RawApplicationProperties, want)
	}
	if want := section(0x72, sent.MessageAnnotations); !bytes.Equal(got.RawMessageAnnotations, want) {
		t.Errorf("%s: message-annotations\n% x\nwant\n% x", what, got.RawMessageAnnotations, want)
	}
	if !bytes.Equal(got.RawFooter, sent.RawFooter) {
		t.Errorf("%s: footer\n% x\nwant\n% x", what, got.RawFooter, sent.RawFooter)
	}
	if got.DeliveryAnnotations != nil {
		t.Errorf("%s: delivery annotations passed on: %v", what, got.DeliveryAnnotations)
	}
	p, sp := got.Properties, sent.Properties
	if !reflect.DeepEqual(p.MessageID, sp.MessageID) || !reflect.DeepEqual(p.CorrelationID, sp.CorrelationID) {
		t.Errorf("%s: ids %T %#v, %T %#v; want %T %#v, %T %#v", what, p.MessageID, p.MessageID, p.CorrelationID, p.CorrelationID,
			sp.MessageID, sp.MessageID, sp.CorrelationID, sp.CorrelationID)
	}
	if *p.Subject != *sp.Subject || *p.ReplyToGroupID != *sp.ReplyToGroupID || *p.GroupSequence != *sp.GroupSequence ||
		p.ContentType != sp.ContentType || p.ContentEncoding != sp.ContentEncoding {
		t.Errorf("%s: properties %+v", what, p)
	}
	if string(got.Data[0]) != "typed" {
		t.Errorf("%s: body %q", what, got.Data)
	}
}

// rawLinks opens a raw connection with a sender (handle 0) to each of
// targets and a receiver (handles 10...) on each of sources, with
// credit.
func rawLinks(t *testing.T, tb *amqptest.Broker, targets, sources []string) *rawClient {
	c := dialRaw(t, tb)
	c.open(0)
	for i, a := range targets {
		c.send(0, &frames.Attach{Name: "s-" + a, Handle: uint32(i), Role: frames.RoleSender, InitialDeliveryCount: u32(0),
			Source: &frames.Source{}, Target: &frames.Target{Address: addr(a)}}, nil)
		expect[*frames.Attach](c)
		expect[*frames.Flow](c)
	}
	for i, a := range sources {
		h := uint32(10 + i)
		c.send(0, &frames.Attach{Name: "r-" + a, Handle: h, Role: frames.RoleReceiver,
			Source: &frames.Source{Address: addr(a)}, Target: &frames.Target{}}, nil)
		expect[*frames.Attach](c)
		c.send(0, &frames.Flow{NextIncomingID: u32(0), IncomingWindow: 1000, OutgoingWindow: 1000,
			Handle: u32(h), DeliveryCount: u32(0), LinkCredit: u32(100)}, nil)
	}
	return c
}

// Every AMQP type in application-properties, message-annotations and the
// footer reaches an AMQP receiver as it was sent, through core and
// through core's journal and cluster record (EncodeMessage and
// DecodeMessage); message and correlation ids keep their types; delivery
// annotations are the sender's hop only.
func TestEveryAMQPTypeRoundTrips(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{})
	// The codec path: a core consumer takes each message from
	// types.codec, encodes and decodes it as the journal and the cluster
	// do, and sends the result to types.back, in order.
	sess, err := tb.Core.NewSession(core.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	in := make(chan core.Delivery, 10)
	defer close(in) // after the consumer's close, deferred below
	cons, err := sess.Subscribe(core.ConsumerOptions{Address: "types.codec", RoutingType: core.Anycast, Credit: 10,
		Handler: func(d core.Delivery) { in <- d }})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	errs := make(chan error, 10)
	go func() {
		for d := range in {
			m, err := core.DecodeMessage(core.EncodeMessage(d.Message))
			if err == nil {
				m.ID, m.Address = 0, "types.back"
				err = sess.Send(context.Background(), m)
			}
			if err == nil {
				err = cons.Ack(d.ID)
			}
			errs <- err
		}
	}()

	ids := []any{uint64(1<<63 + 1), encoding.UUID{1, 2, 3}, []byte{9, 8, 7}, "id-string", "AMQP_ULONG:5"}
	c := rawLinks(t, tb, []string{"types.direct", "types.codec"}, []string{"types.direct", "types.back"})
	var sent []*frames.Message
	for i, id := range ids {
		m := typedMessage(id, ids[(i+1)%len(ids)])
		sent = append(sent, m)
		for h := range uint32(2) {
			did := uint32(2*i) + h
			settled := false
			c.send(0, &frames.Transfer{Handle: h, DeliveryID: u32(did), DeliveryTag: []byte{byte(did)}, Settled: &settled}, encodeMessage(m))
		}
	}
	// Dispositions for what was sent, transfers of what comes back, in
	// whatever order they come.
	next := map[uint32]int{}
	accepted, received := 0, 0
	for accepted < 2*len(ids) || received < 2*len(ids) {
		switch f, payload := c.next(); f := f.(type) {
		case *frames.Disposition:
			if _, ok := f.State.(*frames.Accepted); !ok {
				t.Fatalf("deliveries %d-%v: %+v", f.First, f.Last, f.State)
			}
			last := f.First
			if f.Last != nil {
				last = *f.Last
			}
			accepted += int(last-f.First) + 1
		case *frames.Transfer:
			i := next[f.Handle]
			next[f.Handle]++
			received++
			checkTyped(t, fmt.Sprintf("handle %d message %d", f.Handle, i), sent[i], payload)
		}
	}
	for range len(ids) {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the codec consumer did not pass every message on")
		}
	}
}

// A message whose typed properties reach a dead-letter address keeps
// them, alongside the string properties core adds there: the section as
// received counts for the properties core did not change.
func TestTypedPropertiesSurviveDeadLettering(t *testing.T) {
	dla := "typed.dlq"
	tb := amqptest.Start(t, amqp.Config{}, core.Config{AddressSettings: []core.AddressSettings{{Match: "typed.q", DeadLetterAddress: &dla}}})
	s := tb.Session(t, nil)
	amqptest.Send(t, amqptest.NewSender(t, s, "typed.q", nil), &goamqp.Message{
		ApplicationProperties: map[string]any{"i": int32(-7), "ts": time.UnixMilli(5).UTC(), "u": uint16(5), "l": []any{int64(1)}},
		Data:                  [][]byte{[]byte("x")},
	})
	r := amqptest.NewReceiver(t, s, "typed.q", nil)
	m, err := r.Receive(amqptest.Ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RejectMessage(amqptest.Ctx(t), m, nil); err != nil {
		t.Fatal(err)
	}
	got := amqptest.Receive(t, amqptest.NewReceiver(t, s, dla, nil))
	ap := got.ApplicationProperties
	ts, _ := ap["ts"].(time.Time)
	if ap["i"] != int32(-7) || !ts.Equal(time.UnixMilli(5)) || ap["u"] != uint16(5) || !reflect.DeepEqual(ap["l"], []any{int64(1)}) {
		t.Errorf("typed properties after dead-lettering: %#v", ap)
	}
	if ap[core.PropOriginalAddress] != "typed.q" {
		t.Errorf("%s: %#v", core.PropOriginalAddress, ap[core.PropOriginalAddress])
	}
}

// What core sees of AMQP values: core's simple types, for selectors and
// the other protocols; values with no core counterpart are AMQP's only.
func TestTypedPropertiesInCore(t *testing.T) {
	tb := amqptest.Start(t, amqp.Config{}, core.Config{})
	c := rawLinks(t, tb, []string{"types.core"}, nil)
	settled := true
	c.send(0, &frames.Transfer{Handle: 0, DeliveryID: u32(0), DeliveryTag: []byte{0}, Settled: &settled},
		encodeMessage(&frames.Message{BodyKind: frames.BodyData, Data: [][]byte{nil},
			// An internal name is a front-end's own: a client's is dropped.
			ApplicationProperties: append(everyType(), encoding.MapEntry{Key: "_JUNCTION_ORIGIN", Value: "mqtt"})}))
	got := make(chan *core.Message, 1)
	sess, _ := tb.Core.NewSession(core.SessionOptions{})
	defer sess.Close()
	cons, err := sess.Subscribe(core.ConsumerOptions{Address: "types.core", RoutingType: core.Anycast, Credit: 1, Handler: func(d core.Delivery) { got <- d.Message }})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var m *core.Message
	select {
	case m = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery")
	}
	want := map[string]any{
		"boolean": true, "ubyte": int64(200), "ushort": int64(60000), "uint": int64(4000000000), "ulong": int64(7),
		"ulong-big": "9223372036854775813", "byte": int64(-7), "short": int64(-300), "int": int64(-7),
		"long": int64(-9_000_000_000_000), "float": 1.5, "double": -2.25, "char": "é", "timestamp": int64(1_700_000_000_123),
		"uuid": "f81d4fae-7dec-11d0-a765-00a0c91e6bf6", "binary": []byte{0, 1, 2, 0xff}, "string": "grüße 日本",
		"symbol": "a-symbol", "null": nil,
	}
	for k, v := range want {
		if got, ok := m.Properties[k]; !ok || !reflect.DeepEqual(got, v) {
			t.Errorf("core property %q: %T %#v, want %T %#v", k, got, got, v, v)
		}
	}
	for _, k := range []string{"decimal32", "decimal64", "decimal128", "list", "map", "array", "described", "_JUNCTION_ORIGIN"} {
		if v, ok := m.Properties[k]; ok {
			t.Errorf("core property %q: %#v; want none", k, v)
		}
	}
}

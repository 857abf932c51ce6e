package frames

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/junctionmq/junction/amqp/internal/encoding"
)

var fullProps = &MessageProperties{
	MessageID: "id-1", UserID: []byte("user"), To: ptr("queue.a"), Subject: ptr(""),
	ReplyTo: ptr("reply"), CorrelationID: uint64(77), ContentType: "text/plain",
	ContentEncoding: "gzip", AbsoluteExpiryTime: time.UnixMilli(1700000001000).UTC(),
	CreationTime: time.UnixMilli(1700000000000).UTC(), GroupID: ptr("g"),
	GroupSequence: ptr(uint32(3)), ReplyToGroupID: ptr("rg"),
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []*Message{
		{},
		{BodyKind: BodyData, Data: [][]byte{[]byte("hello")}},
		{BodyKind: BodyData, Data: [][]byte{[]byte("a"), {}, bytes.Repeat([]byte("b"), 300)}},
		{BodyKind: BodyValue, Value: "text"},
		{BodyKind: BodyValue, Value: nil},
		{BodyKind: BodyValue, Value: encoding.Map{{Key: "k", Value: int32(1)}}},
		{BodyKind: BodySequence, Value: []any{uint8(1), "two"}},
		{
			Header:                &MessageHeader{Durable: true, Priority: 9, TTL: ptr(uint32(1000)), FirstAcquirer: true, DeliveryCount: 2},
			DeliveryAnnotations:   encoding.Map{{Key: encoding.Symbol("x-opt-d"), Value: "v"}},
			MessageAnnotations:    encoding.Map{{Key: encoding.Symbol("x-opt-jms-dest"), Value: int8(0)}, {Key: uint64(5), Value: true}},
			Properties:            fullProps,
			ApplicationProperties: encoding.Map{{Key: "color", Value: "blue"}, {Key: "weight", Value: int64(2600)}},
			BodyKind:              BodyData,
			Data:                  [][]byte{[]byte("payload")},
		},
		{Header: &MessageHeader{Priority: 4}, Properties: &MessageProperties{MessageID: encoding.UUID{1}}},
		{Properties: &MessageProperties{MessageID: []byte{1, 2}, CorrelationID: "c"}},
	} {
		b := AppendMessage([]byte("x"), m)[1:]
		got, err := ParseMessage(b)
		if err != nil {
			t.Errorf("%+v: %v", m, err)
			continue
		}
		// The raw sections are set by parsing; the rest must match.
		if m.MessageAnnotations != nil && got.RawMessageAnnotations == nil {
			t.Error("RawMessageAnnotations not set")
		}
		if m.ApplicationProperties != nil && got.RawApplicationProperties == nil {
			t.Error("RawApplicationProperties not set")
		}
		if m.BodyKind != BodyNone && got.RawBody == nil {
			t.Error("RawBody not set")
		}
		got.RawMessageAnnotations, got.RawApplicationProperties, got.RawBody = nil, nil, nil
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip of\n%#v gave\n%#v", m, got)
		}
		// Re-encoding from the raw sections gives the same bytes.
		again, _ := ParseMessage(b)
		if b2 := AppendMessage(nil, again); !bytes.Equal(b2, b) {
			t.Errorf("raw re-encoding differs:\n% x\n% x", b, b2)
		}
	}
}

func TestMessageSections(t *testing.T) {
	var w encoding.Writer
	section := func(code uint64, v any) []byte {
		w.B = w.B[:0]
		w.Descriptor(code)
		if err := w.Value(v); err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), w.B...)
	}
	symSection := func(name string, v any) []byte {
		w.B = w.B[:0]
		w.SymbolDescriptor(encoding.Symbol(name))
		w.Value(v)
		return append([]byte(nil), w.B...)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	header := section(codeHeader, []any{true})
	ma := section(codeMessageAnnotations, encoding.Map{{Key: encoding.Symbol("x-opt-a"), Value: "b"}})
	props := section(codeProperties, []any{"id"})
	ap := section(codeApplicationProperties, encoding.Map{{Key: "k", Value: int32(-7)}})
	data1 := section(codeData, []byte("one"))
	data2 := section(codeData, []byte("two"))
	seq1 := section(codeAMQPSequence, []any{int32(1)})
	seq2 := section(codeAMQPSequence, []any{int32(2), int32(3)})
	value := section(codeAMQPValue, "v")
	footer := section(codeFooter, encoding.Map{{Key: encoding.Symbol("sig"), Value: []byte("s")}})

	in := cat(header, ma, props, ap, data1, data2, footer)
	m, err := ParseMessage(in)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Header.Durable || m.Header.Priority != 4 {
		t.Errorf("header %+v", m.Header)
	}
	if m.Properties.MessageID != "id" {
		t.Errorf("message-id %v", m.Properties.MessageID)
	}
	if !bytes.Equal(m.RawMessageAnnotations, ma) || !bytes.Equal(m.RawApplicationProperties, ap) ||
		!bytes.Equal(m.RawBody, cat(data1, data2)) || !bytes.Equal(m.RawFooter, footer) {
		t.Errorf("raw sections: % x | % x | % x | % x", m.RawMessageAnnotations, m.RawApplicationProperties, m.RawBody, m.RawFooter)
	}
	if m.BodyKind != BodyData || len(m.Data) != 2 || string(m.Data[0]) != "one" || string(m.Data[1]) != "two" {
		t.Errorf("data %q", m.Data)
	}
	// Data sections alias the input.
	if &m.Data[0][0] != &in[len(header)+len(ma)+len(props)+len(ap)+5] {
		t.Error("data section was copied")
	}
	if !bytes.Equal(AppendMessage(nil, m), in) {
		t.Error("re-encoding differs")
	}

	m, err = ParseMessage(cat(seq1, seq2))
	if err != nil || m.BodyKind != BodySequence || !reflect.DeepEqual(m.Value, []any{int32(1), int32(2), int32(3)}) {
		t.Errorf("sequences: %+v, %v", m, err)
	}
	m, err = ParseMessage(cat(symSection("amqp:properties:list", []any{nil, nil, "to"}),
		symSection("amqp:amqp-value:*", uint64(5))))
	if err != nil || *m.Properties.To != "to" || m.Value != uint64(5) {
		t.Errorf("symbolic descriptors: %+v, %v", m, err)
	}

	for name, in := range map[string][]byte{
		"two headers":            cat(header, header),
		"header after props":     cat(props, header),
		"props after body":       cat(data1, props),
		"data then value":        cat(data1, value),
		"value then sequence":    cat(value, seq1),
		"two values":             cat(value, value),
		"footer then body":       cat(footer, data1),
		"unknown section":        section(0x79, nil),
		"performative":           section(codeOpen, []any{"c"}),
		"sequence not a list":    section(codeAMQPSequence, "x"),
		"data not binary":        section(codeData, "x"),
		"data null":              section(codeData, nil),
		"header not a list":      section(codeHeader, "x"),
		"annotations not a map":  section(codeMessageAnnotations, []any{}),
		"not described":          []byte{0x45},
		"truncated":              data1[:len(data1)-1],
		"hostile data size":      hx("00 53 75 b0 7f ff ff ff 00"),
		"hostile sequence count": hx("00 53 76 d0 00 00 00 08 7f ff ff ff 40 40 40 40"),
	} {
		if _, err := ParseMessage(in); err == nil {
			t.Errorf("%s: parsed", name)
		} else if strings.Contains(name, "after") && !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestAppendMessageChecked(t *testing.T) {
	_, err := AppendMessageChecked(nil, &Message{ApplicationProperties: encoding.Map{{Key: "f", Value: struct{}{}}}})
	if !errors.Is(err, encoding.ErrUnsupported) {
		t.Errorf("unsupported property: %v", err)
	}
	_, err = AppendMessageChecked(nil, &Message{Properties: &MessageProperties{MessageID: 5}})
	if !errors.Is(err, encoding.ErrUnsupported) {
		t.Errorf("int message-id: %v", err)
	}
	b, err := AppendMessageChecked(nil, &Message{BodyKind: BodySequence, Value: "x"})
	if !errors.Is(err, encoding.ErrUnsupported) {
		t.Errorf("sequence of a string: %v", err)
	}
	if _, err := ParseMessage(b); err != nil {
		t.Errorf("output does not parse: %v", err)
	}
}

// benchMessage is a typical 1 KiB message: a header, properties with a
// string message-id, and one data section.
func benchMessage() *Message {
	return &Message{
		Header: &MessageHeader{Durable: true, Priority: 4},
		Properties: &MessageProperties{MessageID: "ID:5f0c2a1e-0001", To: ptr("queue.orders"),
			ContentType: "application/octet-stream", CreationTime: time.UnixMilli(1700000000000).UTC()},
		BodyKind: BodyData,
		Data:     [][]byte{bytes.Repeat([]byte("x"), 1024)},
	}
}

func benchTransfer() *Transfer {
	return &Transfer{Handle: 1, DeliveryID: ptr(uint32(1000)), DeliveryTag: []byte{0, 0, 3, 232},
		MessageFormat: ptr(uint32(0)), Settled: ptr(false)}
}

func BenchmarkDecodeTransferMessage(b *testing.B) {
	frame := Append(nil, TypeAMQP, 0, benchTransfer(), AppendMessage(nil, benchMessage()))
	body := frame[8:]
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		perf, payload, err := Decode(TypeAMQP, body)
		if err != nil {
			b.Fatal(err)
		}
		m, err := ParseMessage(payload)
		if err != nil || perf.(*Transfer).Handle != 1 || len(m.Data[0]) != 1024 {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendTransferMessage(b *testing.B) {
	t, m := benchTransfer(), benchMessage()
	var msg, frame []byte
	b.ReportAllocs()
	for b.Loop() {
		msg = AppendMessage(msg[:0], m)
		frame = Append(frame[:0], TypeAMQP, 0, t, msg)
	}
	b.SetBytes(int64(len(frame)))
}

func TestAllocations(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts")
	}
	frame := Append(nil, TypeAMQP, 0, benchTransfer(), AppendMessage(nil, benchMessage()))
	dec := testing.AllocsPerRun(100, func() {
		perf, payload, _ := Decode(TypeAMQP, frame[8:])
		_ = perf
		ParseMessage(payload)
	})
	// The transfer, the message, the properties' strings, the boxed
	// message-id string.
	if dec > 4 {
		t.Errorf("decoding a transfer and its message: %v allocations", dec)
	}
	tr, m := benchTransfer(), benchMessage()
	buf := make([]byte, 0, 4096)
	enc := testing.AllocsPerRun(100, func() {
		msg := AppendMessage(buf[:0], m)
		Append(msg[len(msg):], TypeAMQP, 0, tr, msg)
	})
	if enc != 0 {
		t.Errorf("encoding a transfer and its message: %v allocations", enc)
	}
	if n := testing.AllocsPerRun(100, func() { PerformativeSize(tr) }); n != 0 {
		t.Errorf("PerformativeSize: %v allocations", n)
	}
}

// Sym is a shorthand for encoding.Symbol in tests.
type Sym = encoding.Symbol

// mapOf builds a map from alternating keys and values.
func mapOf(kv ...any) encoding.Map {
	var m encoding.Map
	for i := 0; i+1 < len(kv); i += 2 {
		m = append(m, encoding.MapEntry{Key: kv[i], Value: kv[i+1]})
	}
	return m
}

package frames

import (
	"bytes"
	"math"
	"reflect"
	"testing"
)

// hasNaN reports whether v holds a NaN anywhere. NaN != NaN defeats
// reflect.DeepEqual; the byte comparisons still cover such values.
func hasNaN(v any) bool { return valueHasNaN(reflect.ValueOf(v), 0) }

func valueHasNaN(v reflect.Value, depth int) bool {
	if depth > 100 {
		return false
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		return math.IsNaN(v.Float())
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && valueHasNaN(v.Elem(), depth+1)
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if valueHasNaN(v.Index(i), depth+1) {
				return true
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if valueHasNaN(v.Field(i), depth+1) {
				return true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if valueHasNaN(it.Value(), depth+1) {
				return true
			}
		}
	}
	return false
}

// seedFrames are realistic frame bodies for the fuzzers' seed corpora.
func seedFrames() (types []uint8, frameBodies [][]byte) {
	for _, tc := range bodies {
		var payload []byte
		if _, ok := tc.body.(*Transfer); ok {
			payload = AppendMessage(nil, benchMessage())
		}
		frame := Append(nil, tc.frameType, 0, tc.body, payload)
		types = append(types, tc.frameType)
		frameBodies = append(frameBodies, frame[HeaderSize:])
	}
	return types, frameBodies
}

// FuzzDecodeFrame decodes arbitrary frame bodies. Whatever decodes must
// encode and decode again to an equal performative and payload, and encode
// again to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	types, frameBodies := seedFrames()
	for i := range types {
		f.Add(types[i], frameBodies[i])
	}
	f.Fuzz(func(t *testing.T, frameType uint8, body []byte) {
		b1, p1, err := Decode(frameType, body)
		if err != nil || b1 == nil {
			return
		}
		frame1 := Append(nil, frameType, 0, b1, p1)
		if n := PerformativeSize(b1); n != len(frame1)-HeaderSize-len(p1) {
			t.Fatalf("PerformativeSize %d, encoded %d", n, len(frame1)-HeaderSize-len(p1))
		}
		b2, p2, err := Decode(frameType, frame1[HeaderSize:])
		if err != nil {
			t.Fatalf("decoding the re-encoding of %#v: %v", b1, err)
		}
		if !bytes.Equal(p1, p2) {
			t.Fatalf("payload %q became %q", p1, p2)
		}
		if !reflect.DeepEqual(b1, b2) && !hasNaN(b1) {
			t.Fatalf("round trip: %#v became %#v", b1, b2)
		}
		if frame2 := Append(nil, frameType, 0, b2, p2); !bytes.Equal(frame1, frame2) {
			t.Fatalf("re-encoding is not stable:\n% x\n% x", frame1, frame2)
		}
	})
}

// FuzzParseMessage parses arbitrary messages. Whatever parses must encode
// and parse again to an equal message, both from the raw sections and from
// the decoded ones.
func FuzzParseMessage(f *testing.F) {
	f.Add(AppendMessage(nil, benchMessage()))
	f.Add(AppendMessage(nil, &Message{
		Header:                &MessageHeader{Durable: true, Priority: 9},
		Properties:            fullProps,
		ApplicationProperties: mapOf("color", "blue", "n", int64(3)),
		MessageAnnotations:    mapOf(Sym("x-opt-jms-dest"), int8(1)),
		BodyKind:              BodyValue,
		Value:                 mapOf("k", []any{1.5, nil}),
	}))
	f.Add(AppendMessage(nil, &Message{BodyKind: BodySequence, Value: []any{"a", uint32(2)}}))
	f.Add(AppendMessage(nil, &Message{BodyKind: BodyValue, Value: (&Discharge{TxnID: []byte{1}}).Described()}))
	f.Fuzz(func(t *testing.T, data []byte) {
		m1, err := ParseMessage(data)
		if err != nil {
			return
		}
		// From the raw sections.
		b1 := AppendMessage(nil, m1)
		m2, err := ParseMessage(b1)
		if err != nil {
			t.Fatalf("parsing the re-encoding % x: %v", b1, err)
		}
		if !reflect.DeepEqual(m1, m2) && !hasNaN(m1) {
			t.Fatalf("round trip: %#v became %#v", m1, m2)
		}
		if b2 := AppendMessage(nil, m2); !bytes.Equal(b1, b2) {
			t.Fatalf("re-encoding is not stable:\n% x\n% x", b1, b2)
		}
		// From the decoded sections.
		m1.RawMessageAnnotations, m1.RawApplicationProperties, m1.RawBody = nil, nil, nil
		b3 := AppendMessage(nil, m1)
		m3, err := ParseMessage(b3)
		if err != nil {
			t.Fatalf("parsing the encoding of the decoded sections % x: %v", b3, err)
		}
		m3.RawMessageAnnotations, m3.RawApplicationProperties, m3.RawBody = nil, nil, nil
		if !reflect.DeepEqual(m1, m3) && !hasNaN(m1) {
			t.Fatalf("round trip from decoded sections: %#v became %#v", m1, m3)
		}
		if b4 := AppendMessage(nil, m3); !bytes.Equal(b3, b4) {
			t.Fatalf("encoding from decoded sections is not stable:\n% x\n% x", b3, b4)
		}
	})
}

package frames

import (
	"bytes"
	"testing"
)

func TestLocateData(t *testing.T) {
	to := "q"
	body := bytes.Repeat([]byte("x"), 70000) // vbin32
	m := &Message{Header: &MessageHeader{Durable: true, Priority: 4}, Properties: &MessageProperties{To: &to},
		BodyKind: BodyData, Data: [][]byte{body}}
	b := AppendMessage(nil, m)
	state, head, start, n := LocateData(b)
	if state != DataFound || n != uint32(len(body)) || !bytes.Equal(b[start:start+int(n)], body) {
		t.Fatalf("LocateData: %d head %d start %d n %d", state, head, start, n)
	}
	pm, err := ParseMessage(b[:head])
	if err != nil || pm.BodyKind != BodyNone || *pm.Properties.To != "q" {
		t.Fatalf("head: %v %+v", err, pm)
	}
	// The same start, encoded by AppendDataHeader.
	if got := AppendDataHeader(nil, n); !bytes.Equal(got, b[head:start]) {
		t.Fatalf("AppendDataHeader % x, want % x", got, b[head:start])
	}
	for cut := 0; cut < start; cut++ {
		if s, _, _, _ := LocateData(b[:cut]); s != DataNeedMore {
			t.Fatalf("cut at %d: %d", cut, s)
		}
	}
	// A small data section (vbin8) and an amqp-value are read whole.
	m.Data = [][]byte{[]byte("small")}
	if s, _, _, _ := LocateData(AppendMessage(nil, m)); s != DataNotStreamable {
		t.Fatalf("vbin8: %d", s)
	}
	m.BodyKind, m.Data, m.Value = BodyValue, nil, string(body)
	if s, _, _, _ := LocateData(AppendMessage(nil, m)); s != DataNotStreamable {
		t.Fatalf("amqp-value: %d", s)
	}
}

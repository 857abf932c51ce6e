package amqp_test

import (
	"testing"
	"time"

	"github.com/junctionmq/junction/amqp"
	"github.com/junctionmq/junction/amqp/internal/encoding"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
)

// FuzzConn feeds arbitrary frames to a whole connection, after a valid
// header and open, through the real server and broker: whatever
// arrives, the connection must end (no hang, no panic) once the client
// stops, and the broker must keep serving others. Seeds are realistic
// frame sequences.
func FuzzConn(f *testing.F) {
	settled, unsettled := true, false
	msg := frames.AppendMessage(nil, &frames.Message{
		Header:                &frames.MessageHeader{Durable: true, Priority: 4},
		Properties:            &frames.MessageProperties{MessageID: "m1", To: addr("q")},
		ApplicationProperties: encoding.Map{{Key: "k", Value: "v"}},
		BodyKind:              frames.BodyData, Data: [][]byte{[]byte("hi")},
	})
	seq := func(bodies ...frames.Body) []byte {
		var b []byte
		for _, body := range bodies {
			var payload []byte
			if _, ok := body.(*frames.Transfer); ok {
				payload = msg
			}
			b = frames.Append(b, frames.TypeAMQP, 0, body, payload)
		}
		return b
	}
	begin := &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100}
	f.Add(seq(begin,
		&frames.Attach{Name: "s", Handle: 0, Role: frames.RoleSender, InitialDeliveryCount: u32(0), Source: &frames.Source{}, Target: &frames.Target{Address: addr("q")}},
		&frames.Transfer{Handle: 0, DeliveryID: u32(0), DeliveryTag: []byte{0}, Settled: &unsettled},
		&frames.Transfer{Handle: 0, DeliveryID: u32(1), DeliveryTag: []byte{1}, Settled: &settled, More: true},
		&frames.Transfer{Handle: 0}))
	f.Add(seq(begin,
		&frames.Attach{Name: "r", Handle: 1, Role: frames.RoleReceiver, Source: &frames.Source{Address: addr("topic://t"), Durable: 2, ExpiryPolicy: "never",
			Filter: map[encoding.Symbol]*encoding.Described{"sel": {Descriptor: frames.SelectorFilterCode, Value: "a = 1"}}}, Target: &frames.Target{}},
		&frames.Flow{IncomingWindow: 10, OutgoingWindow: 10, Handle: u32(1), DeliveryCount: u32(0), LinkCredit: u32(10), Drain: true},
		&frames.Disposition{Role: frames.RoleReceiver, First: 0, Last: u32(100), Settled: true, State: &frames.Modified{DeliveryFailed: true}},
		&frames.Detach{Handle: 1, Closed: true},
		&frames.End{}))
	f.Add(seq(begin,
		&frames.Attach{Name: "c", Handle: 0, Role: frames.RoleSender, InitialDeliveryCount: u32(0), Source: &frames.Source{}, Coordinator: &frames.Coordinator{}},
		&frames.Transfer{Handle: 0, DeliveryID: u32(0), DeliveryTag: []byte{0}, Settled: &unsettled, Aborted: true},
		&frames.Close{}))
	f.Add([]byte{0, 0, 0, 8, 2, 0, 0, 0})

	b, err := core.New(core.Config{ExpiryScanInterval: -1})
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	srv := amqp.New(amqp.Config{MaxFrameSize: 64 << 10, HandshakeTimeout: time.Second, WriteTimeout: time.Second}, b)
	open := frames.Append(append([]byte(nil), frames.ProtoAMQP[:]...), frames.TypeAMQP, 0, &frames.Open{ContainerID: "fuzz", MaxFrameSize: 1 << 16}, nil)
	f.Fuzz(func(t *testing.T, input []byte) {
		testserve.Feed(t, srv.ServeConn, open, input)
	})
}

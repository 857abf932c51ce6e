package stomp_test

import (
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/stomp"
)

// FuzzConn feeds arbitrary bytes to a whole connection, after a valid
// CONNECT, through the real server and broker: whatever arrives, the
// connection must end (no hang, no panic) once the client stops, and the
// broker must keep serving others.
func FuzzConn(f *testing.F) {
	for _, s := range []string{
		"SEND\ndestination:/queue/a\n\nhi\x00",
		"SUBSCRIBE\ndestination:/queue/a\nid:1\nack:client\n\n\x00SEND\ndestination:/queue/a\n\nx\x00ACK\nid:1-1\n\n\x00",
		"BEGIN\ntransaction:t\n\n\x00SEND\ndestination:/topic/t\ntransaction:t\npersistent:true\n\n\x00COMMIT\ntransaction:t\n\n\x00",
		"SUBSCRIBE\ndestination:/topic/a.#\nid:x\n\n\x00SEND\ndestination:/topic/a.b\nJMSXGroupID:g\npriority:9\n\n\x00",
		"NACK\nid:1-1\n\n\x00UNSUBSCRIBE\nid:nope\n\n\x00",
		"SUBSCRIBE\ndestination:/queue/s\nid:2\nselector:colour = 'red' AND JMSPriority > 4\n\n\x00SEND\ndestination:/queue/s\ncolour:red\npriority:9\n\n\x00",
		"SUBSCRIBE\ndestination:/topic/t\nid:3\nselector:((a\n\n\x00",
		"SEND\ndestination:/queue/a\ncontent-length:3\n\na\x00b\x00",
		"DISCONNECT\nreceipt:1\n\n\x00",
		"\n\n\nSEND\ndestination:/queue/a\nAMQ_SCHEDULED_DELAY:1\nexpires:1\n\n\x00",
	} {
		f.Add([]byte(s))
	}
	b, err := core.New(core.Config{ExpiryScanInterval: -1})
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	srv := stomp.New(stomp.Config{MaxFrameSize: 64 << 10, ConnectTimeout: time.Second, WriteTimeout: time.Second}, b)
	f.Fuzz(func(t *testing.T, input []byte) {
		testserve.Feed(t, srv.ServeConn, []byte("CONNECT\naccept-version:1.0,1.1,1.2\nhost:/\n\n\x00"), input)
	})
}

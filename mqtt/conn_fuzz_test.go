package mqtt_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/mqtt"
)

// FuzzConn feeds arbitrary bytes, after a valid CONNECT, through a whole
// MQTT connection: mochi's decoder and Junction's bridge hooks. The
// connection must end once the client stops (no hang, no panic).
func FuzzConn(f *testing.F) {
	for _, s := range []string{
		"\x30\x07\x00\x03a/b" + "hi",               // PUBLISH QoS 0
		"\x32\x09\x00\x03a/b\x00\x01" + "hi",       // PUBLISH QoS 1
		"\x82\x08\x00\x01\x00\x03a/#\x01",          // SUBSCRIBE QoS 1
		"\x82\x12\x00\x02\x00\x0d$share/g/a/b\x01", // shared SUBSCRIBE
		"\xa2\x07\x00\x03\x00\x03a/#",              // UNSUBSCRIBE
		"\x31\x07\x00\x03a/b" + "rr",               // retained
		"\x40\x02\x00\x01",                         // PUBACK
		"\xc0\x00",                                 // PINGREQ
		"\xe0\x00",                                 // DISCONNECT
		"\x30\x07\x00\x03a/bhi\x30\xff\xff\x04",    // a PUBLISH, then one over the max packet size
	} {
		f.Add([]byte(s))
	}
	b, err := core.New(core.Config{ExpiryScanInterval: -1})
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	srv, err := mqtt.New(mqtt.Config{MaxPacketSize: 64 << 10}, b)
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close()
	// CONNECT, MQTT 3.1.1, clean session false (so core serves the
	// subscriptions too), keep-alive 60, client id "fz".
	connect := []byte{0x10, 0x0e, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x00, 0x00, 0x3c, 0x00, 0x02, 'f', 'z'}
	f.Fuzz(func(t *testing.T, input []byte) {
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ServeConn(context.Background(), server)
		}()
		go io.Copy(io.Discard, client)
		client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		client.Write(connect)
		client.Write(input)
		client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("connection did not end after the client closed (input %q)", input)
		}
	})
}

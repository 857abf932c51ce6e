package mqtt_test

import (
	"testing"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/mqtt"
)

// FuzzConn feeds arbitrary bytes, after a valid CONNECT, through a whole
// MQTT connection: the packet reader, mochi's decoders, and the
// connection's handling of every packet (publishes routed into core,
// subscriptions as core consumers, acknowledgements, the session's
// records). The first byte of the input picks the CONNECT: MQTT 3.1.1
// with a persistent session when even, MQTT 5 with a session expiry
// interval (so that properties are decoded too) when odd. The
// connection must end once the client stops (no hang, no panic).
func FuzzConn(f *testing.F) {
	for _, s := range []string{
		"\x00\x30\x07\x00\x03a/b" + "hi",                                   // PUBLISH QoS 0
		"\x00\x32\x09\x00\x03a/b\x00\x01" + "hi",                           // PUBLISH QoS 1
		"\x00\x34\x09\x00\x03a/b\x00\x02" + "hi",                           // PUBLISH QoS 2
		"\x00\x62\x02\x00\x02",                                             // PUBREL
		"\x00\x82\x08\x00\x01\x00\x03a/#\x01",                              // SUBSCRIBE QoS 1
		"\x00\x82\x12\x00\x02\x00\x0d$share/g/a/b\x01",                     // shared SUBSCRIBE
		"\x00\xa2\x07\x00\x03\x00\x03a/#",                                  // UNSUBSCRIBE
		"\x00\x31\x07\x00\x03a/b" + "rr",                                   // retained
		"\x00\x40\x02\x00\x01",                                             // PUBACK
		"\x00\x50\x02\x00\x01",                                             // PUBREC
		"\x00\xc0\x00",                                                     // PINGREQ
		"\x00\xe0\x00",                                                     // DISCONNECT
		"\x00\x30\x07\x00\x03a/bhi\x30\xff\xff\x04",                        // a PUBLISH, then one over the max packet size
		"\x01\x30\x0b\x00\x03a/b\x05\x23\x00\x01\x01\x02hi",                // MQTT 5 PUBLISH with a topic alias and a format indicator
		"\x01\x30\x06\x00\x00\x03\x23\x00\x01hi",                           // MQTT 5 PUBLISH by alias only
		"\x01\x82\x0a\x00\x01\x02\x0b\x05\x00\x03a/#\x2d",                  // MQTT 5 SUBSCRIBE with an identifier and options
		"\x01\x82\x05\x00\x01\x00\x00\x01",                                 // MQTT 5 SUBSCRIBE cut short
		"\x01\xe0\x06\x04\x05\x11\x00\x00\x00\x0a",                         // MQTT 5 DISCONNECT with will, new expiry
		"\x01\x32\x10\x00\x03a/b\x00\x01\x08\x26\x00\x01k\x00\x01vpayload", // user property
	} {
		f.Add([]byte(s))
	}
	b, err := core.New(core.Config{ExpiryScanInterval: -1})
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	srv, err := mqtt.New(mqtt.Config{MaxPacketSize: 64 << 10, SysInterval: -1}, b)
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close()
	// CONNECT, MQTT 3.1.1, clean session false, keep-alive 60, client id
	// "fz"; and MQTT 5, clean start, session expiry 10, client id "fz5".
	connect4 := []byte{0x10, 0x0e, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x00, 0x00, 0x3c, 0x00, 0x02, 'f', 'z'}
	connect5 := []byte{0x10, 0x15, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x05, 0x02, 0x00, 0x3c,
		0x05, 0x11, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x03, 'f', 'z', '5'}
	f.Fuzz(func(t *testing.T, input []byte) {
		if len(input) == 0 {
			return
		}
		connect := connect4
		if input[0]&1 == 1 {
			connect = connect5
		}
		testserve.Feed(t, srv.ServeConn, connect, input[1:])
	})
}

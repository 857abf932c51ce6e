package mqtt_test

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/mqtt"
)

// BenchmarkConnectDisconnect measures an MQTT 3.1.1 connection's life,
// one at a time over loopback: dial, CONNECT (clean session, a new
// client id), CONNACK, DISCONNECT, and the broker's close (the client
// reads to EOF). Broker events are on, with nobody subscribed, as in a
// default broker. One op is one connection; the client's work is in the
// figure too.
func BenchmarkConnectDisconnect(b *testing.B) {
	br, err := core.New(core.Config{ExpiryScanInterval: -1, Events: core.EventsConfig{Enabled: true}})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	srv, err := mqtt.New(mqtt.Config{SysInterval: -1}, br)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { srv.ServeConn(ctx, nc) })
		}
	})
	b.ReportAllocs()
	var ack [4]byte
	i := 0
	for b.Loop() {
		i++
		id := "bench-" + strconv.Itoa(i)
		// CONNECT: "MQTT", level 4, clean session, keep-alive 60 s.
		vh := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, 0, byte(len(id))}, id...)
		pkt := append([]byte{0x10, byte(len(vh))}, vh...)
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		nc.Write(pkt)
		if _, err := io.ReadFull(nc, ack[:]); err != nil || ack[0] != 0x20 || ack[3] != 0 {
			b.Fatalf("CONNECT answered % x %v", ack, err)
		}
		nc.Write([]byte{0xe0, 0})
		if n, err := nc.Read(ack[:1]); err != io.EOF {
			b.Fatalf("after DISCONNECT: %d %v, want EOF", n, err)
		}
		nc.Close()
	}
}

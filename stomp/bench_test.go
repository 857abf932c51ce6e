package stomp_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/stomp"
)

// BenchmarkConnectDisconnect measures a STOMP connection's life, one at
// a time over loopback: dial, CONNECT, CONNECTED, DISCONNECT with a
// receipt, RECEIPT, and the broker's close (the client reads to EOF).
// Broker events are on, with nobody subscribed, as in a default broker.
// One op is one connection; the client's work is in the figure too.
func BenchmarkConnectDisconnect(b *testing.B) {
	br, err := core.New(core.Config{ExpiryScanInterval: -1, Events: core.EventsConfig{Enabled: true}})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	srv := stomp.New(stomp.Config{}, br)
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
	connect := []byte("CONNECT\naccept-version:1.2\nhost:/\nheart-beat:0,0\n\n\x00")
	disconnect := []byte("DISCONNECT\nreceipt:bye\n\n\x00")
	b.ReportAllocs()
	for b.Loop() {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		r := bufio.NewReaderSize(nc, 256)
		nc.Write(connect)
		if f, err := r.ReadBytes(0); err != nil || !bytes.HasPrefix(f, []byte("CONNECTED\n")) {
			b.Fatalf("CONNECT answered %q %v", f, err)
		}
		nc.Write(disconnect)
		if f, err := r.ReadBytes(0); err != nil || !bytes.HasPrefix(f, []byte("RECEIPT\n")) {
			b.Fatalf("DISCONNECT answered %q %v", f, err)
		}
		if _, err := r.ReadByte(); err != io.EOF {
			b.Fatalf("after the RECEIPT: %v, want EOF", err)
		}
		nc.Close()
	}
}

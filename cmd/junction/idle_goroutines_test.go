package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/bench/scenario"
)

// TestIdleConnectionIsOneGoroutine: an idle STOMP, MQTT or AMQP
// connection costs the broker one goroutine, on its own port and on the
// one port (whose protocol detection reads bytes ahead and replays
// them): the connection's, waiting on the socket without a read or a
// buffer (internal/inbound). A worker blocked in its read would make
// two. (Over TLS and WebSockets it is two: docs/architecture.md.)
func TestIdleConnectionIsOneGoroutine(t *testing.T) {
	cfg := testConfig(t)
	cfg.LogLevel = "warn"
	cfg.Limits.MaxConnectionsPerIP, cfg.Limits.ConnectionRatePerIP = 0, 0
	startServe(t, cfg)
	in := lastInstance
	const n = 100
	open := func(t *testing.T, proto, addr string, i int) net.Conn {
		if proto != "mqtt" {
			nc, err := scenario.OpenIdle(context.Background(), proto, addr, fmt.Sprintf("idle-%s-%d", addr, i))
			if err != nil {
				t.Fatalf("%s handshake: %v", proto, err)
			}
			return nc
		}
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		id := []byte(fmt.Sprintf("idle-%03d", i))
		// CONNECT, MQTT 3.1.1, clean session, no keep-alive.
		nc.Write(append([]byte{0x10, byte(12 + len(id)), 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 0, 0, byte(len(id))}, id...))
		var ack [4]byte
		if _, err := io.ReadFull(nc, ack[:]); err != nil || ack[0] != 0x20 || ack[3] != 0 {
			t.Fatalf("MQTT CONNACK: %x, %v", ack, err)
		}
		nc.SetDeadline(time.Time{})
		return nc
	}
	for _, c := range []struct{ proto, listener string }{
		{"stomp", "stomp"}, {"stomp", "all"}, {"mqtt", "mqtt"}, {"mqtt", "all"}, {"amqp", "amqp"}, {"amqp", "all"},
	} {
		t.Run(c.proto+" on "+c.listener, func(t *testing.T) {
			before := settledGoroutines()
			conns := make([]net.Conn, 0, n)
			defer func() {
				for _, nc := range conns {
					nc.Close()
				}
			}()
			for i := range n {
				conns = append(conns, open(t, c.proto, in.addrs[c.listener].String(), i))
			}
			// Each connection's worker returns once its handshake is
			// handled; allow a tenth more for the runtime's own.
			if got := settledGoroutines() - before; got > n+n/10 {
				t.Errorf("%d idle connections added %d goroutines, want about %d (one each)", n, got, n)
			}
		})
	}
}

// settledGoroutines is the process's goroutine count once it has held
// still for 200 ms (at most 5 s).
func settledGoroutines() int {
	last, still := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(5 * time.Second); still < 4 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if g := runtime.NumGoroutine(); g == last {
			still++
		} else {
			last, still = g, 0
		}
	}
	return last
}

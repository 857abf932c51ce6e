package websocket

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/testserve"
	"github.com/junctionmq/junction/websocket/wstest"
)

// The tests of STOMP, MQTT and AMQP over WebSockets need the three
// front-ends and core: they are in internal/e2e/websocket.

// TestShutdownForces: a handler that ignores its context is cut off
// when Shutdown's context ends, and Close waits for it.
func TestShutdownForces(t *testing.T) {
	returned := make(chan struct{})
	s := serve(t, Config{Handlers: map[string]func(context.Context, net.Conn){
		MQTT: func(_ context.Context, nc net.Conn) {
			defer close(returned)
			nc.Read(make([]byte, 1)) // ignores ctx
		},
	}})
	ws := wstest.Dial(t, s.url("/"), "mqtt")
	testserve.Eventually(t, "the session", func() bool { return s.h.Connections() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.h.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want context.DeadlineExceeded", err)
	}
	s.h.Close()
	select {
	case <-returned:
	default:
		t.Fatal("Close returned before the handler")
	}
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := ws.ReadMessage(); err == nil {
		t.Fatal("connection still open")
	}
}

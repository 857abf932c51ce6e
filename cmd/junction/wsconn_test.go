package main

import (
	"context"
	"sync"
	"testing"
	"time"

	paho5 "github.com/eclipse/paho.golang/paho"
	gws "github.com/gorilla/websocket"

	"github.com/junctionmq/junction/websocket/wstest"
)

// TestMQTT5OverWebSocketKeepsPacketsWhole: paho.golang writes an MQTT 5
// packet in several Writes, each one WebSocket message through wstest.Conn,
// and its pinger writes the first PINGREQ from its own goroutine as
// soon as the client is connected. Once, in CI under -race, that
// PINGREQ went out between a SUBSCRIBE's fixed header and the rest of
// it: the broker read a malformed SUBSCRIBE and closed the connection
// with 0x81, and the client's Subscribe waited out its 10 s
// (TestSharedWildcardSubscriptionsCheckEachConsumer/websocket). wstest.Conn
// is a sync.Locker, which paho holds across a packet's writes. Here
// interleaver forces that interleaving wherever the lock lets it: it
// holds the PINGREQ until a SUBSCRIBE has begun, and the SUBSCRIBE's
// next write until the PINGREQ is out, each for at most a second.
func TestMQTT5OverWebSocketKeepsPacketsWhole(t *testing.T) {
	in, logs := startSecure(t, testConfig(t))
	d := gws.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 10 * time.Second}
	ws, _, err := d.Dial("ws://"+in.addrs["websocket"].String()+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := &interleaver{Conn: wstest.NewConn(ws), subBegun: make(chan struct{}), pingOut: make(chan struct{})}
	c := paho5.NewClient(paho5.ClientConfig{ClientID: "ws-whole", Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx, &paho5.Connect{ClientID: "ws-whole", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(&paho5.Disconnect{})
	sa, err := c.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: "$share/g/devices/#", QoS: 1}}})
	if err != nil || len(sa.Reasons) != 1 || sa.Reasons[0] > 2 {
		t.Fatalf("subscribe: %v %+v\n%s", err, sa, logs)
	}
	select { // written after the SUBSCRIBE when that took the lock first
	case <-conn.pingOut:
	case <-time.After(10 * time.Second):
		t.Fatal("no PINGREQ was written")
	}
}

// interleaver is a wstest.Conn that puts the client's first PINGREQ inside
// its first SUBSCRIBE when the writes let it (see
// TestMQTT5OverWebSocketKeepsPacketsWhole).
type interleaver struct {
	*wstest.Conn
	subBegun chan struct{} // closed once the SUBSCRIBE's fixed header is written
	pingOut  chan struct{} // closed once the PINGREQ is written
	mu       sync.Mutex
	state    int // 0: no SUBSCRIBE yet; 1: its fixed header written; 2: past it
	pinged   bool
}

const (
	subscribeFirst = 0x82 // SUBSCRIBE, flags 0010
	pingreqFirst   = 0xc0
)

func (c *interleaver) Write(p []byte) (int, error) {
	wait := func(ch chan struct{}) {
		select {
		case <-ch:
		case <-time.After(time.Second):
		}
	}
	c.mu.Lock()
	ping := len(p) == 2 && p[0] == pingreqFirst && !c.pinged
	state := c.state
	if ping {
		c.pinged = true
	}
	c.mu.Unlock()
	switch {
	case ping:
		wait(c.subBegun)
		n, err := c.Conn.Write(p)
		close(c.pingOut)
		return n, err
	case state == 0 && len(p) > 0 && p[0] == subscribeFirst:
		n, err := c.Conn.Write(p)
		c.mu.Lock()
		c.state = 1
		c.mu.Unlock()
		close(c.subBegun)
		return n, err
	case state == 1:
		wait(c.pingOut)
		c.mu.Lock()
		c.state = 2
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

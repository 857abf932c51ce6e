package inbound

import (
	"io"
	"net"
	"testing"
	"time"
)

// replayConn replays ahead before reading the socket, as the one port's
// detection wrapper (transports.prefixConn) does.
type replayConn struct {
	net.Conn
	ahead []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.ahead) > 0 {
		n := copy(p, c.ahead)
		c.ahead = c.ahead[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *replayConn) Buffered() int     { return len(c.ahead) }
func (c *replayConn) NetConn() net.Conn { return c.Conn }

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// A connection replaying bytes read ahead is ready while it holds some,
// without the socket having anything; once they are read it is waited on
// as its socket is. A wrapper of another kind cannot be waited on.
func TestWaiterOnReplayingConn(t *testing.T) {
	server, client := tcpPair(t)
	rc := &replayConn{Conn: server, ahead: []byte("CONN")}
	var w Waiter
	if !w.Init(rc) {
		t.Fatal("Init refused a replaying TCP connection")
	}
	if !w.Ready() {
		t.Fatal("not ready with 4 bytes to replay")
	}
	waited := make(chan error, 1)
	go func() { waited <- w.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait blocked with bytes to replay")
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(rc, buf); err != nil || string(buf) != "CONN" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if w.Ready() {
		t.Fatal("ready with nothing replayed or sent")
	}
	go func() { waited <- w.Wait() }()
	select {
	case err := <-waited:
		t.Fatalf("Wait returned (%v) with nothing to read", err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := client.Write([]byte("ECT\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return once the socket had data")
	}
	if !w.Ready() {
		t.Fatal("not ready with data on the socket")
	}

	other := &replayConn{Conn: &replayConn{Conn: server}}
	if new(Waiter).Init(other) {
		t.Fatal("Init accepted a replaying connection around something other than a TCP socket")
	}
}

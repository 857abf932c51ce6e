package outbound

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/junctionmq/junction/internal/testserve"
)

// wrapped hides the *net.TCPConn as the TLS and WebSocket wrappers do.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

// fill writes to c until the kernel takes no more (the peer reads
// nothing) and returns how many bytes it took.
func fill(t *testing.T, c net.Conn) int {
	t.Helper()
	chunk := make([]byte, 64<<10)
	total := 0
	for i := 0; i < 1024; i++ {
		c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := c.Write(chunk)
		total += n
		if err != nil {
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				t.Fatalf("write: %v", err)
			}
			return total
		}
	}
	t.Fatal("the peer's kernel took 64 MiB without reading")
	return 0
}

// drain reads c until an error and returns how much it read and the
// error.
func drain(c net.Conn) (int, error) {
	buf := make([]byte, 64<<10)
	total := 0
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		n, err := c.Read(buf)
		total += n
		if err != nil {
			return total, err
		}
	}
}

func TestAbortResetsAndDropsTheSendQueue(t *testing.T) {
	client, server := testserve.Pair(t)
	written := fill(t, server)
	if err := Abort(wrapped{server}); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	read, err := drain(client)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the client read %d bytes then %v, want a reset", read, err)
	}
	// What the kernel had not delivered when the connection was aborted
	// never reaches the client.
	if read >= written {
		t.Fatalf("the client read %d bytes of the %d written: the send queue was delivered", read, written)
	}
	t.Logf("written %d bytes, delivered %d before the reset", written, read)
}

// The contrast: a plain Close delivers everything queued, then EOF.
func TestCloseDeliversTheSendQueue(t *testing.T) {
	client, server := testserve.Pair(t)
	written := fill(t, server)
	server.Close()
	read, err := drain(client)
	if err != io.EOF || read != written {
		t.Fatalf("after Close the client read %d of %d bytes, then %v", read, written, err)
	}
}

func TestAbortWithoutTCP(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	if err := Abort(wrapped{a}); err != nil {
		t.Fatalf("Abort of a pipe: %v", err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("write after Abort: %v, want closed", err)
	}
}

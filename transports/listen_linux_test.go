package transports_test

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/junctionmq/junction/transports"
)

// A connection accepted by a Listen listener has the keep-alive probes
// Go gives accepted connections by default, inherited from the listening
// socket, and TCP_NODELAY; it carries data both ways.
func TestListenKeepAliveInherited(t *testing.T) {
	l, err := transports.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name       string
		level, opt int
		v          int
	}{
		{"SO_KEEPALIVE", syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, 15},
		{"TCP_KEEPINTVL", syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, 15},
		{"TCP_KEEPCNT", syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, 9},
		{"TCP_NODELAY", syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1},
	}
	rc.Control(func(fd uintptr) {
		for _, w := range want {
			v, err := syscall.GetsockoptInt(int(fd), w.level, w.opt)
			if err != nil || v != w.v {
				t.Errorf("%s = %d, %v; want %d", w.name, v, err, w.v)
			}
		}
	})
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 4)
	if _, err := c.Read(b); err != nil || string(b) != "ping" {
		t.Fatalf("read %q, %v", b, err)
	}
}

package transports

import (
	"net"
	"syscall"
	"time"
)

func listenConfig() *net.ListenConfig {
	return &net.ListenConfig{KeepAlive: -1, Control: setKeepAlive}
}

// setKeepAlive sets the keep-alive options on a listening socket.
func setKeepAlive(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		for _, o := range [...]struct{ level, opt, v int }{
			{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
			{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, int(keepAliveIdle / time.Second)},
			{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, int(keepAliveInterval / time.Second)},
			{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, keepAliveCount},
		} {
			if serr = syscall.SetsockoptInt(int(fd), o.level, o.opt, o.v); serr != nil {
				return
			}
		}
	})
	if err != nil {
		return err
	}
	return serr
}

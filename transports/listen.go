package transports

import (
	"context"
	"net"
	"time"
)

// Keep-alive probes of the connections a Listen listener accepts: Go's
// defaults for accepted connections (net.ListenConfig.KeepAlive zero).
const (
	keepAliveIdle     = 15 * time.Second
	keepAliveInterval = 15 * time.Second
	keepAliveCount    = 9
)

// Listen announces on the TCP address addr, like net.Listen, with the
// keep-alive probes Go gives every accepted connection by default. On
// Linux they are set once, on the listening socket, whose options the
// connections it accepts inherit, instead of with four system calls on
// each accepted connection (a fifth of the system calls of accepting
// one); elsewhere Listen is net.Listen.
func Listen(addr string) (net.Listener, error) {
	return listenConfig().Listen(context.Background(), "tcp", addr)
}

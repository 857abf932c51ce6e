//go:build !linux

package transports

import "net"

func listenConfig() *net.ListenConfig { return &net.ListenConfig{} }

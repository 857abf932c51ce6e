package stomp

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3/frame"
	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/core/guard"
	"github.com/junctionmq/junction/internal/inbound"
	"github.com/junctionmq/junction/stomp/internal/wire"
)

// Config configures a Server. Zero fields take the defaults given.
type Config struct {
	// MaxFrameSize bounds a whole frame, headers and body. Default 10 MiB.
	MaxFrameSize int
	// MaxMessageSize bounds a SEND whose body the broker streams to the
	// large-message store as it arrives (one above the broker's
	// large-message threshold; see core.Session.ReceiveBody), headers
	// and body. Default 100 MiB, ActiveMQ's maximum frame size. A broker
	// that cannot stream (no large-message store) bounds every frame by
	// MaxFrameSize.
	MaxMessageSize int
	// MaxHeaders bounds the number of headers of a frame. Default 1000.
	MaxHeaders int
	// MaxHeaderLength bounds one command or header line. Default 8 KiB.
	MaxHeaderLength int
	// HeartBeatSend is how often the server offers to send heart-beats;
	// HeartBeatReceive is how often it asks the client for them. STOMP takes the larger of what one side
	// can do and the other wants, so these are floors: each direction
	// gets what the client asks, but never faster. Default 1s each, as
	// fast as ActiveMQ and RabbitMQ honour; negative disables.
	HeartBeatSend    time.Duration
	HeartBeatReceive time.Duration
	// HeartBeatGrace multiplies the negotiated client interval before a
	// silent client is disconnected. Default 1.5 (ActiveMQ's).
	HeartBeatGrace float64
	// ConnectTimeout bounds the wait for the CONNECT frame. Default 10s.
	ConnectTimeout time.Duration
	// PreAuthMaxFrameSize bounds a frame before the client has logged in
	// (its CONNECT, which needs no body), when smaller than MaxFrameSize;
	// a larger one gets an ERROR and the connection is closed. Default
	// 64 KiB. The bytes a client sends before it has logged in are also
	// charged to the broker's pre-authentication budget
	// (core.Config.PreAuthBudget); a client the budget has no room for
	// gets ERROR "server busy".
	PreAuthMaxFrameSize int
	// FrameTimeout and FrameMinRate bound how long one frame may take
	// once its first byte has arrived: FrameTimeout, plus one second per
	// FrameMinRate bytes of it received (see core/guard). A client past
	// it gets ERROR "frame timeout" and is closed. Defaults 30s and
	// 4 KiB/s; a negative FrameTimeout disables the bound.
	FrameTimeout time.Duration
	FrameMinRate int64
	// MaxSubscriptions bounds the subscriptions open on one connection; a
	// SUBSCRIBE past it gets an ERROR and the connection is closed.
	// Default 1000; negative means no limit.
	MaxSubscriptions int
	// WriteTimeout bounds one socket write; a client that does not read
	// for this long is disconnected. Default 30s.
	WriteTimeout time.Duration
	// DefaultPrefetch is a subscription's window of unacked messages when
	// it does not set activemq.prefetchSize. Default 1000.
	DefaultPrefetch int
	// ServerName is sent in CONNECTED's server header.
	ServerName string
	// Logger for connection events, at debug level. Zero logs nothing.
	Logger zerolog.Logger
}

// DefaultMaxMessageSize is the default Config.MaxMessageSize.
const DefaultMaxMessageSize = 100 << 20

func (c Config) withDefaults() Config {
	if c.MaxFrameSize <= 0 {
		c.MaxFrameSize = 10 << 20
	}
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.MaxHeaders <= 0 {
		c.MaxHeaders = 1000
	}
	if c.MaxHeaderLength <= 0 {
		c.MaxHeaderLength = 8 << 10
	}
	if c.HeartBeatSend == 0 {
		c.HeartBeatSend = time.Second
	}
	if c.HeartBeatReceive == 0 {
		c.HeartBeatReceive = time.Second
	}
	if c.HeartBeatSend < 0 {
		c.HeartBeatSend = 0
	}
	if c.HeartBeatReceive < 0 {
		c.HeartBeatReceive = 0
	}
	if c.HeartBeatGrace < 1 {
		c.HeartBeatGrace = 1.5
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.PreAuthMaxFrameSize <= 0 {
		c.PreAuthMaxFrameSize = 64 << 10
	}
	if c.FrameTimeout == 0 {
		c.FrameTimeout = 30 * time.Second
	}
	if c.FrameTimeout < 0 {
		c.FrameTimeout = 0
	}
	if c.FrameMinRate <= 0 {
		c.FrameMinRate = 4 << 10
	}
	if c.MaxSubscriptions == 0 {
		c.MaxSubscriptions = 1000
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.DefaultPrefetch <= 0 {
		c.DefaultPrefetch = 1000
	}
	if c.ServerName == "" {
		c.ServerName = "Junction"
	}
	return c
}

// preAuthLimits are the reader's limits until the client has logged in.
func (c Config) preAuthLimits() wire.Limits {
	return wire.Limits{MaxFrameSize: min(c.MaxFrameSize, c.PreAuthMaxFrameSize), MaxHeaders: c.MaxHeaders, MaxHeaderLength: c.MaxHeaderLength}
}

func (c Config) frameRule() guard.Rule {
	return guard.Rule{Timeout: c.FrameTimeout, MinRate: c.FrameMinRate}
}

// Server serves STOMP connections over a broker. Its handler,
// ServeConn, plugs into any listener.
type Server struct {
	cfg    Config
	broker *core.Broker
	nextID atomic.Uint64

	mu    sync.Mutex
	conns map[*conn]struct{} // guarded by mu
	// watch stops the connections of a ServeConn context that ends.
	watch inbound.Watch[*conn]
	// workers run the connections' work (conn.inWorker).
	workers inbound.Workers
}

// New returns a server for broker b.
func New(cfg Config, b *core.Broker) *Server {
	s := &Server{cfg: cfg.withDefaults(), broker: b, conns: make(map[*conn]struct{})}
	s.watch.Stop = (*conn).shutdown
	return s
}

// ServeConn serves one client connection until it ends or ctx is
// cancelled (the client then gets an ERROR saying the server is shutting
// down). It closes nc before returning.
func (s *Server) ServeConn(ctx context.Context, nc net.Conn) {
	c := &conn{s: s, nc: nc, ctx: ctx}
	// This goroutine only waits (see conn.serve); the work runs in
	// workers.
	c.serve()
	if !c.closed {
		c.inWorker(workClose)
	}
}

// Connections returns the number of open connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Detect reports whether prefix, the first bytes of a connection, looks
// like STOMP: a CONNECT or STOMP frame, possibly after heart-beat EOLs.
// A prefix too short to tell returns false.
func Detect(prefix []byte) bool {
	p := bytes.TrimLeft(prefix, "\r\n")
	for _, cmd := range [][]byte{[]byte("CONNECT\n"), []byte("CONNECT\r\n"), []byte("STOMP\n"), []byte("STOMP\r\n")} {
		if bytes.HasPrefix(p, cmd) {
			return true
		}
	}
	return false
}

// Reject tells a client turned away by a connection limit why, with an
// ERROR frame, before the listener closes nc.
func (s *Server) Reject(nc net.Conn) {
	f := frame.New(frame.ERROR, frame.Message, "too many connections", frame.ContentType, "text/plain")
	f.Body = []byte("The broker's connection limit is reached; try again later.")
	nc.Write(wire.Encode(nil, f, wire.V12))
}

package amqp

import (
	"bytes"
	"context"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/amqp/internal/encoding"
	"github.com/junctionmq/junction/amqp/internal/frames"
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/internal/inbound"
)

// Config configures a Server. Zero fields take the defaults given.
type Config struct {
	// MaxFrameSize is the largest frame accepted, advertised in open.
	// Default 256 KiB; at least 512 bytes.
	MaxFrameSize uint32
	// MaxMessageSize bounds a message reassembled from transfer frames.
	// Default 64 MiB.
	MaxMessageSize int
	// MaxLargeMessageSize bounds a message whose body the broker streams
	// to the large-message store as its frames arrive (a body of one
	// data section above the broker's large-message threshold; see
	// stream.go), and is the max-message-size advertised on attach when
	// the broker can stream. Default 1 GiB; at most 4 GiB, a data
	// section's limit.
	MaxLargeMessageSize int
	// ChannelMax is the highest session channel accepted. Default 255.
	ChannelMax uint16
	// HandleMax is the highest link handle accepted per session. Default
	// 1023.
	HandleMax uint32
	// MaxLinks bounds the links (consumers and producers) attached at once
	// on one connection, across its sessions; an attach past it is
	// refused with amqp:resource-limit-exceeded. Default 1000; negative
	// means no limit.
	MaxLinks int
	// IdleTimeout closes a connection from which nothing arrives for this
	// long. Half of it is advertised in open, so that a peer sending
	// heartbeats at half its peer's timeout (as the spec suggests) stays
	// well inside it. Default 60s; negative disables.
	IdleTimeout time.Duration
	// HandshakeTimeout bounds the protocol headers, SASL and open.
	// Default 10s.
	HandshakeTimeout time.Duration
	// FrameTimeout and FrameMinRate bound how long one frame may take
	// once its first byte has arrived: FrameTimeout, plus one second per
	// FrameMinRate bytes of it received (see core/guard). Past it the
	// connection is closed with amqp:resource-limit-exceeded. Defaults
	// 30s and 4 KiB/s; a negative FrameTimeout disables the bound.
	FrameTimeout time.Duration
	FrameMinRate int64
	// WriteTimeout bounds one socket write; a peer that does not read for
	// this long is disconnected. Default 30s.
	WriteTimeout time.Duration
	// LinkCredit is the credit granted to a client's sender link; it is
	// topped up when less than a third remains. Default 1000.
	LinkCredit uint32
	// SessionWindow is the incoming window (in transfer frames) granted
	// to each session. Default 5000.
	SessionWindow uint32
	// RequireSASL refuses connections that skip SASL. By default a client
	// may skip it when the broker accepts anonymous clients.
	RequireSASL bool
	// ContainerID is the broker's container-id in open. Default
	// "junction".
	ContainerID string
	// Product and Version are sent as open properties.
	Product, Version string
	// Logger for connection events, at debug level. Zero logs nothing.
	Logger zerolog.Logger
}

// DefaultMaxLargeMessageSize is the default Config.MaxLargeMessageSize.
const DefaultMaxLargeMessageSize = 1 << 30

func (c Config) withDefaults() Config {
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = 256 << 10
	}
	c.MaxFrameSize = max(c.MaxFrameSize, frames.MinMaxFrameSize)
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = 64 << 20
	}
	if c.MaxLargeMessageSize <= 0 {
		c.MaxLargeMessageSize = DefaultMaxLargeMessageSize
	}
	c.MaxLargeMessageSize = min(c.MaxLargeMessageSize, math.MaxUint32)
	if c.ChannelMax == 0 {
		c.ChannelMax = 255
	}
	if c.HandleMax == 0 {
		c.HandleMax = 1023
	}
	if c.MaxLinks == 0 {
		c.MaxLinks = 1000
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 60 * time.Second
	}
	if c.IdleTimeout < 0 {
		c.IdleTimeout = 0
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 10 * time.Second
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
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.LinkCredit == 0 {
		c.LinkCredit = 1000
	}
	if c.SessionWindow == 0 {
		c.SessionWindow = 5000
	}
	if c.ContainerID == "" {
		c.ContainerID = "junction"
	}
	if c.Product == "" {
		c.Product = "Junction"
	}
	return c
}

// Server serves AMQP 1.0 connections over a broker. Its handler,
// ServeConn, plugs into any listener.
type Server struct {
	cfg    Config
	broker *core.Broker
	nextID atomic.Uint64

	mu    sync.Mutex
	conns map[*conn]struct{} // guarded by mu
	// watch closes the connections of a ServeConn context that ends.
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
// cancelled (the client then gets a close with amqp:connection:forced).
// It closes nc before returning.
func (s *Server) ServeConn(ctx context.Context, nc net.Conn) {
	c := &conn{s: s, nc: nc, ctx: ctx}
	// This goroutine only waits (see conn.serve); the work runs in
	// workers.
	c.inWorker(workOpen)
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

// Detect reports whether prefix, the first bytes of a connection, is an
// AMQP protocol header. A prefix too short to tell returns false.
func Detect(prefix []byte) bool {
	return len(prefix) >= 4 && bytes.HasPrefix(prefix, []byte("AMQP"))
}

// Reject tells a client turned away by a connection limit why, before
// the listener closes nc: the AMQP header, then an open followed at once
// by a close with amqp:resource-limit-exceeded (the refusal pattern Qpid
// JMS recognises by the connection-establishment-failed property).
func (s *Server) Reject(nc net.Conn) {
	buf := append([]byte(nil), frames.ProtoAMQP[:]...)
	buf = frames.Append(buf, frames.TypeAMQP, 0, s.refusalOpen(), nil)
	buf = frames.Append(buf, frames.TypeAMQP, 0, &frames.Close{Error: &frames.Error{
		Condition:   frames.ErrCondResourceLimitExceeded,
		Description: "the broker's connection limit is reached; try again later",
	}}, nil)
	nc.SetWriteDeadline(time.Now().Add(time.Second))
	nc.Write(buf)
}

// open is the broker's open performative.
func (s *Server) open() *frames.Open {
	return &frames.Open{
		ContainerID:  s.cfg.ContainerID,
		MaxFrameSize: s.cfg.MaxFrameSize,
		ChannelMax:   s.cfg.ChannelMax,
		IdleTimeout:  s.cfg.IdleTimeout / 2,
		OfferedCapabilities: []encoding.Symbol{
			capAnonymousRelay, capDelayedDelivery, capSharedSubs,
		},
		Properties: encoding.Map{
			{Key: encoding.Symbol("product"), Value: s.cfg.Product},
			{Key: encoding.Symbol("version"), Value: s.cfg.Version},
		},
	}
}

// refusalOpen is the open sent just before a close that refuses the
// connection.
func (s *Server) refusalOpen() *frames.Open {
	o := s.open()
	o.Properties = append(o.Properties, encoding.MapEntry{Key: encoding.Symbol(propEstablishmentFailed), Value: true})
	return o
}

// Capabilities and properties the broker offers or reads.
const (
	capAnonymousRelay  = encoding.Symbol("ANONYMOUS-RELAY")
	capDelayedDelivery = encoding.Symbol("DELAYED_DELIVERY")
	capSharedSubs      = encoding.Symbol("SHARED-SUBS")
	capQueue           = encoding.Symbol("queue")
	capTopic           = encoding.Symbol("topic")
	capTempQueue       = encoding.Symbol("temporary-queue")
	capTempTopic       = encoding.Symbol("temporary-topic")
	capAnycast         = encoding.Symbol("anycast")
	capMulticast       = encoding.Symbol("multicast")
	capShared          = encoding.Symbol("shared")
	capGlobal          = encoding.Symbol("global")

	propEstablishmentFailed = "amqp:connection-establishment-failed"
)

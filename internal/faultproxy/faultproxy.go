// Package faultproxy is a TCP proxy for tests that injects network
// faults between two processes: one proxy per directed pair of nodes
// (from → to), listening on a loopback port and forwarding to the
// target's real address. Its mode can change at any time and applies at
// once to the connections already open:
//
//   - Pass forwards everything.
//   - Drop is a blackhole: the proxy keeps accepting and reading, and
//     forwards nothing (new connections are not even dialled through).
//   - Delay(d) forwards each chunk read d after it was read; chunks are
//     pipelined, so throughput is kept and latency grows by d.
//   - Reset closes every connection with a TCP reset and resets new ones.
//
// A proxy affects both byte directions of its connections unless
// SetOneWay(true): then Drop and Delay apply only to the bytes the
// dialling side sends (cluster nodes write only on the connections they
// dial, so either way a proxy cuts one direction of the cluster).
//
// A connection that lost bytes to Drop never forwards again: a stream
// with a hole in it would hand the receiver garbage. It is closed when
// the proxy leaves Drop, as TCP would reset it after a long blackhole;
// the endpoints reconnect.
//
// [Net] builds the full mesh of proxies for N nodes, with Partition,
// Isolate, OneWay and Heal.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is what a proxy does to the bytes it reads.
type Kind int

const (
	Pass Kind = iota
	Drop
	Delay
	Reset
)

func (k Kind) String() string {
	switch k {
	case Pass:
		return "pass"
	case Drop:
		return "drop"
	case Delay:
		return "delay"
	case Reset:
		return "reset"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

const (
	chunkSize   = 32 << 10
	queueChunks = 64 // chunks read but not yet written, per direction
	dialTimeout = 5 * time.Second
)

var bufs = sync.Pool{New: func() any { return new([chunkSize]byte) }}

// Stats counts what a proxy did.
type Stats struct {
	Accepted  uint64 // connections accepted
	Open      int    // connections open now
	Forwarded uint64 // bytes written to either side
	Dropped   uint64 // bytes read and discarded by Drop
}

// Proxy forwards the connections it accepts to its target.
type Proxy struct {
	ln     net.Listener
	target atomic.Pointer[string]

	mu      sync.Mutex
	kind    Kind
	delay   time.Duration
	oneWay  bool
	changed chan struct{} // closed and replaced at every change: wakes delayed writers
	conns   map[*conn]struct{}
	closed  bool

	wg                           sync.WaitGroup
	accepted, forwarded, dropped atomic.Uint64
}

// New starts a proxy on 127.0.0.1 (a free port) forwarding to target,
// host:port; an empty target resets connections until SetTarget.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{ln: ln, changed: make(chan struct{}), conns: make(map[*conn]struct{})}
	p.target.Store(&target)
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the address to dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget changes the address new connections are forwarded to.
func (p *Proxy) SetTarget(addr string) { p.target.Store(&addr) }

// Pass forwards everything from now on.
func (p *Proxy) Pass() { p.set(Pass, 0) }

// Drop blackholes the proxy's connections from now on.
func (p *Proxy) Drop() { p.set(Drop, 0) }

// Delay forwards each chunk d after it was read. Chunks already waiting
// follow the new delay.
func (p *Proxy) Delay(d time.Duration) { p.set(Delay, d) }

// Reset closes every connection with a TCP reset, and resets new ones
// until another mode is set.
func (p *Proxy) Reset() { p.set(Reset, 0) }

// SetOneWay makes Drop and Delay apply only to the bytes the dialling
// side sends (true), or to both directions (false, the default).
func (p *Proxy) SetOneWay(on bool) {
	p.mu.Lock()
	p.oneWay = on
	p.notifyLocked()
	p.mu.Unlock()
}

// Mode returns the current kind and delay.
func (p *Proxy) Mode() (Kind, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kind, p.delay
}

func (p *Proxy) set(k Kind, d time.Duration) {
	p.mu.Lock()
	p.kind, p.delay = k, d
	p.notifyLocked()
	var closing []*conn
	for c := range p.conns {
		if k == Reset || (k != Drop && c.isTainted()) {
			closing = append(closing, c)
		}
	}
	p.mu.Unlock()
	for _, c := range closing {
		c.close(k == Reset)
	}
}

func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// policy is what applies to one direction now.
type policy struct {
	kind    Kind
	delay   time.Duration
	changed <-chan struct{}
}

func (p *Proxy) policy(up bool) policy {
	p.mu.Lock()
	defer p.mu.Unlock()
	k, d := p.kind, p.delay
	if !up && p.oneWay && (k == Drop || k == Delay) {
		k, d = Pass, 0
	}
	return policy{k, d, p.changed}
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	open := len(p.conns)
	p.mu.Unlock()
	return Stats{Accepted: p.accepted.Load(), Open: open, Forwarded: p.forwarded.Load(), Dropped: p.dropped.Load()}
}

// Close stops the proxy, closes its connections and returns once all its
// goroutines have ended. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	conns := p.conns
	p.conns = make(map[*conn]struct{})
	p.mu.Unlock()
	err := p.ln.Close()
	for c := range conns {
		c.close(false)
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a connection aborted before Accept returned it
		}
		p.accepted.Add(1)
		p.mu.Lock()
		if p.closed || p.kind == Reset {
			p.mu.Unlock()
			resetClose(nc)
			continue
		}
		c := &conn{p: p, client: nc}
		c.ctx, c.cancel = context.WithCancel(context.Background())
		// A blackhole does not even dial through, unless the other
		// direction must still pass.
		c.blackholed = p.kind == Drop && !p.oneWay
		c.tainted[1].Store(c.blackholed)
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go c.run()
	}
}

// resetClose closes nc with a TCP reset rather than a FIN.
func resetClose(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	nc.Close()
}

// conn is one proxied connection.
type conn struct {
	p          *Proxy
	client     net.Conn // accepted
	server     net.Conn // dialled to the target; nil if blackholed
	blackholed bool
	tainted    [2]atomic.Bool // per direction (up: 1): bytes were dropped, never forward again
	ctx        context.Context
	cancel     context.CancelFunc

	mu      sync.Mutex
	closed  bool
	halfEOF int // directions that ended with a clean EOF
}

func dir(up bool) int {
	if up {
		return 1
	}
	return 0
}

func (c *conn) isTainted() bool { return c.tainted[0].Load() || c.tainted[1].Load() }

// close ends both sides; reset sends TCP resets.
func (c *conn) close(reset bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	server := c.server
	c.mu.Unlock()
	c.cancel()
	closeConn := net.Conn.Close
	if reset {
		closeConn = func(nc net.Conn) error { resetClose(nc); return nil }
	}
	_ = closeConn(c.client)
	if server != nil {
		_ = closeConn(server)
	}
}

func (c *conn) run() {
	p := c.p
	defer p.wg.Done()
	defer func() {
		c.close(false)
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if c.blackholed {
		c.pump(true, c.client, nil)
		return
	}
	target := *p.target.Load()
	if target == "" {
		resetClose(c.client)
		return
	}
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(c.ctx, "tcp", target)
	if err != nil {
		resetClose(c.client) // as the target would have: connection refused
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		server.Close()
		return
	}
	c.server = server
	c.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.pump(false, server, c.client)
	}()
	c.pump(true, c.client, server)
	wg.Wait()
}

// chunk is bytes read, or the end of a direction (data nil).
type chunk struct {
	buf  *[chunkSize]byte
	data []byte
	at   time.Time
	err  error // with data nil: io.EOF for a clean end
}

// pump forwards one direction (up: client to server) from src to dst
// (nil: discard) with a reader and a writer goroutine, so that a delay
// holds chunks without holding up reading.
func (c *conn) pump(up bool, src, dst net.Conn) {
	ch := make(chan chunk, queueChunks)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.write(up, ch, dst)
	}()
	c.read(up, src, dst == nil, ch)
	wg.Wait()
}

func (c *conn) read(up bool, src net.Conn, discard bool, ch chan<- chunk) {
	defer close(ch)
	for {
		b := bufs.Get().(*[chunkSize]byte)
		n, err := src.Read(b[:])
		if n > 0 && (discard || c.tainted[dir(up)].Load() || c.p.policy(up).kind == Drop) {
			c.drop(up, n)
			n = 0
		}
		var ck chunk
		switch {
		case n > 0:
			ck = chunk{buf: b, data: b[:n], at: time.Now()}
		case err != nil:
			bufs.Put(b)
			ck = chunk{err: err, at: time.Now()}
		default:
			bufs.Put(b)
			continue
		}
		select {
		case ch <- ck:
		case <-c.ctx.Done():
			if ck.buf != nil {
				bufs.Put(ck.buf)
			}
			return
		}
		if ck.data != nil && err != nil {
			select {
			case ch <- chunk{err: err, at: time.Now()}:
			case <-c.ctx.Done():
			}
		}
		if err != nil {
			return
		}
	}
}

// drop counts n bytes of direction up discarded, and taints the
// connection. A connection tainted while the proxy is no longer in Drop
// (set changed the mode between our check and now) is closed at once:
// set closes the tainted ones it sees, and this closes the others.
func (c *conn) drop(up bool, n int) {
	c.p.dropped.Add(uint64(n))
	c.tainted[dir(up)].Store(true)
	if c.p.policy(up).kind != Drop {
		c.close(false)
	}
}

func (c *conn) write(up bool, ch <-chan chunk, dst net.Conn) {
	for ck := range ch {
		ok := c.forward(up, ck, dst)
		if ck.buf != nil {
			bufs.Put(ck.buf)
		}
		if !ok {
			c.close(false)
			for ck := range ch { // until the reader, failing on the closed conn, stops
				if ck.buf != nil {
					bufs.Put(ck.buf)
				}
			}
			return
		}
	}
}

// forward passes ck on to dst when its policy allows, waiting out a
// delay (re-read at every mode change). It returns false when the
// connection is done.
func (c *conn) forward(up bool, ck chunk, dst net.Conn) bool {
	for {
		pol := c.p.policy(up)
		if dst == nil || c.tainted[dir(up)].Load() || pol.kind == Drop {
			// A blackhole: data and the end of the stream vanish alike.
			c.drop(up, len(ck.data))
			return true
		}
		if pol.kind == Delay {
			if wait := time.Until(ck.at.Add(pol.delay)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-pol.changed:
					t.Stop()
					continue
				case <-c.ctx.Done():
					t.Stop()
					return false
				}
				continue // the mode may have changed while we waited
			}
		}
		if ck.data == nil {
			return c.end(ck.err, dst)
		}
		if _, err := dst.Write(ck.data); err != nil {
			return false
		}
		c.p.forwarded.Add(uint64(len(ck.data)))
		return true
	}
}

// end passes on the end of one direction: a clean EOF as a half-close,
// anything else by ending the connection, as does the second EOF.
func (c *conn) end(err error, dst net.Conn) bool {
	tc, ok := dst.(*net.TCPConn)
	if err != io.EOF || !ok {
		return false
	}
	_ = tc.CloseWrite()
	c.mu.Lock()
	c.halfEOF++
	both := c.halfEOF == 2
	c.mu.Unlock()
	return !both
}

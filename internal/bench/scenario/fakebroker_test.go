package scenario

import (
	"bufio"
	"bytes"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeBroker is a tiny in-memory STOMP broker for end-to-end tests of the
// tool: queues (round-robin to subscribers, held while there are none),
// topics (/topic/ prefix, to every subscriber), receipts, and ACK checking
// (an ACK that does not name a delivered message gets an ERROR). go-stomp's
// own server cannot be used: it mishandles client-individual ACKs.
type fakeBroker struct {
	t  *testing.T
	l  net.Listener
	mu sync.Mutex // guards everything below, and every write to a client
	// subs per destination, and queued messages of queues without subscribers.
	subs    map[string][]*fakeSub
	held    map[string][][]byte
	nextID  int
	unacked map[string]bool // ack id -> delivered with a client ack mode
	errors  []string
}

type fakeSub struct {
	c    *fakeConn
	id   string
	ack  string
	next int // round-robin cursor (on the first sub of a queue)
}

// fakeConn queues outgoing frames without bound and writes them on its own
// goroutine, so the broker never blocks on a client that is busy writing to
// it (holding b.mu across a blocking write would deadlock with ACKs).
type fakeConn struct {
	nc      net.Conn
	version string // set on CONNECT by the conn's reader

	mu     sync.Mutex
	queue  [][]byte
	closed bool
	kick   chan struct{} // capacity 1
}

func (c *fakeConn) enqueue(frame []byte) {
	c.mu.Lock()
	c.queue = append(c.queue, frame)
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *fakeConn) writeLoop() {
	bw := bufio.NewWriter(c.nc)
	for range c.kick {
		c.mu.Lock()
		q := c.queue
		c.queue = nil
		closed := c.closed
		c.mu.Unlock()
		for _, f := range q {
			bw.Write(f)
		}
		if bw.Flush() != nil || closed {
			c.nc.Close()
			return
		}
	}
}

func startFakeBroker(t *testing.T) *fakeBroker {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{t: t, l: l, subs: map[string][]*fakeSub{}, held: map[string][][]byte{}, unacked: map[string]bool{}}
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go b.serve(nc)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.errors {
			t.Errorf("fake broker: %s", e)
		}
	})
	return b
}

// sendLocked queues one frame for c; the caller holds b.mu.
func (b *fakeBroker) sendLocked(c *fakeConn, cmd string, hdr []string, body []byte) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	writeFrame(w, cmd, hdr, body)
	w.Flush()
	c.enqueue(buf.Bytes())
}

// deliverLocked sends body to one (queue) or all (topic) subscribers of dest.
func (b *fakeBroker) deliverLocked(dest string, body []byte) {
	subs := b.subs[dest]
	if len(subs) == 0 {
		if !strings.HasPrefix(dest, "/topic/") {
			b.held[dest] = append(b.held[dest], body)
		}
		return
	}
	targets := subs
	if !strings.HasPrefix(dest, "/topic/") {
		i := subs[0].next % len(subs)
		subs[0].next++
		targets = subs[i : i+1]
	}
	for _, s := range targets {
		b.nextID++
		id := strconv.Itoa(b.nextID)
		if s.ack != ackAuto {
			b.unacked[id] = true
		}
		b.sendLocked(s.c, "MESSAGE", []string{"destination", dest, "subscription", s.id, "message-id", id, "ack", id}, body)
	}
}

func (b *fakeBroker) serve(nc net.Conn) {
	c := &fakeConn{nc: nc, kick: make(chan struct{}, 1)}
	go c.writeLoop()
	defer func() { // the writer sends what is queued, then closes
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.enqueue(nil)
	}()
	br := bufio.NewReaderSize(nc, rawMaxLine)
	var mine []*fakeSub
	defer func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, s := range mine {
			for dest, subs := range b.subs {
				b.subs[dest] = slicesDelete(subs, s)
			}
		}
	}()
	for {
		f, err := readFrame(br)
		if err != nil {
			return
		}
		b.mu.Lock()
		hdr := func(k string) string { v, _ := f.get(k); return v }
		switch f.command {
		case "CONNECT", "STOMP":
			c.version = "1.1"
			if strings.Contains(hdr("accept-version"), "1.2") {
				c.version = "1.2"
			}
			if hdr("heart-beat") != "0,0" {
				b.errors = append(b.errors, "client asked for heart-beats: "+hdr("heart-beat"))
			}
			b.sendLocked(c, "CONNECTED", []string{"version", c.version, "heart-beat", "0,0"}, nil)
		case "SUBSCRIBE":
			dest := hdr("destination")
			s := &fakeSub{c: c, id: hdr("id"), ack: hdr("ack")}
			if s.ack == "" {
				s.ack = ackAuto
			}
			mine = append(mine, s)
			b.subs[dest] = append(b.subs[dest], s)
			held := b.held[dest]
			delete(b.held, dest)
			for _, body := range held {
				b.deliverLocked(dest, body)
			}
		case "SEND":
			b.deliverLocked(hdr("destination"), f.body)
		case "ACK":
			id := hdr("id") // STOMP 1.2
			if c.version == "1.1" {
				id = hdr("message-id")
			}
			if !b.unacked[id] {
				b.errors = append(b.errors, "ACK for unknown message "+id)
				b.sendLocked(c, "ERROR", []string{"message", "unknown ack id " + id}, nil)
			}
			delete(b.unacked, id)
		case "DISCONNECT":
		default:
			b.errors = append(b.errors, "unexpected frame "+f.command)
		}
		if r, ok := f.get("receipt"); ok {
			b.sendLocked(c, "RECEIPT", []string{"receipt-id", r}, nil)
		}
		b.mu.Unlock()
		if f.command == "DISCONNECT" {
			return
		}
	}
}

func slicesDelete(subs []*fakeSub, s *fakeSub) []*fakeSub {
	out := subs[:0]
	for _, x := range subs {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

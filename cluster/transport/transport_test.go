package transport

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// frameFor makes the i-th test frame from one node on one lane: its
// header says where it comes from, its length varies (0 included).
func frameFor(from uint64, lane Lane, i int) []byte {
	size := (i * 37) % 5000
	if i == 7 {
		size = 0
	}
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(i + j)
	}
	if size >= 16 {
		binary.BigEndian.PutUint64(b, from)
		binary.BigEndian.PutUint64(b[8:], uint64(i))
	}
	return b
}

func TestFramesEveryWayInOrderPerLane(t *testing.T) {
	const n = 300
	nodes := mesh(t, 3, nil)
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				waitConnected(t, a, b)
			}
		}
	}
	big := make([]byte, 3<<20) // one large frame on the bulk lane, read outside the read buffer
	rand.Read(big)
	for i := range n {
		for _, a := range nodes {
			for _, b := range nodes {
				if a == b {
					continue
				}
				for l := range NumLanes {
					if !a.Send(b.id, l, frameFor(a.id, l, i)) {
						t.Fatalf("send %d from %d to %d on %s dropped", i, a.id, b.id, l)
					}
				}
			}
		}
	}
	if !nodes[0].Send(2, LaneBulk, big) {
		t.Fatal("the big bulk frame was dropped")
	}
	for _, b := range nodes {
		for _, a := range nodes {
			if a == b {
				continue
			}
			for l := range NumLanes {
				want := n
				if a.id == 1 && b.id == 2 && l == LaneBulk {
					want++
				}
				waitFor(t, 30*time.Second, fmt.Sprintf("%d frames from %d at %d on %s", want, a.id, b.id, l), func() bool {
					return b.sink.count(a.id, l) >= want
				})
				got := b.sink.get(a.id, l)
				if len(got) != want {
					t.Fatalf("%d frames from %d at %d on %s, want %d", len(got), a.id, b.id, l, want)
				}
				for i := range n {
					if !bytes.Equal(got[i], frameFor(a.id, l, i)) {
						t.Fatalf("frame %d from %d at %d on %s differs (len %d): out of order or corrupt", i, a.id, b.id, l, len(got[i]))
					}
				}
				if want > n && !bytes.Equal(got[n], big) {
					t.Fatal("the big bulk frame differs")
				}
			}
		}
	}
	s := nodes[0].lane(2, LaneRaft)
	if s.FramesOut != n || s.Drops != 0 || s.BytesOut == 0 {
		t.Errorf("node 1's raft lane to 2: %+v, want %d frames out and no drops", s, n)
	}
	if in := nodes[1].lane(1, LaneRaft); in.FramesIn != n {
		t.Errorf("node 2's raft lane from 1: %d frames in, want %d", in.FramesIn, n)
	}
}

// probe sends a frame from a to b on lane and waits for it, proving the
// link still works.
func probe(t *testing.T, a, b *testNode, lane Lane) {
	t.Helper()
	before := b.sink.count(a.id, lane)
	waitFor(t, 20*time.Second, fmt.Sprintf("a probe from %d to %d", a.id, b.id), func() bool {
		if b.sink.count(a.id, lane) > before {
			return true
		}
		a.Send(b.id, lane, []byte("probe"))
		return false
	})
}

// expectClosed reads c until the peer closes it.
func expectClosed(t *testing.T, c net.Conn, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(within))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection was still open after %v", within)
	}
	return time.Since(start)
}

func TestRefusalsLeaveGoodPeersWorking(t *testing.T) {
	const handshakeTimeout = time.Second
	la, lb := listen(t), listen(t)
	bAddr := lb.Addr().String()
	mod := func(c *Config) {
		c.HandshakeTimeout = handshakeTimeout
		c.Lanes[LaneRaft].MaxFrame = 1024
	}
	a := startNode(t, 1, la, map[uint64]string{2: bAddr}, mod)
	b := startNode(t, 2, lb, map[uint64]string{1: la.Addr().String(), 3: "127.0.0.1:1"}, mod)
	waitConnected(t, a, b)
	probe(t, a, b, LaneRaft)

	refused := func(reason string) uint64 { return b.Stats().Refused[reason] }
	expectRefused := func(t *testing.T, reason string, before uint64) {
		t.Helper()
		waitFor(t, 20*time.Second, "a refusal for "+reason, func() bool { return refused(reason) > before })
		waitFor(t, 5*time.Second, "a log line for "+reason, func() bool { return b.logs.contains(`"reason":"` + reason + `"`) })
		probe(t, a, b, LaneRaft)
	}

	t.Run("wrong secret", func(t *testing.T) {
		before := refused("proof")
		c := startNode(t, 3, listen(t), map[uint64]string{2: bAddr}, func(c *Config) { c.Secret = []byte("another secret, as long as ours!") })
		expectRefused(t, "proof", before)
		waitFor(t, 10*time.Second, "node 3's error", func() bool {
			return bytesContains(c.lane(2, LaneRaft).LastError, "did not prove the cluster secret")
		})
		c.Close()
		if n := b.sink.count(3, LaneRaft); n != 0 {
			t.Errorf("node 2 took %d frames from a node with another secret", n)
		}
	})
	t.Run("wrong receiver", func(t *testing.T) {
		before := refused("receiver")
		c := startNode(t, 3, listen(t), map[uint64]string{4: bAddr}, nil)
		expectRefused(t, "receiver", before)
		waitFor(t, 10*time.Second, "node 3's error", func() bool {
			return bytesContains(c.lane(4, LaneRaft).LastError, "wrong receiver")
		})
		c.Close()
	})
	t.Run("unknown sender", func(t *testing.T) {
		before := refused("sender")
		c := startNode(t, 5, listen(t), map[uint64]string{2: bAddr}, nil)
		expectRefused(t, "sender", before)
		waitFor(t, 10*time.Second, "node 5's error", func() bool {
			return bytesContains(c.lane(2, LaneRaft).LastError, "not one of the peer's peers")
		})
		c.Close()
		if n := b.sink.count(5, LaneRaft); n != 0 {
			t.Errorf("node 2 took %d frames from a stranger", n)
		}
	})
	t.Run("garbage", func(t *testing.T) {
		before := refused("magic")
		c, err := net.Dial("tcp", bAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		junk := make([]byte, 300)
		rand.Read(junk)
		copy(junk, "GET / HTTP/1.1\r\n")
		c.Write(junk)
		expectClosed(t, c, 10*time.Second)
		expectRefused(t, "magic", before)
	})
	t.Run("slow handshake", func(t *testing.T) {
		before := refused("timeout")
		c, err := net.Dial("tcp", bAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A hello one byte every 100 ms would take 5.6 s: the deadline
		// covers the whole handshake, not each read.
		var h [helloLen]byte
		(&hello{version: version, lane: LaneRaft, from: 1, to: 2}).marshal(&h)
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range h {
				select {
				case <-done:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := c.Write(h[i : i+1]); err != nil {
					return
				}
			}
		}()
		took := expectClosed(t, c, 10*time.Second)
		close(done)
		wg.Wait()
		if took > 5*time.Second {
			t.Errorf("a trickled hello kept the connection open %v, the handshake timeout is %v", took, handshakeTimeout)
		}
		expectRefused(t, "timeout", before)
	})
	t.Run("oversize frame", func(t *testing.T) {
		c, err := net.Dial("tcp", bAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hs := newHandshaker(3, testSecret, rand.Reader, nil)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if err := hs.dial(c, 2, LaneRaft, nil); err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Time{})
		full := make([]byte, 1024)
		var msg []byte
		msg = binary.BigEndian.AppendUint32(msg, 1024)
		msg = append(msg, full...)
		msg = binary.BigEndian.AppendUint32(msg, 1025)
		msg = append(msg, full...)
		msg = append(msg, 0)
		c.Write(msg)
		expectClosed(t, c, 10*time.Second)
		waitFor(t, 5*time.Second, "the log line", func() bool { return b.logs.contains("frame too large") })
		if got := b.sink.get(3, LaneRaft); len(got) != 1 || len(got[0]) != 1024 {
			t.Errorf("node 2 got %d frames from 3, want the one of MaxFrame bytes", len(got))
		}
		probe(t, a, b, LaneRaft)
	})
}

func bytesContains(s, sub string) bool { return bytes.Contains([]byte(s), []byte(sub)) }

func TestQueueFullDropsAndOtherLanesFlow(t *testing.T) {
	la, lb := listen(t), listen(t)
	block := make(chan struct{})
	var unblock sync.Once
	defer unblock.Do(func() { close(block) })
	a := startNode(t, 1, la, map[uint64]string{2: lb.Addr().String()}, func(c *Config) {
		c.Lanes[LaneRPC].QueueBytes = 64 << 10
	})
	b := startNode(t, 2, lb, map[uint64]string{1: la.Addr().String()}, nil)
	waitConnected(t, a, b)
	b.sink.mu.Lock()
	b.sink.block = map[Lane]chan struct{}{LaneRPC: block}
	b.sink.mu.Unlock()

	// Fill the RPC lane: the receiver's handler is stuck, so the socket
	// buffers fill, then the 64 KiB queue.
	frame := make([]byte, 1024)
	var accepted []uint64
	drops := 0
	start := time.Now()
	for i := uint64(0); drops < 200 && i < 1_000_000; i++ {
		binary.BigEndian.PutUint64(frame, i)
		if a.Send(2, LaneRPC, frame) {
			accepted = append(accepted, i)
		} else {
			drops++
			time.Sleep(time.Millisecond) // let the writer push what it can
		}
	}
	elapsed := time.Since(start)
	if drops < 200 {
		t.Fatalf("%d sends, never a full queue", len(accepted))
	}
	if s := a.lane(2, LaneRPC); s.Drops != uint64(drops) || s.QueuedBytes == 0 || !s.Connected {
		t.Errorf("RPC lane stats %+v, want %d drops, a full queue and still connected", s, drops)
	}
	waitFor(t, 5*time.Second, "OnUnreachable(2)", func() bool { return a.unreachCount(2) > 0 })
	if n, most := a.unreachCount(2), int64(elapsed/unreachableEvery)+2; n > most {
		t.Errorf("OnUnreachable called %d times in %v, at most %d expected", n, elapsed, most)
	}

	// The raft lane is not stuck behind the RPC lane.
	probe(t, a, b, LaneRaft)

	unblock.Do(func() { close(block) })
	waitFor(t, 30*time.Second, "the accepted frames", func() bool { return b.sink.count(1, LaneRPC) >= len(accepted) })
	got := b.sink.get(1, LaneRPC)
	if len(got) != len(accepted) {
		t.Fatalf("%d frames received, %d accepted", len(got), len(accepted))
	}
	for i, f := range got {
		if seq := binary.BigEndian.Uint64(f); seq != accepted[i] {
			t.Fatalf("frame %d is send %d, want %d: every accepted frame arrives, in order", i, seq, accepted[i])
		}
	}
}

func TestReconnectAfterPeerRestart(t *testing.T) {
	la, lb := listen(t), listen(t)
	bAddr := lb.Addr().String()
	a := startNode(t, 1, la, map[uint64]string{2: bAddr}, nil)
	b := startNode(t, 2, lb, map[uint64]string{1: la.Addr().String()}, nil)
	waitConnected(t, a, b)
	probe(t, a, b, LaneRaft)

	b.Close()
	waitFor(t, 10*time.Second, "the links to be down", func() bool {
		for l := range NumLanes {
			if a.lane(2, l).Connected {
				return false
			}
		}
		return true
	})
	if a.Send(2, LaneRaft, []byte("lost")) {
		t.Fatal("Send to a node that is down returned true")
	}
	waitFor(t, 5*time.Second, "OnUnreachable(2)", func() bool { return a.unreachCount(2) > 0 })

	var lb2 net.Listener
	waitFor(t, 10*time.Second, "the port again", func() bool {
		var err error
		lb2, err = net.Listen("tcp", bAddr)
		return err == nil
	})
	b2 := startNode(t, 2, lb2, map[uint64]string{1: la.Addr().String()}, nil)
	waitConnected(t, a, b2)
	probe(t, a, b2, LaneRaft)
	for l := range NumLanes {
		if s := a.lane(2, l); s.Reconnects == 0 || s.LastError == "" {
			t.Errorf("lane %s: %+v, want a reconnection and the error that preceded it", l, s)
		}
	}
}

func TestRemoveAndAddPeer(t *testing.T) {
	la, lb := listen(t), listen(t)
	a := startNode(t, 1, la, map[uint64]string{2: lb.Addr().String()}, nil)
	b := startNode(t, 2, lb, map[uint64]string{1: la.Addr().String()}, nil)
	waitConnected(t, a, b)
	waitConnected(t, b, a)

	before := b.Stats().Refused["sender"]
	b.RemovePeer(1)
	if len(b.Stats().Peers) != 0 {
		t.Fatal("node 1 still listed")
	}
	if b.Send(1, LaneRaft, []byte("x")) {
		t.Error("Send to a removed peer returned true")
	}
	waitFor(t, 20*time.Second, "node 1 refused as a stranger", func() bool { return b.Stats().Refused["sender"] > before })
	if a.lane(2, LaneRaft).Connected {
		t.Error("node 1 still connected to a node that removed it")
	}

	if err := b.AddPeer(1, la.Addr().String()); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, a, b)
	waitConnected(t, b, a)
	probe(t, a, b, LaneRaft)
	probe(t, b, a, LaneRaft)
	if err := b.AddPeer(2, "x:1"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("AddPeer(self) = %v", err)
	}
}

func TestCloseIsIdempotentAndJoinsEverything(t *testing.T) {
	if g := leftovers(); len(g) > 0 {
		t.Fatalf("goroutines of the package before the test:\n%s", g)
	}
	nodes := mesh(t, 3, nil)
	waitConnected(t, nodes[0], nodes[1])
	waitConnected(t, nodes[1], nodes[2])
	for i := range 100 {
		nodes[0].Send(2, LaneRaft, frameFor(1, LaneRaft, i))
		nodes[2].Send(1, LaneBulk, frameFor(3, LaneBulk, i))
	}
	// A peer that does not exist (redialling), and a handshake in progress.
	if err := nodes[0].AddPeer(9, "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", nodes[1].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var wg sync.WaitGroup
	for _, n := range nodes {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := n.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
		}
	}
	wg.Wait()
	for _, n := range nodes {
		if err := n.Close(); err != nil {
			t.Errorf("third Close: %v", err)
		}
	}
	if g := leftovers(); len(g) > 0 {
		t.Fatalf("%d goroutines left after Close:\n%s", len(g), g)
	}
	if nodes[0].Send(2, LaneRaft, []byte("x")) {
		t.Error("Send after Close returned true")
	}
	if err := nodes[0].AddPeer(7, "127.0.0.1:1"); !errors.Is(err, ErrClosed) {
		t.Errorf("AddPeer after Close = %v, want ErrClosed", err)
	}
	expectClosed(t, c, 5*time.Second)
}

func TestConfigChecked(t *testing.T) {
	ok := Config{NodeID: 1, Listen: "127.0.0.1:0", Secret: testSecret, Handler: func(uint64, Lane, []byte) {}}
	for name, mod := range map[string]func(*Config){
		"no id":        func(c *Config) { c.NodeID = 0 },
		"short secret": func(c *Config) { c.Secret = []byte("short") },
		"no handler":   func(c *Config) { c.Handler = nil },
		"self as peer": func(c *Config) { c.Peers = map[uint64]string{1: "127.0.0.1:1"} },
		"peer 0":       func(c *Config) { c.Peers = map[uint64]string{0: "127.0.0.1:1"} },
		"huge frame":   func(c *Config) { c.Lanes[LaneBulk].MaxFrame = 2 << 30 },
		"no address":   func(c *Config) { c.Listen = "" },
	} {
		c := ok
		mod(&c)
		if tr, err := New(c); !errors.Is(err, ErrInvalidConfig) {
			if tr != nil {
				tr.Close()
			}
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestIdleConnectionsKeptAliveSilentOnesClosed(t *testing.T) {
	const idle = 400 * time.Millisecond
	mod := func(c *Config) { c.IdleTimeout = idle }
	la, lb := listen(t), listen(t)
	a := startNode(t, 1, la, map[uint64]string{2: lb.Addr().String()}, mod)
	b := startNode(t, 2, lb, map[uint64]string{1: la.Addr().String(), 3: "127.0.0.1:1"}, mod)
	waitConnected(t, a, b)

	// Idle for many times the timeout: keepalives hold every lane open.
	deadline := time.Now().Add(6 * idle)
	for time.Now().Before(deadline) {
		for l := range NumLanes {
			if s := a.lane(2, l); !s.Connected || s.Reconnects != 0 {
				t.Fatalf("lane %s dropped while idle: %+v", l, s)
			}
		}
		time.Sleep(idle / 4)
	}
	if s := a.lane(2, LaneBulk); s.BytesOut == 0 || s.FramesOut != 0 {
		t.Errorf("bulk lane %+v: want keepalive bytes and no frames", s)
	}

	// A peer that completes the handshake and then says nothing is
	// closed after the idle timeout.
	c, err := net.Dial("tcp", lb.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := newHandshaker(3, testSecret, rand.Reader, nil).dial(c, 2, LaneRPC, nil); err != nil {
		t.Fatal(err)
	}
	if took := expectClosed(t, c, 10*time.Second); took < idle/2 {
		t.Errorf("a silent peer was closed after %v, before the idle timeout of %v", took, idle)
	}
}

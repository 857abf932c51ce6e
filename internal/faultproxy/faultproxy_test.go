package faultproxy

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// server is a plain TCP peer: it echoes what it reads, counts bytes and
// connections, and can push a line every few milliseconds.
type server struct {
	ln       net.Listener
	accepted atomic.Int64
	received atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
	got      bytes.Buffer // everything read, all connections
}

type serverMode int

const (
	echo serverMode = iota
	push            // write "tick\n" every 10 ms, read and discard
)

func startServer(t *testing.T, mode serverMode) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c, mode)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *server) serve(c net.Conn, mode serverMode) {
	defer c.Close()
	if mode == push {
		done := make(chan struct{})
		defer close(done)
		go func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(10 * time.Millisecond):
				}
				if _, err := c.Write([]byte("tick\n")); err != nil {
					return
				}
			}
		}()
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			s.received.Add(int64(n))
			s.mu.Lock()
			s.got.Write(buf[:n])
			s.mu.Unlock()
			if mode == echo {
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		if err != nil {
			if err == io.EOF && mode == echo {
				// Half-closed by the client: answer with our own EOF.
				c.(*net.TCPConn).CloseWrite()
			}
			return
		}
	}
}

func (s *server) sawBytes(b string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Contains(s.got.String(), b)
}

func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back within d; it returns the time
// taken or an error.
func roundTrip(c net.Conn, msg string, d time.Duration) (time.Duration, error) {
	start := time.Now()
	if _, err := c.Write([]byte(msg)); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(start.Add(d))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return 0, err
	}
	if string(buf) != msg {
		return 0, fmt.Errorf("read %q, want %q", buf, msg)
	}
	return time.Since(start), nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// expectClosed reads c until the proxy closes it.
func expectClosed(t *testing.T, c net.Conn, within time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(within))
	if _, err := io.Copy(io.Discard, c); isTimeout(err) {
		t.Fatalf("the connection was still open after %v", within)
	}
}

// expectRefused dials addr and expects the connection to be reset,
// during connect or right after.
func expectRefused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer c.Close()
	expectClosed(t, c, 10*time.Second)
}

// quiet is how long a negative check waits for something that must not
// happen; the positive checks around it show the path works.
const quiet = 300 * time.Millisecond

func TestPassForwardsBothWaysAndHalfCloses(t *testing.T) {
	s := startServer(t, echo)
	p := startProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	data := make([]byte, 1<<20)
	rand.Read(data)
	go c.Write(data)
	got := make([]byte, len(data))
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the echoed megabyte differs")
	}
	// A half-close travels through: the server answers with its EOF.
	c.(*net.TCPConn).CloseWrite()
	if n, err := c.Read(got); n != 0 || err != io.EOF {
		t.Fatalf("after a half-close: %d bytes, %v; want EOF", n, err)
	}
	if st := p.Stats(); st.Accepted != 1 || st.Forwarded != 2<<20 || st.Dropped != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestDropBlackholesThenHealCloses(t *testing.T) {
	s := startServer(t, echo)
	p := startProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := roundTrip(c, "before", 10*time.Second); err != nil {
		t.Fatal(err)
	}

	p.Drop()
	// The sender's writes succeed (the proxy reads them) and nothing
	// reaches the server, nor comes back.
	if _, err := roundTrip(c, "during", quiet); !isTimeout(err) {
		t.Fatalf("a round trip through a blackhole: %v", err)
	}
	if s.sawBytes("during") {
		t.Fatal("the server received bytes sent during Drop")
	}
	waitFor(t, 5*time.Second, "the dropped bytes counted", func() bool { return p.Stats().Dropped >= uint64(len("during")) })
	// A new connection is accepted but never reaches the server.
	before := s.accepted.Load()
	c2 := dial(t, p.Addr())
	if _, err := roundTrip(c2, "new", quiet); !isTimeout(err) {
		t.Fatalf("a new connection through a blackhole: %v", err)
	}
	if s.accepted.Load() != before {
		t.Fatal("a connection made during Drop reached the server")
	}

	p.Pass()
	// Both connections lost bytes: they are closed rather than resumed
	// with a hole in their stream.
	expectClosed(t, c, 10*time.Second)
	expectClosed(t, c2, 10*time.Second)
	c3 := dial(t, p.Addr())
	if _, err := roundTrip(c3, "after", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if s.sawBytes("during") || s.sawBytes("new") {
		t.Fatal("bytes sent during Drop arrived after Pass")
	}
}

func TestDropWithoutTrafficKeepsConnections(t *testing.T) {
	s := startServer(t, echo)
	p := startProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := roundTrip(c, "a", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Nothing was lost during a short, idle blackhole: the stream is
	// whole and goes on, as TCP's would.
	p.Drop()
	p.Pass()
	if _, err := roundTrip(c, "b", 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestOneWayDropCutsOnlyTheDialersBytes(t *testing.T) {
	s := startServer(t, push)
	p := startProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	readTick := func(d time.Duration) error {
		c.SetReadDeadline(time.Now().Add(d))
		_, err := r.ReadString('\n')
		return err
	}
	if err := readTick(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	p.SetOneWay(true)
	p.Drop()
	c.Write([]byte("up-one-way"))
	// The server's ticks still arrive...
	for range 5 {
		if err := readTick(10 * time.Second); err != nil {
			t.Fatalf("a tick during a one-way drop: %v", err)
		}
	}
	// ...and our bytes did not.
	if s.sawBytes("up-one-way") {
		t.Fatal("the server received bytes sent during a one-way drop")
	}

	// Both ways: the ticks, one every 10 ms, stop too (once those
	// already on their way are read).
	p.SetOneWay(false)
	for {
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := r.ReadString('\n'); err != nil {
			if !isTimeout(err) {
				t.Fatal(err)
			}
			break
		}
	}
	c.SetReadDeadline(time.Now().Add(quiet))
	if n, err := io.Copy(io.Discard, r); !isTimeout(err) || n > 0 {
		t.Fatalf("read %d bytes (%v) during a two-way drop", n, err)
	}
}

func TestDelayIsPipelinedAndChangesAtOnce(t *testing.T) {
	const d = 200 * time.Millisecond
	s := startServer(t, echo)
	p := startProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())

	p.Delay(d)
	took, err := roundTrip(c, "x", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took < 2*d {
		t.Errorf("a round trip took %v, want at least %v (%v each way)", took, 2*d, d)
	}
	p.SetOneWay(true)
	took, err = roundTrip(c, "y", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took < d {
		t.Errorf("a one-way delayed round trip took %v, want at least %v", took, d)
	}
	p.SetOneWay(false)

	// Twenty chunks 10 ms apart arrive about d after each was sent, not
	// one after the other d apart (which would take 20·d = 4 s).
	start := time.Now()
	go func() {
		for i := range 20 {
			c.Write([]byte{byte('a' + i)})
			time.Sleep(10 * time.Millisecond)
		}
	}()
	buf := make([]byte, 20)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	if string(buf) != "abcdefghijklmnopqrst" {
		t.Fatalf("read %q: order lost", buf)
	}
	if took := time.Since(start); took > 10*d {
		t.Errorf("20 delayed chunks took %v: not pipelined", took)
	}

	// Chunks waiting out a long delay go at once when the delay is lifted.
	p.Delay(time.Hour)
	c.Write([]byte("z"))
	time.Sleep(50 * time.Millisecond) // the chunk is read and waiting
	lifted := time.Now()
	p.Pass()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(c, buf[:1]); err != nil || buf[0] != 'z' {
		t.Fatalf("read %q, %v", buf[:1], err)
	}
	if took := time.Since(lifted); took > 5*time.Second {
		t.Errorf("a chunk held by an hour's delay took %v after Pass", took)
	}
}

func TestResetClosesAndRefuses(t *testing.T) {
	s := startServer(t, echo)
	p := startProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := roundTrip(c, "a", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	expectClosed(t, c, 10*time.Second)
	before := s.accepted.Load()
	expectRefused(t, p.Addr())
	if s.accepted.Load() != before {
		t.Error("a connection made during Reset reached the server")
	}
	waitFor(t, 10*time.Second, "the server's side closed", func() bool { return p.Stats().Open == 0 })
	p.Pass()
	c3 := dial(t, p.Addr())
	if _, err := roundTrip(c3, "b", 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestNoTargetResets(t *testing.T) {
	p := startProxy(t, "")
	expectRefused(t, p.Addr())
	s := startServer(t, echo)
	p.SetTarget(s.ln.Addr().String())
	if _, err := roundTrip(dial(t, p.Addr()), "a", 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// ourGoroutines lists the goroutines running this package's code (the
// test's own servers aside).
//
// A goroutine that has called its WaitGroup's Done is still listed until
// it returns, so, like goleak, callers retry for a moment (leftovers).
func ourGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var ours []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "faultproxy/faultproxy.go") || strings.Contains(g, "faultproxy/net.go") {
			ours = append(ours, g)
		}
	}
	return ours
}

func TestCloseEndsEverything(t *testing.T) {
	if g := leftovers(); len(g) > 0 {
		t.Fatalf("goroutines before the test:\n%s", strings.Join(g, "\n\n"))
	}
	s := startServer(t, echo)
	var proxies []*Proxy
	for _, mode := range []func(*Proxy){(*Proxy).Pass, (*Proxy).Drop, func(p *Proxy) { p.Delay(time.Hour) }, func(p *Proxy) { p.SetOneWay(true); p.Drop() }} {
		p, err := New(s.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		proxies = append(proxies, p)
		c := dial(t, p.Addr())
		roundTrip(c, "a", 10*time.Second)
		mode(p)
		c.Write([]byte("pending"))
		dial(t, p.Addr())
	}
	for _, p := range proxies {
		waitFor(t, 10*time.Second, "both connections accepted", func() bool { return p.Stats().Accepted == 2 })
	}
	for _, p := range proxies {
		p.Close()
		p.Close()
	}
	if g := leftovers(); len(g) > 0 {
		t.Fatalf("%d goroutines left after Close:\n%s", len(g), strings.Join(g, "\n\n"))
	}
}

// leftovers returns ourGoroutines once it is empty or after a second,
// for goroutines between their last deferred call and their exit.
func leftovers() []string {
	deadline := time.Now().Add(time.Second)
	for {
		g := ourGoroutines()
		if len(g) == 0 || time.Now().After(deadline) {
			return g
		}
		time.Sleep(time.Millisecond)
	}
}

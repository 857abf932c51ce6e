package mqtt

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

// writeLog is a net.Conn that records each Write.
type writeLog struct {
	net.Conn
	writes [][]byte
	fail   error
	closed bool
}

func (w *writeLog) Write(p []byte) (int, error) {
	if w.fail != nil {
		return 0, w.fail
	}
	w.writes = append(w.writes, append([]byte(nil), p...))
	return len(p), nil
}

func (w *writeLog) Close() error { w.closed = true; return nil }

func TestCorkGathersWritesInOrder(t *testing.T) {
	log := &writeLog{}
	c := newCorkConn(log)
	c.Write([]byte("a"))
	c.cork()
	c.Write([]byte("b"))
	c.cork() // nested: the acker and a session writer at once
	c.Write([]byte("c"))
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("d"))
	if len(log.writes) != 1 {
		t.Fatalf("written while corked: %q", log.writes)
	}
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("e"))
	want := []string{"a", "bcd", "e"}
	if len(log.writes) != len(want) {
		t.Fatalf("writes %q, want %q", log.writes, want)
	}
	for i, w := range want {
		if string(log.writes[i]) != w {
			t.Fatalf("writes %q, want %q", log.writes, want)
		}
	}
}

func TestCorkWritesWhenFull(t *testing.T) {
	log := &writeLog{}
	c := newCorkConn(log)
	c.cork()
	big := bytes.Repeat([]byte("x"), maxCorked-10)
	c.Write(big)
	c.Write([]byte("0123456789abc")) // past maxCorked: what is held goes first
	if len(log.writes) != 1 || !bytes.Equal(log.writes[0], big) {
		t.Fatalf("%d writes, want the held bytes written first", len(log.writes))
	}
	c.uncork()
	if len(log.writes) != 2 || string(log.writes[1]) != "0123456789abc" {
		t.Fatalf("writes %d, last %q", len(log.writes), log.writes[len(log.writes)-1])
	}
}

func TestCorkFailedFlushClosesAndSticks(t *testing.T) {
	log := &writeLog{}
	c := newCorkConn(log)
	c.cork()
	c.Write([]byte("puback"))
	log.fail = errors.New("broken pipe")
	if err := c.uncork(); err == nil {
		t.Fatal("uncork: no error")
	}
	if !log.closed {
		t.Fatal("connection not closed after a failed flush")
	}
	log.fail = nil
	if _, err := c.Write([]byte("later")); err == nil {
		t.Fatal("a write after a failed flush succeeded")
	}
}

// The read-ahead hands mochi's small buffer exactly the byte stream the
// peer sent, whether data arrives in bursts or trickles.
func TestCorkReadAheadKeepsTheStream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(rand.IntN(256))
	}
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		for off := 0; off < len(want); {
			n := min(len(want)-off, 1+rand.IntN(5000))
			c.Write(want[off : off+n])
			off += n
			if rand.IntN(50) == 0 {
				time.Sleep(time.Millisecond) // let the reader catch up and go cold
			}
		}
	}()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := newCorkConn(nc)
	defer c.Close()
	if c.raw == nil {
		t.Fatal("no read-ahead on a TCP connection")
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReaderSize(c, clientReadBuffer) // as mochi reads
	got := make([]byte, 0, len(want))
	for len(got) < len(want) {
		if rand.IntN(2) == 0 {
			b, err := r.ReadByte()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, b)
			continue
		}
		p := make([]byte, min(len(want)-len(got), 1+rand.IntN(3000)))
		if _, err := io.ReadFull(r, p); err != nil {
			t.Fatal(err)
		}
		got = append(got, p...)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("stream read through corkConn differs from the one sent")
	}
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("after the stream: %v, want EOF", err)
	}
}

// A read waiting for data ends as a plain net.Conn's would: a timeout at
// the deadline (mochi's keep-alive), net.ErrClosed when closed.
func TestCorkReadErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := newCorkConn(nc)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var one [1]byte
	_, err = c.Read(one[:])
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	c.SetReadDeadline(time.Time{})
	go func() {
		time.Sleep(20 * time.Millisecond)
		c.Close()
	}()
	if _, err := c.Read(one[:]); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read of a closed connection: %v, want net.ErrClosed", err)
	}
}

package websocket

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	gws "github.com/gorilla/websocket"

	"github.com/junctionmq/junction/websocket/wstest"
)

// result is what a test handler saw.
type result struct {
	data []byte
	err  error
}

// collect reads everything with reads of random sizes and reports it.
func collect(seed uint64, out chan<- result) func(context.Context, net.Conn) {
	return func(_ context.Context, nc net.Conn) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var got []byte
		for {
			buf := make([]byte, 1+rng.IntN(5000))
			n, err := nc.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				out <- result{got, err}
				return
			}
		}
	}
}

// TestReadStream sends random sequences of text and binary messages,
// empty and fragmented ones, with pings between fragments, and checks
// that Read returns exactly their concatenation, then io.EOF on the
// close frame.
func TestReadStream(t *testing.T) {
	for seed := range uint64(30) {
		out := make(chan result, 1)
		handlers := map[string]func(context.Context, net.Conn){STOMP: collect(seed, out)}
		s := serve(t, Config{Handlers: handlers, PingInterval: -1})
		d := wstest.Dialer("v12.stomp")
		d.WriteBufferSize = 64 + int(seed)*37 // small: long messages go out in several frames
		ws, _, err := d.Dial(s.url("/"), nil)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 2))
		var want []byte
		for range 1 + rng.IntN(40) {
			typ := gws.BinaryMessage
			if rng.IntN(2) == 0 {
				typ = gws.TextMessage
			}
			msg := make([]byte, []int{0, 1, 2, 100, 4000, 70000}[rng.IntN(6)])
			for i := range msg {
				msg[i] = byte(rng.IntN(256))
			}
			want = append(want, msg...)
			w, err := ws.NextWriter(typ)
			if err != nil {
				t.Fatal(err)
			}
			for p := msg; len(p) > 0; {
				n := min(len(p), 1+rng.IntN(3000))
				if _, err := w.Write(p[:n]); err != nil {
					t.Fatal(err)
				}
				p = p[n:]
				if rng.IntN(4) == 0 { // a control frame inside a fragmented message
					ws.WriteControl(gws.PingMessage, []byte("x"), time.Now().Add(time.Second))
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
		ws.WriteControl(gws.CloseMessage, gws.FormatCloseMessage(gws.CloseNormalClosure, ""), time.Now().Add(time.Second))
		select {
		case r := <-out:
			if r.err != io.EOF || !bytes.Equal(r.data, want) {
				t.Fatalf("seed %d: read %d bytes (equal: %v), %v; want %d bytes, io.EOF",
					seed, len(r.data), bytes.Equal(r.data, want), r.err, len(want))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("seed %d: handler did not finish", seed)
		}
		wstest.ExpectClose(t, ws, gws.CloseNormalClosure)
		ws.Close()
	}
}

// TestBadFrames sends frames a client must not send: each closes the
// connection with 1002, Read fails, and keeps failing without reaching
// gorilla again (it panics after 1000 reads of a failed connection).
func TestBadFrames(t *testing.T) {
	for name, frame := range map[string][]byte{
		"unmasked":           {0x82, 0x01, 'x'},
		"reserved bits":      {0xc2, 0x81, 0, 0, 0, 0, 'x'},
		"bad opcode":         {0x83, 0x80, 0, 0, 0, 0},
		"long ping":          {0x89, 0xfe, 0x01, 0x00, 0, 0, 0, 0},
		"stray continuation": {0x80, 0x80, 0, 0, 0, 0},
	} {
		out := make(chan result, 1)
		s := serve(t, Config{Handlers: map[string]func(context.Context, net.Conn){
			MQTT: func(_ context.Context, nc net.Conn) {
				_, err := nc.Read(make([]byte, 10))
				for range 2000 {
					if _, err2 := nc.Read(make([]byte, 10)); err2 != err {
						out <- result{nil, errors.New("the error changed")}
						return
					}
				}
				out <- result{nil, err}
			},
		}})
		ws := wstest.Dial(t, s.url("/"), "mqtt")
		if _, err := ws.NetConn().Write(frame); err != nil {
			t.Fatal(err)
		}
		r := <-out
		if r.err == nil || r.err == io.EOF {
			t.Errorf("%s: Read = %v, want a protocol error", name, r.err)
		}
		wstest.ExpectClose(t, ws, gws.CloseProtocolError)
	}
}

func TestMessageTooBig(t *testing.T) {
	out := make(chan result, 1)
	s := serve(t, Config{Handlers: map[string]func(context.Context, net.Conn){MQTT: collect(1, out)}, MaxMessageSize: 1024})
	ws := wstest.Dial(t, s.url("/"), "mqtt")
	ws.WriteMessage(gws.BinaryMessage, make([]byte, 1024)) // at the limit: fine
	// Over it, split in fragments whose sum only is too big.
	w, _ := ws.NextWriter(gws.BinaryMessage)
	w.Write(make([]byte, 600))
	w.Write(make([]byte, 600))
	w.Close()
	wstest.ExpectClose(t, ws, gws.CloseMessageTooBig)
	r := <-out
	if len(r.data) != 1024 || !errors.Is(r.err, errMessageTooBig) {
		t.Fatalf("read %d bytes, %v; want 1024, errMessageTooBig", len(r.data), r.err)
	}
}

// TestTextOnBinaryProtocol: MQTT and AMQP take binary messages only.
func TestTextOnBinaryProtocol(t *testing.T) {
	for _, sub := range []string{"mqtt", "amqp"} {
		out := make(chan result, 1)
		s := serve(t, Config{Handlers: map[string]func(context.Context, net.Conn){MQTT: collect(1, out), AMQP: collect(1, out)}})
		ws := wstest.Dial(t, s.url("/"), sub)
		ws.WriteMessage(gws.BinaryMessage, []byte("ok"))
		ws.WriteMessage(gws.TextMessage, []byte("text"))
		wstest.ExpectClose(t, ws, gws.CloseUnsupportedData)
		r := <-out
		if string(r.data) != "ok" || !errors.Is(r.err, errTextMessage) {
			t.Fatalf("%s: read %q, %v; want \"ok\", errTextMessage", sub, r.data, r.err)
		}
	}
}

// TestWriteKinds: STOMP answers in the kind of message the client last
// sent, binary when the bytes are not UTF-8; MQTT always in binary.
func TestWriteKinds(t *testing.T) {
	s := serve(t, Config{Handlers: allHandlers(echo)})
	st := wstest.Dial(t, s.url("/"), "v12.stomp")
	for _, tt := range []struct {
		in   int
		data string
		want int
	}{
		{gws.TextMessage, "CONNECT\n\n\x00", gws.TextMessage},
		{gws.BinaryMessage, "SEND\n\n\x00", gws.BinaryMessage},
		{gws.TextMessage, "x\xffy", gws.BinaryMessage}, // not UTF-8
		{gws.TextMessage, "héllo", gws.TextMessage},
	} {
		st.WriteMessage(tt.in, []byte(tt.data))
		var got []byte
		var typ int
		for len(got) < len(tt.data) {
			var p []byte
			typ, p = wstest.ReadMessage(t, st)
			got = append(got, p...)
		}
		if typ != tt.want || string(got) != tt.data {
			t.Errorf("sent %q as %d: echoed %q as %d, want %d", tt.data, tt.in, got, typ, tt.want)
		}
	}
	mq := wstest.Dial(t, s.url("/"), "mqtt")
	mq.WriteMessage(gws.BinaryMessage, []byte("abc"))
	if typ, p := wstest.ReadMessage(t, mq); typ != gws.BinaryMessage || string(p) != "abc" {
		t.Errorf("mqtt echo %q as %d, want binary", p, typ)
	}
}

// TestConcurrentWrites writes from several goroutines while pings go
// out as fast as they can, as the pinger sends them: run with -race,
// gorilla panics on concurrent writers.
func TestConcurrentWrites(t *testing.T) {
	const writers, each = 8, 200
	s := serve(t, Config{Handlers: map[string]func(context.Context, net.Conn){
		MQTT: func(ctx context.Context, nc net.Conn) {
			// Reading all along, as protocols do: pongs are seen by reads.
			read := make(chan struct{})
			go func() {
				defer close(read)
				io.Copy(io.Discard, nc)
			}()
			defer func() { nc.Close(); <-read }()
			var wg sync.WaitGroup
			pinging := make(chan struct{})
			go func() {
				defer close(pinging)
				for nc.(*conn).ws.WriteControl(gws.PingMessage, nil, time.Now().Add(time.Second)) == nil {
				}
			}()
			defer func() { nc.Close(); <-pinging }()
			for range writers {
				wg.Go(func() {
					for range each {
						if _, err := nc.Write([]byte("0123456789")); err != nil {
							return
						}
					}
				})
			}
			wg.Wait()
			<-read // until the client closes
		},
	}})
	ws := wstest.Dial(t, s.url("/"), "mqtt")
	for n := 0; n < writers*each; n++ {
		if _, p := wstest.ReadMessage(t, ws); string(p) != "0123456789" {
			t.Fatalf("message %d: %q", n, p)
		}
	}
}

func TestCloseCodes(t *testing.T) {
	s := serve(t, Config{Handlers: map[string]func(context.Context, net.Conn){
		STOMP: func(_ context.Context, nc net.Conn) {
			nc.Write([]byte("bye"))
		},
	}})
	ws := wstest.Dial(t, s.url("/stomp"))
	if _, p := wstest.ReadMessage(t, ws); string(p) != "bye" {
		t.Fatalf("got %q", p)
	}
	wstest.ExpectClose(t, ws, gws.CloseNormalClosure)
}

// TestCloseWaitsForPeer: a handler that ends while the client is still
// sending closes after the client's close frame, so the client reads the
// last message rather than a reset.
func TestCloseWaitsForPeer(t *testing.T) {
	s := serve(t, Config{Handlers: map[string]func(context.Context, net.Conn){
		STOMP: func(_ context.Context, nc net.Conn) {
			nc.Read(make([]byte, 1))
			nc.Write([]byte("last words"))
		},
	}})
	ws := wstest.Dial(t, s.url("/stomp"))
	done := make(chan struct{})
	go func() { // keep sending, unread by the server
		defer close(done)
		for {
			if err := ws.WriteMessage(gws.BinaryMessage, make([]byte, 16<<10)); err != nil {
				return
			}
		}
	}()
	if _, p := wstest.ReadMessage(t, ws); string(p) != "last words" {
		t.Fatalf("got %q", p)
	}
	wstest.ExpectClose(t, ws, gws.CloseNormalClosure) // gorilla answers the close frame while reading it
	<-done
}

func TestReadDeadline(t *testing.T) {
	out := make(chan error, 2)
	s := serve(t, Config{Handlers: map[string]func(context.Context, net.Conn){
		MQTT: func(_ context.Context, nc net.Conn) {
			nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			_, err := nc.Read(make([]byte, 10))
			out <- err
			nc.SetReadDeadline(time.Time{})
			_, err = nc.Read(make([]byte, 10))
			out <- err
		},
	}})
	wstest.Dial(t, s.url("/"), "mqtt")
	err := <-out
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past the deadline = %v, want a timeout wrapping os.ErrDeadlineExceeded", err)
	}
	if err2 := <-out; err2 != err {
		t.Fatalf("the next Read = %v, want the same error", err2)
	}
}

func TestWriteDeadline(t *testing.T) {
	out := make(chan error, 1)
	s := serve(t, Config{Handlers: map[string]func(context.Context, net.Conn){
		MQTT: func(_ context.Context, nc net.Conn) {
			nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			buf := make([]byte, 1<<20)
			for {
				if _, err := nc.Write(buf); err != nil {
					out <- err
					return
				}
			}
		},
	}})
	wstest.Dial(t, s.url("/"), "mqtt") // never reads
	select {
	case err := <-out:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Write past the deadline = %v, want os.ErrDeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Write did not time out")
	}
}

func TestUseAfterClose(t *testing.T) {
	out := make(chan [2]error, 1)
	s := serve(t, Config{Handlers: map[string]func(context.Context, net.Conn){
		MQTT: func(_ context.Context, nc net.Conn) {
			nc.Close()
			_, rerr := nc.Read(make([]byte, 1))
			_, werr := nc.Write([]byte("x"))
			if err := nc.Close(); err != nil {
				werr = errors.New("second Close failed")
			}
			out <- [2]error{rerr, werr}
		},
	}})
	ws := wstest.Dial(t, s.url("/"), "mqtt")
	wstest.ExpectClose(t, ws, gws.CloseNormalClosure)
	errs := <-out
	if !errors.Is(errs[0], net.ErrClosed) || !errors.Is(errs[1], net.ErrClosed) {
		t.Fatalf("Read, Write after Close = %v, %v; want net.ErrClosed", errs[0], errs[1])
	}
}

// TestPingTimeout: a client that never reads never answers pings, and is
// disconnected after two intervals; one that reads stays.
func TestPingTimeout(t *testing.T) {
	out := make(chan result, 2)
	s := serve(t, Config{PingInterval: 20 * time.Millisecond, Handlers: map[string]func(context.Context, net.Conn){
		MQTT: collect(1, out),
	}})
	live := wstest.Dial(t, s.url("/"), "mqtt")
	go func() {
		for {
			if _, _, err := live.ReadMessage(); err != nil { // answers pings
				return
			}
		}
	}()
	begin := time.Now()
	wstest.Dial(t, s.url("/"), "mqtt") // never reads
	select {
	case r := <-out:
		if !errors.Is(r.err, errPingTimeout) {
			t.Fatalf("Read = %v, want errPingTimeout", r.err)
		}
		if el := time.Since(begin); el < 40*time.Millisecond {
			t.Fatalf("disconnected after %v, before two intervals", el)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("silent client not disconnected")
	}
	time.Sleep(200 * time.Millisecond) // ten intervals
	if n := s.h.Connections(); n != 1 {
		t.Fatalf("Connections = %d, want the live client still there", n)
	}
}

// TestRemoteAddr: the handler sees the TCP peer, whatever the headers say.
func TestRemoteAddr(t *testing.T) {
	addrs := make(chan [2]string, 1)
	s := serve(t, Config{Handlers: map[string]func(context.Context, net.Conn){
		MQTT: func(_ context.Context, nc net.Conn) {
			addrs <- [2]string{nc.RemoteAddr().String(), nc.LocalAddr().String()}
		},
	}})
	ws, _, err := wstest.Dialer("mqtt").Dial(s.url("/"), http.Header{"X-Forwarded-For": {"203.0.113.9"}, "X-Real-Ip": {"203.0.113.9"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	a := <-addrs
	if a[0] != ws.LocalAddr().String() || a[1] != s.addr {
		t.Fatalf("handler saw remote %s local %s; want %s, %s", a[0], a[1], ws.LocalAddr(), s.addr)
	}
}

// TestNetConn: the handler's conn leads to the TCP connection underneath
// (for a front-end's abortive close, as the cluster's fence needs); a
// reset of it ends the client's connection.
func TestNetConn(t *testing.T) {
	done := make(chan error, 1)
	s := serve(t, Config{Handlers: map[string]func(context.Context, net.Conn){
		MQTT: func(_ context.Context, nc net.Conn) {
			w, ok := nc.(interface{ NetConn() net.Conn })
			if !ok {
				done <- errors.New("the handler's conn has no NetConn method")
				return
			}
			tcp, ok := w.NetConn().(*net.TCPConn)
			if !ok {
				done <- errors.New("NetConn is not the TCP connection")
				return
			}
			tcp.SetLinger(0)
			done <- tcp.Close()
		},
	}})
	ws, _, err := wstest.Dialer("mqtt").Dial(s.url("/"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := ws.ReadMessage(); err == nil {
		t.Fatal("read a message from a reset connection")
	}
}

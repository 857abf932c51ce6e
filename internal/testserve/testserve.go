// Package testserve runs a protocol handler on a loopback port for tests,
// with the ten-line accept loop every protocol package's tests need, the
// bounded wait they share, a wave of clients leaving at once, a fuzz
// target's connection (Feed), the two ends of a loopback TCP
// connection, and a journal that accepts everything. It is imported by tests only, and imports nothing of ours.
package testserve

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Serve accepts connections on 127.0.0.1 (a free port) and serves each
// with handle in its own goroutine. It returns the address and a stop
// function that closes the listener, cancels the handlers' context and
// waits for them; stop is idempotent and also runs at test cleanup.
func Serve(t testing.TB, handle func(context.Context, net.Conn)) (addr string, stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				handle(ctx, nc)
			}()
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			l.Close()
			cancel()
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return l.Addr().String(), stop
}

// Eventually polls cond every 5 ms for up to 5 s, and fails the test,
// naming what it waited for, if cond is still false.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Wave is a wave of clients leaving at once. It joins n clients with
// join, one at a time on the test's goroutine (join may fail the test),
// then runs leave for every one of them on a goroutine of its own, all
// released together, and waits for them: an error from leave fails the
// test, naming the client. Last it waits up to 10 s for open to report
// no session left in the broker and no connection in the server.
func Wave[C any](t testing.TB, n int, join func(i int) C, leave func(i int, c C) error, open func() (sessions, conns int)) {
	t.Helper()
	clients := make([]C, n)
	for i := range clients {
		clients[i] = join(i)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := leave(i, c); err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		sessions, conns := open()
		if sessions == 0 && conns == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions and %d connections left", sessions, conns)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Feed serves one connection with handle over an in-memory pipe, writes
// hello and then input to it (both within 2 s), drains what it answers,
// closes it, and fails the test unless handle returns within 5 s: a
// front-end's fuzz target, which must end a connection once the client
// stops, whatever came (no hang, no panic).
func Feed(t testing.TB, handle func(context.Context, net.Conn), hello, input []byte) {
	t.Helper()
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		handle(context.Background(), server)
	}()
	go io.Copy(io.Discard, client) // drain whatever the server says
	client.SetWriteDeadline(time.Now().Add(2 * time.Second))
	client.Write(hello)
	client.Write(input)
	client.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("connection did not end after the client closed (input %q)", input)
	}
}

// Pair returns both ends of a loopback TCP connection, closed when the
// test ends.
func Pair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// NopJournal is a journal that accepts every record and forgets it: each
// completion is called at once, on a goroutine of its own. It satisfies
// core.Journal structurally (testserve imports nothing of ours); a test
// embeds it to fake one method.
type NopJournal struct{}

func (NopJournal) Append(_ uint64, _ uint16, _ []byte, _ bool, done func(error)) {
	if done != nil {
		go done(nil)
	}
}
func (NopJournal) Update(_ uint64, _ uint16, _ []byte, _ bool, done func(error)) {
	if done != nil {
		go done(nil)
	}
}
func (NopJournal) Delete(_ uint64, _ bool, done func(error)) {
	if done != nil {
		go done(nil)
	}
}
func (NopJournal) Replay(_, _ func(uint64, uint16, []byte) error) error { return nil }
func (NopJournal) MaxID() uint64                                        { return 0 }
func (NopJournal) AppendTx(_, _ uint64, _ uint16, _ []byte)             {}
func (NopJournal) UpdateTx(_, _ uint64, _ uint16, _ []byte)             {}
func (NopJournal) DeleteTx(_, _ uint64)                                 {}
func (NopJournal) Commit(_ uint64, done func(error))                    { go done(nil) }
func (NopJournal) Rollback(_ uint64, done func(error))                  { go done(nil) }

// Package testserve runs a protocol handler on a loopback port for tests,
// with the ten-line accept loop every protocol package's tests need, and
// the bounded wait they share. It is imported by tests only.
package testserve

import (
	"context"
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

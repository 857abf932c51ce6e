package main

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/persistence/fs"
	"github.com/junctionmq/junction/persistence/journal"
	"github.com/junctionmq/junction/stomp"
	"github.com/junctionmq/junction/transports"
)

// TestDurableSendDuringDiskFault drives a broker whose message journal
// sits on a file system that starts failing syncs (EIO) or writes
// (ENOSPC): a durable SEND during the fault gets an ERROR, never a
// receipt, and what was confirmed before survives a reopen.
func TestDurableSendDuringDiskFault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		op    fs.Op
		errno syscall.Errno
	}{{"sync fails with EIO", fs.OpDatasync, syscall.EIO}, {"write fails with ENOSPC", fs.OpWrite, syscall.ENOSPC}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			faulty := fs.NewFaulty(fs.OS(), nil)
			open := func(f fs.FS) (*journal.Journal, *journal.Journal) {
				m, err := journal.Open(journal.Config{Dir: filepath.Join(dir, "journal"), FS: f, FileSize: 256 << 10})
				if err != nil {
					t.Fatal(err)
				}
				b, err := journal.Open(journal.Config{Dir: filepath.Join(dir, "bindings"), FileSize: 64 << 10})
				if err != nil {
					t.Fatal(err)
				}
				return m, b
			}
			msgs, bindings := open(faulty)
			b, err := core.New(core.Config{Messages: msgs, Bindings: bindings})
			if err != nil {
				t.Fatal(err)
			}
			addr, stopServer := serveStomp(t, b)
			c, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
			if err != nil {
				t.Fatal(err)
			}
			durable := []func(*frame.Frame) error{gostomp.SendOpt.Receipt, gostomp.SendOpt.Header("persistent", "true")}
			for _, body := range []string{"one", "two"} {
				if err := c.Send("/queue/safe", "text/plain", []byte(body), durable...); err != nil {
					t.Fatalf("send before the fault: %v", err)
				}
			}
			faulty.SetInjector(fs.FailMatching(func(op fs.Op, name string) bool { return op == tc.op }, tc.errno))
			err = c.Send("/queue/safe", "text/plain", []byte("during the fault"), durable...)
			if err == nil {
				t.Fatal("a durable send during the fault was confirmed")
			}
			if !strings.Contains(err.Error(), "send failed") {
				t.Fatalf("client error %q, want the broker's ERROR saying the send failed", err)
			}
			// Other clients are told too: the journal refuses every
			// durable append until restart.
			c2, err := gostomp.Dial("tcp", addr, gostomp.ConnOpt.HeartBeat(0, 0), quiet)
			if err != nil {
				t.Fatal(err)
			}
			if err := c2.Send("/queue/safe", "text/plain", []byte("after"), durable...); err == nil {
				t.Fatal("a durable send after the fault was confirmed")
			}
			stopServer()
			b.Close()
			msgs.Close()
			bindings.Close()

			// Reopen on a healthy file system: both confirmed messages are there.
			msgs2, bindings2 := open(fs.OS())
			defer msgs2.Close()
			defer bindings2.Close()
			b2, err := core.New(core.Config{Messages: msgs2, Bindings: bindings2})
			if err != nil {
				t.Fatal(err)
			}
			defer b2.Close()
			s, _ := b2.NewSession(core.SessionOptions{})
			got := make(chan string, 10)
			s.Subscribe(core.ConsumerOptions{Address: "safe", RoutingType: core.Anycast, Credit: 10,
				Handler: func(d core.Delivery) { got <- string(d.Message.Body) }})
			for _, want := range []string{"one", "two"} {
				select {
				case g := <-got:
					if g != want {
						t.Fatalf("after reopen got %q, want %q", g, want)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("confirmed message %q lost", want)
				}
			}
			select {
			case g := <-got:
				if g == "during the fault" || g == "after" {
					// It may have reached the disk without being
					// confirmed; that is allowed, losing "one" is not.
					t.Logf("unconfirmed message %q survived", g)
				}
			case <-time.After(50 * time.Millisecond):
			}
		})
	}
}

// serveStomp serves STOMP for b on a loopback port through the real
// listener.
func serveStomp(t *testing.T, b *core.Broker) (string, func()) {
	t.Helper()
	srv := stomp.New(stomp.Config{}, b)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &transports.Server{Name: "stomp", Handler: srv.ServeConn}
	go ts.Serve(l)
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ts.Shutdown(ctx)
	}
	t.Cleanup(stop)
	return l.Addr().String(), stop
}

package transports_test

import (
	"bytes"
	"context"
	"net"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/junctionmq/junction/transports"
)

// A connection's goroutine carries the pprof labels transport and
// remote, in the goroutine profile and in the handler's context.
func TestConnectionLabels(t *testing.T) {
	l, err := transports.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		ctxLabel string
		profile  string
	}
	got := make(chan seen, 1)
	srv := &transports.Server{Name: "labelled", Handler: func(ctx context.Context, c net.Conn) {
		v, _ := pprof.Label(ctx, "transport")
		var b bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&b, 1)
		got <- seen{v, b.String()}
	}}
	go srv.Serve(l)
	defer srv.Close()
	c, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case s := <-got:
		if s.ctxLabel != "labelled" {
			t.Errorf("context label transport = %q", s.ctxLabel)
		}
		want := `"remote":"` + c.LocalAddr().String() + `", "transport":"labelled"`
		if !strings.Contains(s.profile, want) {
			t.Errorf("goroutine profile has no %s", want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler not called")
	}
}

package websocket_test

import (
	"testing"

	jws "github.com/junctionmq/junction/websocket"
	"github.com/junctionmq/junction/websocket/wstest"
)

// served is a Handler serving on a loopback port through Handler.Serve.
type served struct {
	h    *jws.Handler
	addr string // host:port
}

// serve starts h on 127.0.0.1:0; cleanup closes it and checks that
// Serve returned http.ErrServerClosed (wstest.Serve).
func serve(t *testing.T, cfg jws.Config) *served {
	t.Helper()
	h, err := jws.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &served{h: h, addr: wstest.Serve(t, h)}
}

func (s *served) url(path string) string { return "ws://" + s.addr + path }

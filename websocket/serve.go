package websocket

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// newServer returns an http.Server for h with the configured limits.
func (h *Handler) newServer(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: h.cfg.HandshakeTimeout,
		IdleTimeout:       h.cfg.HandshakeTimeout, // between requests that were not upgrades
		MaxHeaderBytes:    h.cfg.MaxHeaderBytes,
		ErrorLog:          h.errorLog,
		// No HTTP/2 over TLS: WebSocket over HTTP/2 (RFC 8441) is not
		// served, and an h2 connection could not be upgraded.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
}

// Serve accepts connections on l and serves WebSocket upgrades on them,
// with an http.Server bounded by HandshakeTimeout and MaxHeaderBytes,
// until [Handler.Shutdown] or [Handler.Close], after which it returns
// [http.ErrServerClosed]. It closes l before returning. It may be called
// with several listeners.
func (h *Handler) Serve(l net.Listener) error {
	srv := h.newServer(h)
	if !h.addServer(srv) {
		l.Close()
		return http.ErrServerClosed
	}
	defer h.removeServer(srv)
	return srv.Serve(l)
}

// ServeConn serves one accepted connection as HTTP, as Serve would, and
// returns once nc is done with: after the WebSocket session it was
// upgraded to has ended, or once the HTTP exchange ended without an
// upgrade (refused, or the peer left). Cancelling ctx ends the session
// the way Shutdown does. nc is closed before ServeConn returns.
//
// It has the shape of a listener's handler, so a one-port listener that
// recognises an HTTP request can pass the connection on, with whatever
// it already read put back in front.
func (h *Handler) ServeConn(ctx context.Context, nc net.Conn) {
	l := &connListener{nc: nc, addr: nc.LocalAddr(), done: make(chan struct{})}

	// The connection is finished when the http.Server has closed it, or
	// when the handler that hijacked it (ServeHTTP, running the session)
	// has returned. Either is the last thing the server's connection
	// goroutine does.
	finished := make(chan struct{})
	var finishOnce sync.Once
	finish := func() {
		finishOnce.Do(func() { close(finished) })
		l.Close()
	}
	var hijacked atomic.Bool
	srv := h.newServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if hijacked.Load() {
				finish()
			}
		}()
		h.ServeHTTP(w, r)
	}))
	srv.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateHijacked: // set in the handler's goroutine, before Hijack returns
			hijacked.Store(true)
		case http.StateClosed:
			finish()
		}
	}
	if !h.addServer(srv) {
		nc.Close()
		return
	}
	defer h.removeServer(srv)

	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(closed)
		srv.Close() // the listener, and nc unless it was upgraded
	})
	srv.Serve(l) // returns once l is closed: by finish, or srv.Close
	if c := l.take(); c != nil {
		c.Close() // closed before the server took it
	} else {
		<-finished
	}
	if !stop() {
		<-closed
	}
}

// connListener is a net.Listener that returns one connection, then
// blocks until closed.
type connListener struct {
	addr net.Addr
	done chan struct{}
	once sync.Once

	mu sync.Mutex
	nc net.Conn // guarded by mu; nil once accepted
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, net.ErrClosed
	default:
	}
	if c := l.take(); c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

// take returns the connection if it was not accepted yet, and forgets it.
func (l *connListener) take() net.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.nc
	l.nc = nil
	return c
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

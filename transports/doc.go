// Package transports accepts network connections and hands each one to a
// protocol handler. It is shared by every protocol Junction speaks (STOMP,
// MQTT, AMQP, WebSocket) and imports nothing of Junction's: the seam is
// [net.Listener] in and [Handler], a plain func(context.Context, net.Conn),
// out.
//
// [Server] has net/http's shape. Its zero value is usable once Handler is
// set; [Server.Serve] runs one accept loop per listener and may be called
// with several listeners; [Server.Shutdown] and [Server.Close] cover them
// all and are idempotent.
//
//	srv := &transports.Server{Name: "stomp", Handler: stompServer.ServeConn, MaxConns: 1000}
//	l, err := net.Listen("tcp", "127.0.0.1:61613")
//	if err != nil { ... }
//	go func() { errc <- srv.Serve(l) }() // ErrServerClosed after Shutdown
//	...
//	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
//	defer cancel()
//	if err := srv.Shutdown(ctx); err != nil { ... } // context.DeadlineExceeded: stragglers were force-closed
//
// # Connections
//
// Each accepted connection is served by one goroutine owned by the Server:
// it is registered (in the Server's connection table and goroutine count)
// before it starts, and none is started once shutdown has begun. The accept
// loop never reads from, writes to or waits on a connection, so one slow
// peer cannot delay the next accept. Goroutines carry pprof labels
// "transport" (the Server's Name) and "remote" (the peer address), so a
// goroutine dump names the connection.
//
// Over [Server.MaxConns] a new connection is counted in [Stats].Rejected
// and closed at once, or handed first to [Server.OnLimit] so the protocol
// can say why (a STOMP ERROR frame, an MQTT CONNACK with a reason code).
//
// TCP options are the net package's defaults: Go already disables Nagle's
// algorithm (TCP_NODELAY), and listeners made by [net.Listen] (as
// [Server.ListenAndServe] does) enable keep-alive probes every 15 seconds.
// A caller that wants other settings builds its listener with
// [net.ListenConfig] and passes it to Serve.
//
// # Shutdown
//
// [Server.Shutdown] closes every listener, so each Serve returns
// [ErrServerClosed]; cancels the context given to every Handler, so each
// protocol can say goodbye to its peer and return; and waits for the
// handlers until its own context is done. If that comes first, it
// force-closes the connections still open, which makes a handler blocked
// in Read or Write return, and reports the context's error.
// [Server.Close] does the same without the grace period and waits for
// every handler to return.
//
// # Callbacks
//
// [Events] callbacks and OnLimit are never called with a lock held. They
// run in the connection's own goroutine, except OnAcceptError, which runs in
// the accept loop and must therefore be quick. They are meant for logging
// and metrics in cmd; the counters in [Stats] need no callback at all.
//
// A panic in a Handler is not recovered: the protocol package decides
// whether and where to recover, since only it knows what state a panic
// may have left behind.
package transports

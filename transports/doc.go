// Package transports accepts network connections, optionally over TLS and
// optionally recognising the protocol from the first bytes, and hands
// each one to a protocol handler. It is shared by every protocol Junction speaks (STOMP,
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
// Per source IP, [Server.MaxConnsPerIP] caps the connections open at once
// (rejected like MaxConns, through OnLimit), and [Server.ConnRatePerIP]
// with ConnBurstPerIP is a token bucket of connection attempts: an
// attempt over it is closed at once, before any protocol work and
// without OnLimit, so a flood from one address costs an accept and a
// close. Both are checked in the accept loop. The table of sources is
// bounded (MaxTrackedIPs) and pruned as connections close and on accept,
// with no goroutine of its own. Each rejection is counted in [Stats] by
// reason and reported to Events.OnReject, which must aggregate rather
// than log a line per attempt.
//
// TCP options are the net package's defaults: Go already disables Nagle's
// algorithm (TCP_NODELAY), and accepted connections get keep-alive probes
// every 15 seconds. [Listen] (which [Server.ListenAndServe] uses) sets
// those probes once on the listening socket, which accepted connections
// inherit on Linux, rather than on each connection. A caller that wants
// other settings builds its listener with [net.ListenConfig] and passes
// it to Serve.
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
// # One port for all protocols
//
// [Mux] is a Handler that reads the first bytes of a connection and
// hands it to the first registered [Protocol] whose Detect recognises
// them; cmd registers each protocol's own Detect (stomp.Detect,
// mqtt.Detect, amqp.Detect) with [DetectHTTP] for WebSocket upgrades and
// [DetectTLS] for TLS. Detection runs in the connection's goroutine, off
// the accept loop, under one absolute read deadline (DetectTimeout) that
// a client sending a byte at a time cannot extend, and reads at most
// MaxPrefix bytes: a silent or dribbling client is closed when the
// deadline passes, garbage once MaxPrefix bytes have failed to match,
// each with one OnUnknown call for the log. The chosen Handler gets a
// net.Conn that replays the bytes read before reading on; every other
// method is the underlying conn's, and the deadline is cleared first.
//
// # TLS
//
// [TLSConfig] loads a certificate, its key and optionally client CAs
// from PEM files (TLS 1.2 at least), and returns a [CertReloader] whose
// Reload reads them again for new handshakes, keeping the old ones if
// the new files are bad. [TLSHandler] is a Handler that performs the
// server handshake in the connection's goroutine, bounded by
// HandshakeTimeout and by shutdown, then passes the *tls.Conn on. They
// compose with Mux both ways: a Mux behind a TLSHandler detects on the
// decrypted stream; a TLSHandler registered in a Mux with DetectTLS
// serves TLS and plaintext clients on one port.
//
// A protocol handler learns about TLS from its conn alone, whatever
// wrappers this package put around it: [ConnectionState] and
// [PeerCertificate] look through them, and since every wrapper (like
// *tls.Conn) has a ConnectionState() tls.ConnectionState method, a
// protocol package, which may not import this one, asserts that
// interface and checks HandshakeComplete. Wrappers also have NetConn, as
// *tls.Conn does; a handler must not read from what NetConn returns,
// which would skip replayed bytes. A type assertion to *net.TCPConn
// fails behind a Mux or TLS, as it should: the raw socket does not hold
// what the wrapper holds.
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

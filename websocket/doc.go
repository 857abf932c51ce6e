// Package websocket carries Junction's protocols over WebSocket (RFC
// 6455): it upgrades HTTP requests, chooses the protocol, and hands each
// connection, as a plain [net.Conn], to that protocol's handler, a
// func(context.Context, net.Conn) such as stomp.Server.ServeConn. It
// imports nothing of Junction's; cmd wires the handlers in.
//
//	h, err := websocket.New(websocket.Config{Handlers: map[string]func(context.Context, net.Conn){
//		websocket.STOMP: stompServer.ServeConn,
//		websocket.MQTT:  mqttServer.ServeConn,
//		websocket.AMQP:  amqpServer.ServeConn,
//	}})
//	go h.Serve(l)                 // or mount h on any http.Server, or h.ServeConn(ctx, nc) per connection
//	...
//	err = h.Shutdown(ctx)         // http.Server.Shutdown does not wait for upgraded connections
//
// # Choosing the protocol
//
// The client's Sec-WebSocket-Protocol lists subprotocols in its order of
// preference; the server answers with the first one it serves, and never
// with one the client did not offer (RFC 6455 §4.2.2):
//
//	STOMP  v12.stomp, v11.stomp, v10.stomp, stomp   (stompjs offers v12.stomp, v11.stomp, v10.stomp)
//	MQTT   mqtt, mqttv3.1                           (MQTT.js and paho offer mqtt; MQTT 3.1 clients mqttv3.1)
//	AMQP   amqp, AMQPWSB10                          (the AMQP WebSocket Binding; AMQPWSB10 is its drafts' name)
//
// A client that offers no subprotocol is served by path: /stomp, /mqtt
// or /amqp (a trailing slash is allowed), and the answer carries no
// Sec-WebSocket-Protocol. On one of those paths only that protocol's
// subprotocols are chosen; on any other path any served one is. A
// request that offers subprotocols none of which can be chosen is
// refused with 400 and a text naming what is served, rather than
// upgraded without a subprotocol: a browser fails such a connection
// anyway, and the refusal says why. A request that is not an upgrade
// gets 426, one from an origin not allowed 403.
//
// # Hosts and origins
//
// [Config].AllowHost says which Host headers name this server. A page on
// a DNS-rebinding domain (attacker.example, re-resolved to 127.0.0.1
// once loaded) reaches a loopback port same-origin with itself, and its
// Origin matches its Host; only the Host shows where the browser thinks
// it is. So a request whose Host AllowHost refuses is answered 421
// Misdirected Request before anything else, never upgraded. cmd builds
// the function from an allow-list (internal/hostlist); this package
// knows no names of its own.
//
// Origins are checked by default: a browser page may connect when its
// origin's host[:port] passes AllowHost (a console on another port of
// the same host, a page served from localhost); without AllowHost, no
// page may. [Config].AllowedOrigins replaces that policy, "*" allowing
// any origin. A request without an Origin header is not from a browser
// and is allowed. The request's own Host is never evidence: the
// rebinding page chooses it.
//
// # The connection
//
// Read returns the payloads of the client's data messages as one byte
// stream: a protocol frame may span several messages, or several frames
// share one. Each Write is sent as one message. STOMP accepts text and
// binary messages and answers in the kind the client last sent (binary
// if the bytes are not valid UTF-8, as a binary body may not be: a text
// message must be UTF-8); MQTT and AMQP require binary messages, and a
// text message closes the connection with 1003. Writes are serialised by
// a mutex (gorilla/websocket panics on concurrent writers); pings and
// close frames use WriteControl, which may run alongside. RemoteAddr is
// the TCP peer's address; no header (X-Forwarded-For) is trusted.
//
// A message over [Config].MaxMessageSize closes the connection with 1009
// before its payload is read, and a protocol violation (an unmasked or
// reserved frame) with 1002. A close frame from the client ends Read
// with io.EOF. When the protocol handler returns, the connection is
// closed with 1000 (1001 while shutting down), after waiting up to a
// second for the client's close frame so that a client still sending
// does not get a TCP reset that could discard the protocol's last words.
//
// Deadlines are the TCP connection's. After a read deadline has passed,
// reads keep failing (with an error wrapping os.ErrDeadlineExceeded):
// gorilla cannot resume a read it abandoned mid-frame, so a deadline ends
// the connection's reading for good. Junction's protocols use read
// deadlines only to end a connection.
//
// A ping is sent every [Config].PingInterval; a client from which
// nothing (data, pong or ping) arrives for two intervals in a row is
// disconnected. Pongs are seen only while the protocol handler reads:
// Junction's handlers always do, except while a client that does not
// read its own deliveries holds them back.
//
// # Goroutines and shutdown
//
// A session runs in the goroutine of the HTTP server that called
// ServeHTTP (hijacked connections stay in their handler), and the
// Handler counts it. Pings run in timer callbacks, stopped and waited for
// when the connection closes. [Handler.Shutdown] refuses new upgrades,
// cancels each session's context so that the protocol says goodbye its
// own way (STOMP an ERROR frame, AMQP a close with
// amqp:connection:forced, MQTT closes the connection), waits for the
// handlers until its context is done, and then closes what is left.
// [Handler.Close] does not wait. Both stop the http.Servers that Serve
// and ServeConn run.
//
// [Handler.ServeConn] serves one accepted connection through an
// http.Server over a listener that returns only that connection, so it
// takes the same path as any other request; it returns when the
// connection is done with, and leaves no goroutine behind.
//
// permessage-deflate is not offered.
package websocket

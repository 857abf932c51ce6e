// Package guard bounds what a client can make a front-end read and hold:
// the broker-wide budget of bytes received from clients that have not yet
// authenticated ([Budget]), and the time one frame may take to arrive once
// it has begun ([Clock]).
//
// Both sit below a front-end's buffered reader, on the connection's byte
// stream, so they need no knowledge of a protocol's framing beyond the
// two signals a front-end gives: "a frame begins" and "a frame ends".
// Each protocol package (stomp, mqtt, amqp) wires them into its own
// reader; the broker owns the one Budget (core.Broker.PreAuth).
//
// # Pre-authentication budget
//
// A connection opens an [Account] when it is accepted and charges it
// with the bytes it receives until the client has authenticated; the
// account is closed then (or when the connection ends), which gives its
// bytes back. Each account charges at most its limit (the protocol's
// largest pre-authentication frame plus its reader's buffer): a client
// cannot make the front-end hold more than one such frame before it has
// logged in, and bytes past the limit are refused by the front-end's own
// frame limit. When the budget has no room for a charge, the charge fails
// with [ErrBudget] and the front-end refuses the connection. An idle
// connection holds nothing of the budget; one that sends a 200-byte
// CONNECT holds 200 bytes of it, so a reconnect storm of ordinary clients
// is not mistaken for an attack.
//
// # Frame clock
//
// A [Clock] bounds how long the front-end waits for the rest of a frame
// once its first byte has arrived: in all, the reads that wait for the
// frame's bytes may take Rule.Timeout plus the frame's bytes received so
// far divided by Rule.MinRate. A client that uploads a large body at
// MinRate or faster always stays ahead of the bound; one that trickles a
// frame a byte at a time is cut after Timeout (at most an eighth of it
// later: the deadline set on the connection stands for many reads, so a
// steady upload does not set one per read). Only time spent waiting
// for the client counts: while the front-end is busy with the previous
// frame (or waits for room in a full address) the clock does not run, so
// back-pressure from the broker is never charged to the client. Between
// frames the owner's own read deadline (heart-beats, keep-alive, idle
// timeout) applies alone.
package guard

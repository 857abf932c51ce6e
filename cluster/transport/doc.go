// Package transport carries frames between the nodes of a Junction
// cluster: authenticated, framed links, one per peer and [Lane], that
// never block the caller.
//
//	t, err := transport.New(transport.Config{
//		NodeID: 1, Listen: "10.0.0.1:7000",
//		Peers:  map[uint64]string{2: "10.0.0.2:7000", 3: "10.0.0.3:7000"},
//		TLS:    nodeTLS, Secret: secret,
//		Handler: func(from uint64, lane transport.Lane, frame []byte) { ... },
//		OnUnreachable: func(to uint64) { ... }, // raft's ReportUnreachable
//	})
//	ok := t.Send(2, transport.LaneRaft, msg) // copies msg; false = dropped
//
// # Connections
//
// A node dials its own connection to every peer for every lane and only
// writes on it; a connection it accepts is only read (after the
// handshake, neither side writes anything else). Two nodes therefore
// talk over six TCP connections, three each way, and a proxy on one
// directed connection (internal/faultproxy) can cut exactly one
// direction. Lanes keep traffic classes apart: a snapshot on [LaneBulk]
// never delays a heartbeat on [LaneRaft].
//
// A dialer reconnects with capped exponential backoff and jitter. A
// [Transport.Send] while the link is down, or with the lane's queue full,
// drops the frame, counts it and arranges a call to OnUnreachable (at
// most one per peer every 100 ms, from the transport's own goroutine).
// Frames are delivered in order per connection; across a reconnection
// frames can be lost (the queue of a broken connection is dropped),
// never duplicated.
//
// # Handshake
//
// Every connection starts with a handshake, bounded by HandshakeTimeout,
// after TLS when configured (TLS 1.3, certificates verified against the
// cluster's CA both ways). All integers are big-endian.
//
//	dialer → acceptor  hello  (56 bytes): "JNCT", version u16 (2), lane u8,
//	                   status u8 (0), from u64, to u64, nonce [32];
//	                   then params [32]
//	acceptor → dialer  hello  (56 bytes, from/to swapped, status: 0 or
//	                   a refusal reason) + params [32] + proof [32]
//	dialer → acceptor  proof  [32]
//	acceptor → dialer  status u8 (0 = accepted, else a refusal reason)
//
// The acceptor's proof is HMAC-SHA256(secret, "junction cluster v1
// acceptor\x00" ‖ dialer hello and params ‖ acceptor hello and params ‖
// binding), the dialer's the same with "dialer"; binding is 32 bytes of
// TLS exported keying material (label "EXPORTER-junction-cluster-v1"),
// or empty without TLS, so a proof cannot be replayed into another TLS
// session. Both hellos carry both node ids, both nonces and the lane.
// Proofs are compared in constant time. The acceptor refuses a bad magic
// (closing without a reply), an unknown version, lane or sender (a node
// not in its peers) and a receiver id that is not its own, before
// computing anything; a failed proof, a timeout or a TLS failure is
// refused too. Each refusal is logged (at most once a second per reason)
// and counted in [Stats].Refused. Before the handshake completes the
// acceptor allocates nothing sized by the peer: the hello and proof are
// read into fixed arrays (TLS's own buffers are bounded by crypto/tls).
//
// # Parameters
//
// params are [Config].Params, zero-padded: what the nodes of a cluster
// must agree on, opaque to this package. [Config].CheckParams judges the
// peer's on both sides, and only once the peer has proved the cluster
// secret: the dialer once the acceptor's proof holds, the acceptor once
// the dialer's does (its verdict is then reason "params"), so that
// nothing a stranger sends is taken for a peer's parameters, and both
// sides can say how they differ; the dialer's error wraps [ErrMismatch].
// An acceptor's refusal before the proof carries zeros, not its params.
// The transport logs these refusals at debug level only: CheckParams
// logs what it judges.
//
// Version 1 is the same without params. An acceptor answers a version 1
// hello in version 1, and an old acceptor refuses a version 2 hello with
// a version 1 reply (status "version"): the dialer then speaks version 1
// to that peer until the connection ends. CheckParams is given nil for a
// peer of version 1. So nodes can be upgraded one at a time.
//
// Without TLS the secret proves who connected, but the frames that
// follow are neither encrypted nor authenticated: plain TCP is for
// tests and for networks no one else can reach.
//
// # Frames
//
//	length u32 ‖ payload [length]
//
// A length above the lane's MaxFrame closes the connection (logged); the
// length 0xFFFFFFFF is a keepalive, written when a connection has been
// idle for a third of IdleTimeout. An acceptor closes a connection that
// has been silent (no frame, no keepalive) for IdleTimeout, and a dialer
// one where a megabyte could not be written within IdleTimeout (a peer
// that stopped reading). The writer takes everything queued for its
// connection at once and writes it with vectored writes of up to a
// megabyte; the reader reuses its buffer, and hands the handler a view of
// it.
package transport

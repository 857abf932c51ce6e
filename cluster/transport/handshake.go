package transport

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Wire constants of the handshake (see the package doc). They are part of
// the protocol: changing one is a new version.
const (
	magic = "JNCT"
	// version is the newest handshake this package speaks; it still
	// accepts and, towards a peer that refuses version 2, dials version 1
	// (which has no parameters), so that a cluster can be upgraded one
	// node at a time.
	version      = 2
	helloLen     = 4 + 2 + 1 + 1 + 8 + 8 + nonceLen
	nonceLen     = 32
	proofLen     = sha256.Size
	exportLabel  = "EXPORTER-junction-cluster-v1"
	exportLen    = 32
	keepaliveLen = 0xFFFFFFFF
	// ParamsLen is the size of the cluster parameters a version 2 hello
	// carries after its 56 bytes (Config.Params, zero-padded).
	ParamsLen = 32
)

// The proofs' labels, one per side, so that one side's proof is never
// the other's.
var (
	labelDialer = []byte("junction cluster v1 dialer\x00")
	labelAccept = []byte("junction cluster v1 acceptor\x00")
)

// reason says why a handshake failed. Its values other than reasonNone
// travel as the status byte of the acceptor's replies.
type reason uint8

const (
	reasonNone     reason = iota
	reasonMagic           // not our protocol (never sent: the acceptor just closes)
	reasonVersion         // unknown version or reserved bits set
	reasonLane            // no such lane
	reasonReceiver        // the hello is addressed to another node id
	reasonSender          // the sender is not one of the acceptor's peers
	reasonProof           // the dialer's proof of the secret is wrong
	reasonTimeout         // HandshakeTimeout passed
	reasonTLS             // the TLS handshake failed
	reasonIO              // the connection failed or closed mid-handshake
	reasonParams          // the peers' cluster parameters differ (Config.CheckParams)
	numReasons
)

var reasonNames = [numReasons]string{
	reasonNone:     "none",
	reasonMagic:    "magic",
	reasonVersion:  "version",
	reasonLane:     "lane",
	reasonReceiver: "receiver",
	reasonSender:   "sender",
	reasonProof:    "proof",
	reasonTimeout:  "timeout",
	reasonTLS:      "tls",
	reasonIO:       "io",
	reasonParams:   "params",
}

func (r reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Errors of the handshake, as the dialer sees them (wrapped with the
// detail) in [LaneStats].LastError and its log.
var (
	// ErrRefused: the peer refused the handshake; the error names its reason.
	ErrRefused = errors.New("transport: refused by the peer")
	// ErrHandshake: the peer's replies break the protocol: wrong magic,
	// version or lane, another node answering, or a wrong proof of the
	// cluster secret.
	ErrHandshake = errors.New("transport: handshake failed")
	// ErrMismatch: the two nodes' cluster parameters differ (the error
	// says how, in Config.CheckParams's words); one of them refused the
	// connection.
	ErrMismatch = errors.New("transport: the cluster parameters differ")
)

// oldPeer: the peer refused our hello's version and answered in an
// older one, which the next attempt speaks.
type oldPeer struct{ version uint16 }

func (e oldPeer) Error() string {
	return fmt.Sprintf("the peer speaks handshake version %d only", e.version)
}

var errNotHello = errors.New("not a Junction cluster hello")

// hello is the first message each way; from version 2 on, the sender's
// parameters (ParamsLen bytes) follow it.
type hello struct {
	version  uint16
	lane     Lane
	status   reason
	from, to uint64
	nonce    [nonceLen]byte
}

func (h *hello) marshal(b *[helloLen]byte) {
	copy(b[0:4], magic)
	binary.BigEndian.PutUint16(b[4:6], h.version)
	b[6] = byte(h.lane)
	b[7] = byte(h.status)
	binary.BigEndian.PutUint64(b[8:16], h.from)
	binary.BigEndian.PutUint64(b[16:24], h.to)
	copy(b[24:], h.nonce[:])
}

// parseHello decodes b. It reports reasonMagic when b is not ours at all
// and reasonVersion for a version outside 1..maxVersion; the fields are
// valid otherwise.
func parseHello(b []byte, maxVersion uint16) (hello, reason) {
	var h hello
	if string(b[0:4]) != magic {
		return h, reasonMagic
	}
	h.version = binary.BigEndian.Uint16(b[4:6])
	if h.version < 1 || h.version > maxVersion {
		return h, reasonVersion
	}
	h.lane = Lane(b[6])
	h.status = reason(b[7])
	h.from = binary.BigEndian.Uint64(b[8:16])
	h.to = binary.BigEndian.Uint64(b[16:24])
	copy(h.nonce[:], b[24:])
	return h, reasonNone
}

// handshaker holds what both sides of a handshake need.
type handshaker struct {
	self    uint64
	version uint16               // the newest we speak (version; 1 in tests of an old node)
	rand    io.Reader            // nonces: crypto/rand outside tests
	isPeer  func(id uint64) bool // is id one of our peers (acceptor side)
	macs    sync.Pool            // of hash.Hash: HMAC-SHA256 keyed with the secret
	params  atomic.Pointer[[ParamsLen]byte]
	// check judges a peer's parameters (nil: it spoke version 1); an
	// error refuses the connection. nil checks nothing.
	check func(peer uint64, theirs []byte) error
}

func newHandshaker(self uint64, secret []byte, rand io.Reader, isPeer func(uint64) bool) *handshaker {
	secret = bytes.Clone(secret)
	hs := &handshaker{self: self, version: version, rand: rand, isPeer: isPeer}
	hs.macs.New = func() any { return hmac.New(sha256.New, secret) }
	hs.params.Store(new([ParamsLen]byte))
	return hs
}

// setParams sets the parameters our hellos carry from now on.
func (hs *handshaker) setParams(p []byte) {
	var b [ParamsLen]byte
	copy(b[:], p)
	hs.params.Store(&b)
}

// checkPeer runs check, when set, on a peer's parameters.
func (hs *handshaker) checkPeer(peer uint64, theirs []byte) error {
	if hs.check == nil {
		return nil
	}
	return hs.check(peer, theirs)
}

// msgLen is the length of a hello of version v with its parameters.
func msgLen(v uint16) int {
	if v >= 2 {
		return helloLen + ParamsLen
	}
	return helloLen
}

// proof computes the proof a side sends; label says which side. dialer
// and acceptor are the two hellos, with their parameters.
func (hs *handshaker) proof(label []byte, dialer, acceptor []byte, binding []byte) [proofLen]byte {
	m := hs.macs.Get().(hash.Hash)
	defer hs.macs.Put(m)
	m.Reset()
	m.Write(label)
	m.Write(dialer)
	m.Write(acceptor)
	m.Write(binding)
	var p [proofLen]byte
	m.Sum(p[:0])
	return p
}

// acceptScratch holds the acceptor's buffers: one allocation per
// handshake, of a fixed size.
type acceptScratch struct {
	in [helloLen + ParamsLen]byte // their hello and parameters
	// out is our hello, parameters and proof; once written, its proof's
	// place takes theirs.
	out     [helloLen + ParamsLen + proofLen]byte
	verdict [1]byte
}

// accept runs the acceptor's side on rw, whose deadline the caller set.
// On success it returns the dialer's node id and lane. On failure it
// returns why (for the counters) and an error for the log; it has then
// told the dialer the reason when the dialer spoke our protocol. A
// dialer of version 1 gets answers in version 1.
func (hs *handshaker) accept(rw io.ReadWriter, binding []byte) (from uint64, lane Lane, why reason, err error) {
	b := new(acceptScratch)
	if _, err := io.ReadFull(rw, b.in[:helloLen]); err != nil {
		return 0, 0, ioReason(err), fmt.Errorf("reading the hello: %w", err)
	}
	h, why := parseHello(b.in[:helloLen], hs.version)
	if why == reasonMagic {
		return 0, 0, why, errNotHello
	}
	v := h.version
	if why == reasonVersion {
		v = hs.version // answered in our newest, which says what we speak
	}
	n := msgLen(v)
	in, out := b.in[:msgLen(h.version)], b.out[:n]
	if why == reasonNone && v >= 2 {
		if _, err := io.ReadFull(rw, b.in[helloLen:n]); err != nil {
			return h.from, h.lane, ioReason(err), fmt.Errorf("reading the parameters: %w", err)
		}
	}
	// send writes our hello with status, our parameters and our proof;
	// a nonce, our parameters and a true proof when prove, zeros
	// otherwise (a refusal tells an unauthenticated dialer nothing of the
	// cluster).
	send := func(status reason, prove bool) error {
		(&hello{version: v, lane: h.lane, status: status, from: hs.self, to: h.from}).marshal((*[helloLen]byte)(b.out[:]))
		if v >= 2 {
			if prove {
				copy(b.out[helloLen:n], hs.params.Load()[:])
			} else {
				clear(b.out[helloLen:n])
			}
		}
		proof := b.out[n : n+proofLen]
		clear(proof)
		if prove {
			if _, err := io.ReadFull(hs.rand, b.out[helloLen-nonceLen:helloLen]); err != nil {
				return fmt.Errorf("nonce: %w", err)
			}
			p := hs.proof(labelAccept, in, out, binding)
			copy(proof, p[:])
		}
		_, err := rw.Write(b.out[:n+proofLen])
		return err
	}
	refuse := func(why reason, err error) (uint64, Lane, reason, error) {
		// Best effort, with a proof of zeros: the dialer logs the reason;
		// we close either way.
		_ = send(why, false)
		return h.from, h.lane, why, err
	}
	switch {
	case why == reasonVersion:
		return refuse(why, fmt.Errorf("version %d, want 1 to %d", h.version, hs.version))
	case h.status != reasonNone:
		return refuse(reasonVersion, fmt.Errorf("reserved byte %d set", h.status))
	case h.lane >= NumLanes:
		return refuse(reasonLane, fmt.Errorf("no lane %d", h.lane))
	case h.to != hs.self:
		return refuse(reasonReceiver, fmt.Errorf("node %d dialled node %d, this is node %d", h.from, h.to, hs.self))
	case h.from == hs.self || !hs.isPeer(h.from):
		return refuse(reasonSender, fmt.Errorf("node %d is not a peer", h.from))
	}

	if err := send(reasonNone, true); err != nil {
		return h.from, h.lane, ioReason(err), fmt.Errorf("writing the hello: %w", err)
	}

	theirs := b.out[n : n+proofLen]
	if _, err := io.ReadFull(rw, theirs); err != nil {
		// A dialer that does not accept our proof (another secret) closes here.
		return h.from, h.lane, ioReason(err), fmt.Errorf("reading the proof: %w", err)
	}
	want := hs.proof(labelDialer, in, out, binding)
	if !hmac.Equal(theirs, want[:]) {
		b.verdict[0] = byte(reasonProof)
		_, _ = rw.Write(b.verdict[:])
		return h.from, h.lane, reasonProof, fmt.Errorf("node %d did not prove the cluster secret", h.from)
	}
	// Its parameters are judged only now that it has proved the secret:
	// judged before, a hello from anyone who can reach the port, naming
	// a peer, would have been recorded as that peer's, and enough of
	// them would have taken this node out of the cluster.
	var theirParams []byte
	if v >= 2 {
		theirParams = in[helloLen:]
	}
	if err := hs.checkPeer(h.from, theirParams); err != nil {
		b.verdict[0] = byte(reasonParams)
		_, _ = rw.Write(b.verdict[:])
		return h.from, h.lane, reasonParams, err
	}
	b.verdict[0] = byte(reasonNone)
	if _, err := rw.Write(b.verdict[:]); err != nil {
		return h.from, h.lane, ioReason(err), fmt.Errorf("writing the verdict: %w", err)
	}
	return h.from, h.lane, reasonNone, nil
}

// dial runs the dialer's side on rw, whose deadline the caller set,
// towards node to on lane, in our newest version.
func (hs *handshaker) dial(rw io.ReadWriter, to uint64, lane Lane, binding []byte) error {
	return hs.dialVersion(rw, to, lane, binding, hs.version)
}

// dialVersion runs the dialer's side in version v. It returns an
// oldPeer error when the peer refused v and speaks an older one.
func (hs *handshaker) dialVersion(rw io.ReadWriter, to uint64, lane Lane, binding []byte, v uint16) error {
	mine := hello{version: v, lane: lane, from: hs.self, to: to}
	if _, err := io.ReadFull(hs.rand, mine.nonce[:]); err != nil {
		return fmt.Errorf("nonce: %w", err)
	}
	n := msgLen(v)
	var outBuf [helloLen + ParamsLen]byte
	out := outBuf[:n]
	mine.marshal((*[helloLen]byte)(outBuf[:helloLen]))
	if v >= 2 {
		copy(outBuf[helloLen:], hs.params.Load()[:])
	}
	if _, err := rw.Write(out); err != nil {
		return fmt.Errorf("writing the hello: %w", err)
	}

	var msg [helloLen + ParamsLen + proofLen]byte
	if _, err := io.ReadFull(rw, msg[:helloLen]); err != nil {
		return fmt.Errorf("reading the hello: %w", err)
	}
	h, why := parseHello(msg[:helloLen], hs.version)
	switch {
	case why == reasonMagic:
		return fmt.Errorf("%w: the peer does not speak the cluster protocol", ErrHandshake)
	case why == reasonVersion:
		return fmt.Errorf("%w: the peer speaks version %d, want 1 to %d", ErrHandshake, h.version, hs.version)
	case h.version != v && h.version < v && h.status == reasonVersion:
		return oldPeer{h.version}
	case h.version != v:
		return fmt.Errorf("%w: the peer answered version %d to version %d", ErrHandshake, h.version, v)
	}
	if _, err := io.ReadFull(rw, msg[helloLen:n+proofLen]); err != nil {
		return fmt.Errorf("reading the hello: %w", err)
	}
	in := msg[:n]
	var theirParams []byte
	if v >= 2 {
		theirParams = in[helloLen:]
	}
	want := hs.proof(labelAccept, out, in, binding)
	proven := hmac.Equal(msg[n:n+proofLen], want[:])
	switch {
	case h.status == reasonParams && proven:
		if err := hs.checkPeer(to, theirParams); err != nil {
			return fmt.Errorf("%w: %w", ErrMismatch, err)
		}
		return fmt.Errorf("%w: node %d refused this node's", ErrMismatch, to)
	case h.status != reasonNone:
		return fmt.Errorf("%w: %s", ErrRefused, refusalText(h.status))
	case h.lane != lane:
		return fmt.Errorf("%w: the peer answered for lane %d, want %d", ErrHandshake, h.lane, lane)
	case h.from != to:
		return fmt.Errorf("%w: node %d answered at the address of node %d", ErrHandshake, h.from, to)
	case h.to != hs.self:
		return fmt.Errorf("%w: the peer answered node %d, this is node %d", ErrHandshake, h.to, hs.self)
	}
	if !proven {
		// A proof of zeros, which the acceptor refuses as "proof", so that
		// it too logs the wrong secret rather than a closed connection.
		var zero [proofLen]byte
		_, _ = rw.Write(zero[:])
		return fmt.Errorf("%w: node %d did not prove the cluster secret", ErrHandshake, to)
	}
	// Our proof goes whatever we think of its parameters: the acceptor
	// judges ours only once we have proved the secret, and says so in
	// its verdict.
	mismatch := hs.checkPeer(to, theirParams)
	p := hs.proof(labelDialer, out, in, binding)
	if _, err := rw.Write(p[:]); err != nil {
		return fmt.Errorf("writing the proof: %w", err)
	}
	var verdict [1]byte
	if _, err := io.ReadFull(rw, verdict[:]); err != nil {
		if mismatch != nil {
			return fmt.Errorf("%w: %w", ErrMismatch, mismatch)
		}
		return fmt.Errorf("reading the verdict: %w", err)
	}
	switch v := reason(verdict[0]); {
	case v == reasonParams && mismatch != nil:
		return fmt.Errorf("%w: %w", ErrMismatch, mismatch)
	case v == reasonParams:
		return fmt.Errorf("%w: node %d refused this node's", ErrMismatch, to)
	case v != reasonNone:
		return fmt.Errorf("%w: %s", ErrRefused, refusalText(v))
	case mismatch != nil:
		// The acceptor did not refuse (it checks nothing, or judged
		// otherwise): we close the link.
		return fmt.Errorf("%w: %w", ErrMismatch, mismatch)
	}
	return nil
}

// refusalText explains a refusal the acceptor sent.
func refusalText(r reason) string {
	switch r {
	case reasonVersion:
		return "unsupported version"
	case reasonLane:
		return "unknown lane"
	case reasonReceiver:
		return "wrong receiver node id (check the peer addresses)"
	case reasonSender:
		return "this node is not one of the peer's peers"
	case reasonProof:
		return "wrong proof of the cluster secret"
	case reasonParams:
		return "the cluster parameters differ"
	}
	return fmt.Sprintf("reason %d", uint8(r))
}

// ioReason classifies a read or write error during the handshake.
func ioReason(err error) reason {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return reasonTimeout
	}
	return reasonIO
}

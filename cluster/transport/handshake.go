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
)

// Wire constants of the handshake (see the package doc). They are part of
// the protocol: changing one is a new version.
const (
	magic        = "JNCT"
	version      = 1
	helloLen     = 4 + 2 + 1 + 1 + 8 + 8 + nonceLen
	nonceLen     = 32
	proofLen     = sha256.Size
	exportLabel  = "EXPORTER-junction-cluster-v1"
	exportLen    = 32
	keepaliveLen = 0xFFFFFFFF
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
)

var errNotHello = errors.New("not a Junction cluster hello")

// hello is the first message each way.
type hello struct {
	lane     Lane
	status   reason
	from, to uint64
	nonce    [nonceLen]byte
}

func (h *hello) marshal(b *[helloLen]byte) {
	copy(b[0:4], magic)
	binary.BigEndian.PutUint16(b[4:6], version)
	b[6] = byte(h.lane)
	b[7] = byte(h.status)
	binary.BigEndian.PutUint64(b[8:16], h.from)
	binary.BigEndian.PutUint64(b[16:24], h.to)
	copy(b[24:], h.nonce[:])
}

// parseHello decodes b. It reports reasonMagic when b is not ours at all
// and reasonVersion for another version; the fields are valid otherwise.
func parseHello(b *[helloLen]byte) (hello, reason) {
	var h hello
	if string(b[0:4]) != magic {
		return h, reasonMagic
	}
	if binary.BigEndian.Uint16(b[4:6]) != version {
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
	self   uint64
	rand   io.Reader            // nonces: crypto/rand outside tests
	isPeer func(id uint64) bool // is id one of our peers (acceptor side)
	macs   sync.Pool            // of hash.Hash: HMAC-SHA256 keyed with the secret
}

func newHandshaker(self uint64, secret []byte, rand io.Reader, isPeer func(uint64) bool) *handshaker {
	secret = bytes.Clone(secret)
	hs := &handshaker{self: self, rand: rand, isPeer: isPeer}
	hs.macs.New = func() any { return hmac.New(sha256.New, secret) }
	return hs
}

// proof computes the proof a side sends; label says which side.
func (hs *handshaker) proof(label []byte, dialer, acceptor *[helloLen]byte, binding []byte) [proofLen]byte {
	m := hs.macs.Get().(hash.Hash)
	defer hs.macs.Put(m)
	m.Reset()
	m.Write(label)
	m.Write(dialer[:])
	m.Write(acceptor[:])
	m.Write(binding)
	var p [proofLen]byte
	m.Sum(p[:0])
	return p
}

// acceptScratch holds the acceptor's buffers: one allocation per
// handshake, of a fixed size.
type acceptScratch struct {
	in      [helloLen]byte
	out     [helloLen + proofLen]byte // our hello, then our proof
	theirs  [proofLen]byte
	verdict [1]byte
}

// accept runs the acceptor's side on rw, whose deadline the caller set.
// On success it returns the dialer's node id and lane. On failure it
// returns why (for the counters) and an error for the log; it has then
// told the dialer the reason when the dialer spoke our protocol.
func (hs *handshaker) accept(rw io.ReadWriter, binding []byte) (from uint64, lane Lane, why reason, err error) {
	b := new(acceptScratch)
	in, out := &b.in, (*[helloLen]byte)(b.out[:helloLen])
	if _, err := io.ReadFull(rw, in[:]); err != nil {
		return 0, 0, ioReason(err), fmt.Errorf("reading the hello: %w", err)
	}
	h, why := parseHello(in)
	if why == reasonMagic {
		return 0, 0, why, errNotHello
	}
	refuse := func(why reason, err error) (uint64, Lane, reason, error) {
		reply := hello{lane: h.lane, status: why, from: hs.self, to: h.from}
		reply.marshal(out)
		// Best effort, with a proof of zeros: the dialer logs the reason;
		// we close either way.
		_, _ = rw.Write(b.out[:])
		return h.from, h.lane, why, err
	}
	switch {
	case why == reasonVersion:
		return refuse(why, fmt.Errorf("version %d, want %d", binary.BigEndian.Uint16(in[4:6]), version))
	case h.status != reasonNone:
		return refuse(reasonVersion, fmt.Errorf("reserved byte %d set", h.status))
	case h.lane >= NumLanes:
		return refuse(reasonLane, fmt.Errorf("no lane %d", h.lane))
	case h.to != hs.self:
		return refuse(reasonReceiver, fmt.Errorf("node %d dialled node %d, this is node %d", h.from, h.to, hs.self))
	case h.from == hs.self || !hs.isPeer(h.from):
		return refuse(reasonSender, fmt.Errorf("node %d is not a peer", h.from))
	}

	reply := hello{lane: h.lane, from: hs.self, to: h.from}
	if _, err := io.ReadFull(hs.rand, reply.nonce[:]); err != nil {
		return h.from, h.lane, reasonIO, fmt.Errorf("nonce: %w", err)
	}
	reply.marshal(out)
	mine := hs.proof(labelAccept, in, out, binding)
	copy(b.out[helloLen:], mine[:])
	if _, err := rw.Write(b.out[:]); err != nil {
		return h.from, h.lane, ioReason(err), fmt.Errorf("writing the hello: %w", err)
	}

	if _, err := io.ReadFull(rw, b.theirs[:]); err != nil {
		// A dialer that does not accept our proof (another secret) closes here.
		return h.from, h.lane, ioReason(err), fmt.Errorf("reading the proof: %w", err)
	}
	want := hs.proof(labelDialer, in, out, binding)
	if !hmac.Equal(b.theirs[:], want[:]) {
		b.verdict[0] = byte(reasonProof)
		_, _ = rw.Write(b.verdict[:])
		return h.from, h.lane, reasonProof, fmt.Errorf("node %d did not prove the cluster secret", h.from)
	}
	b.verdict[0] = byte(reasonNone)
	if _, err := rw.Write(b.verdict[:]); err != nil {
		return h.from, h.lane, ioReason(err), fmt.Errorf("writing the verdict: %w", err)
	}
	return h.from, h.lane, reasonNone, nil
}

// dial runs the dialer's side on rw, whose deadline the caller set,
// towards node to on lane.
func (hs *handshaker) dial(rw io.ReadWriter, to uint64, lane Lane, binding []byte) error {
	mine := hello{lane: lane, from: hs.self, to: to}
	if _, err := io.ReadFull(hs.rand, mine.nonce[:]); err != nil {
		return fmt.Errorf("nonce: %w", err)
	}
	var out, in [helloLen]byte
	mine.marshal(&out)
	if _, err := rw.Write(out[:]); err != nil {
		return fmt.Errorf("writing the hello: %w", err)
	}

	var msg [helloLen + proofLen]byte
	if _, err := io.ReadFull(rw, msg[:]); err != nil {
		return fmt.Errorf("reading the hello: %w", err)
	}
	copy(in[:], msg[:helloLen])
	h, why := parseHello(&in)
	switch {
	case why == reasonMagic:
		return fmt.Errorf("%w: the peer does not speak the cluster protocol", ErrHandshake)
	case why == reasonVersion:
		return fmt.Errorf("%w: the peer speaks version %d, want %d", ErrHandshake, binary.BigEndian.Uint16(in[4:6]), version)
	case h.status != reasonNone:
		return fmt.Errorf("%w: %s", ErrRefused, refusalText(h.status))
	case h.lane != lane:
		return fmt.Errorf("%w: the peer answered for lane %d, want %d", ErrHandshake, h.lane, lane)
	case h.from != to:
		return fmt.Errorf("%w: node %d answered at the address of node %d", ErrHandshake, h.from, to)
	case h.to != hs.self:
		return fmt.Errorf("%w: the peer answered node %d, this is node %d", ErrHandshake, h.to, hs.self)
	}
	want := hs.proof(labelAccept, &out, &in, binding)
	if !hmac.Equal(msg[helloLen:], want[:]) {
		// A proof of zeros, which the acceptor refuses as "proof", so that
		// it too logs the wrong secret rather than a closed connection.
		var zero [proofLen]byte
		_, _ = rw.Write(zero[:])
		return fmt.Errorf("%w: node %d did not prove the cluster secret", ErrHandshake, to)
	}
	p := hs.proof(labelDialer, &out, &in, binding)
	if _, err := rw.Write(p[:]); err != nil {
		return fmt.Errorf("writing the proof: %w", err)
	}
	var verdict [1]byte
	if _, err := io.ReadFull(rw, verdict[:]); err != nil {
		return fmt.Errorf("reading the verdict: %w", err)
	}
	if v := reason(verdict[0]); v != reasonNone {
		return fmt.Errorf("%w: %s", ErrRefused, refusalText(v))
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

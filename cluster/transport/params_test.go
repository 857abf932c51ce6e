package transport

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// paramsJudge is a CheckParams that refuses parameters other than its
// node's and records what each peer sent.
type paramsJudge struct {
	mu     sync.Mutex
	mine   []byte
	theirs map[uint64][][]byte
}

func (j *paramsJudge) check(peer uint64, theirs []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.theirs == nil {
		j.theirs = map[uint64][][]byte{}
	}
	j.theirs[peer] = append(j.theirs[peer], bytes.Clone(theirs))
	if theirs != nil && !bytes.Equal(bytes.TrimRight(theirs, "\x00"), j.mine) {
		return fmt.Errorf("node %d has %q, this node %q", peer, bytes.TrimRight(theirs, "\x00"), j.mine)
	}
	return nil
}

func (j *paramsJudge) set(p []byte) {
	j.mu.Lock()
	j.mine = p
	j.mu.Unlock()
}

// heard returns what peer sent the last time, and how many times it was
// judged.
func (j *paramsJudge) heard(peer uint64) ([]byte, int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	all := j.theirs[peer]
	if len(all) == 0 {
		return nil, 0
	}
	return all[len(all)-1], len(all)
}

// TestParamsThatDifferAreRefusedBothWays: two nodes whose parameters
// differ never connect: each acceptor refuses the other's hello (counted
// as "params"), each dialer learns the other's parameters, proved with
// the secret, and says how they differ; no frame passes. Once one node's
// parameters change to agree, the links come up.
func TestParamsThatDifferAreRefusedBothWays(t *testing.T) {
	judges := map[uint64]*paramsJudge{1: {mine: []byte("groups=8")}, 2: {mine: []byte("groups=16")}}
	nodes := mesh(t, 2, func(c *Config) {
		j := judges[c.NodeID]
		c.Params, c.CheckParams = j.mine, j.check
		c.HandshakeTimeout = time.Second
	})
	a, b := nodes[0], nodes[1]
	for _, n := range nodes {
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d refusing", n.id), func() bool { return n.Stats().Refused["params"] > 0 })
	}
	for _, pair := range [][2]*testNode{{a, b}, {b, a}} {
		n, peer := pair[0], pair[1]
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d's error about %d", n.id, peer.id), func() bool {
			e := n.lane(peer.id, LaneRaft).LastError
			return bytesContains(e, ErrMismatch.Error()) && bytesContains(e, fmt.Sprintf("node %d has %q", peer.id, judges[peer.id].mine))
		})
		if got, _ := judges[n.id].heard(peer.id); string(bytes.TrimRight(got, "\x00")) != string(judges[peer.id].mine) {
			t.Errorf("node %d heard %q from node %d, want %q", n.id, got, peer.id, judges[peer.id].mine)
		}
		for l := range NumLanes {
			if st := n.lane(peer.id, l); st.Connected || st.Inbound {
				t.Errorf("node %d lane %v with node %d up: %+v", n.id, l, peer.id, st)
			}
		}
		if n.Send(peer.id, LaneRaft, []byte("x")) {
			t.Errorf("node %d queued a frame for node %d", n.id, peer.id)
		}
		if n.logs.contains("cluster peer unreachable") {
			t.Errorf("node %d logged the refusal as unreachable (CheckParams logs it):\n%s", n.id, n.logs)
		}
	}
	if c := b.sink.count(1, LaneRaft) + a.sink.count(2, LaneRaft); c != 0 {
		t.Errorf("%d frames passed", c)
	}

	// Node 2 comes to agree (a restart with the right flags would; here
	// SetParams): both directions connect.
	judges[2].set([]byte("groups=8"))
	b.SetParams([]byte("groups=8"))
	waitConnected(t, a, b)
	waitConnected(t, b, a)
	probe(t, a, b, LaneRaft)
	probe(t, b, a, LaneRPC)
}

// TestVersion1PeersStillConnect: during an upgrade, a node of handshake
// version 1 (no parameters) and one of version 2 connect both ways: the
// new acceptor answers an old dialer in version 1, and the new dialer,
// refused by the old acceptor's version check, speaks version 1 to it.
// CheckParams hears nil from the old node: there is nothing to check.
func TestVersion1PeersStillConnect(t *testing.T) {
	j := &paramsJudge{mine: []byte("groups=8")}
	nodes := mesh(t, 2, func(c *Config) {
		if c.NodeID == 1 {
			c.Params, c.CheckParams = j.mine, j.check
		} else {
			c.handshakeVersion = 1
		}
	})
	a, b := nodes[0], nodes[1]
	waitConnected(t, a, b)
	waitConnected(t, b, a)
	probe(t, a, b, LaneRaft)
	probe(t, b, a, LaneRaft)
	got, n := j.heard(2)
	if n == 0 || got != nil {
		t.Errorf("node 1 judged node 2 %d times, last with %q: want nil parameters", n, got)
	}
	if r := a.Stats().Refused["params"]; r != 0 {
		t.Errorf("node 1 refused %d connections of the old node for their parameters", r)
	}
	// The new dialer's first hellos were refused by the old acceptor.
	if r := b.Stats().Refused["version"]; r == 0 {
		t.Errorf("the old node refused no version 2 hello: the fallback was not exercised")
	}
}

// TestAcceptTakesAVersion1Dialer: the acceptor answers a version 1 hello
// in version 1 and takes the dialer, whose parameters it judges as nil.
func TestAcceptTakesAVersion1Dialer(t *testing.T) {
	hs := fuzzAcceptor()
	var judged [][]byte
	hs.check = func(peer uint64, theirs []byte) error { judged = append(judged, theirs); return nil }
	from, lane, why, err := hs.accept(pipe{bytes.NewReader(dialerBytesV1(LaneRPC))}, nil)
	if err != nil || from != 3 || lane != LaneRPC || why != reasonNone {
		t.Fatalf("accept of a version 1 dialer: from %d lane %v why %v: %v", from, lane, why, err)
	}
	if len(judged) != 1 || judged[0] != nil {
		t.Errorf("parameters judged: %q, want one nil", judged)
	}
}

// A hello that names a peer but cannot prove the cluster secret has its
// parameters judged by no one: judged before the proof, anyone who can
// reach the port could have had a node record a peer's parameters as
// different (and, for a majority of peers, leave the cluster), or undo a
// real refusal with a version 1 hello.
func TestUnprovenHelloIsNotJudged(t *testing.T) {
	j := &paramsJudge{mine: []byte("groups=8")}
	l := listen(t)
	n := startNode(t, 1, l, map[uint64]string{2: "127.0.0.1:1"}, func(c *Config) {
		c.Params, c.CheckParams = j.mine, j.check
		c.HandshakeTimeout = time.Second
	})
	for i, proof := range [][]byte{nil, make([]byte, proofLen)} {
		conn, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		var msg [helloLen + ParamsLen]byte
		(&hello{version: 2, lane: LaneRaft, from: 2, to: 1}).marshal((*[helloLen]byte)(msg[:helloLen]))
		copy(msg[helloLen:], "groups=16")
		if _, err := conn.Write(msg[:]); err != nil {
			t.Fatal(err)
		}
		var answer [helloLen + ParamsLen + proofLen]byte
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(conn, answer[:]); err != nil {
			t.Fatalf("try %d: reading the acceptor's hello: %v", i, err)
		}
		if proof != nil {
			// A wrong proof: the verdict says so.
			conn.Write(proof)
			var verdict [1]byte
			if _, err := io.ReadFull(conn, verdict[:]); err != nil || reason(verdict[0]) != reasonProof {
				t.Fatalf("verdict after a wrong proof: %v, %v", verdict, err)
			}
		}
		conn.Close()
	}
	waitFor(t, 5*time.Second, "the refusals counted", func() bool { return n.Stats().Refused["proof"] > 0 })
	if got, times := j.heard(2); times > 0 {
		t.Fatalf("node 1 judged node 2's parameters %q from %d unproven hellos", got, times)
	}
}

package cluster

import (
	"encoding/binary"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/junctionmq/junction/cluster/transport"
)

// A snapshot travels on the bulk lane, so that it never delays
// heartbeats, in chunks of snapChunk bytes:
//
//	uv group, uv snapshot id (the sender's), uv chunk index, uv chunk count, bytes
//
// The receiver joins the chunks and steps the MsgSnap they make. At most
// one snapshot per group and sender is assembled at a time; a new one
// replaces an unfinished one.
const snapChunk = 4 << 20

// sendSnapshot marshals a MsgSnap (on the loop) and sends its chunks
// from a goroutine that waits while the bulk lane's queue is full, then
// reports the outcome to raft (until then the follower stays in
// snapshot state, as it should).
func (n *Node) sendSnapshot(gid uint64, m *pb.Message) {
	b, err := proto.Marshal(m)
	if err != nil {
		n.log.Error().Err(err).Msg("marshalling a snapshot")
		if g := n.group(gid); g != nil {
			g.rn.ReportSnapshot(m.GetTo(), raft.SnapshotFailure)
		}
		return
	}
	to := m.GetTo()
	id := uint64(time.Now().UnixNano())
	n.goWork(func(stop <-chan struct{}) {
		ok := n.sendChunks(stop, to, gid, id, b)
		n.onLoop(func() {
			if g := n.group(gid); g != nil {
				if ok {
					g.rn.ReportSnapshot(to, raft.SnapshotFinish)
				} else {
					g.rn.ReportSnapshot(to, raft.SnapshotFailure)
				}
			}
		})
		n.log.Info().Uint64("group", gid).Uint64("to", to).Int("bytes", len(b)).Bool("sent", ok).Msg("snapshot sent to a follower")
	})
}

func (n *Node) sendChunks(stop <-chan struct{}, to, gid, id uint64, b []byte) bool {
	count := uint64((len(b) + snapChunk - 1) / snapChunk)
	deadline := time.Now().Add(time.Minute + time.Duration(len(b)/(1<<20))*time.Second)
	for i := uint64(0); i < count; i++ {
		lo, hi := int(i)*snapChunk, min(int(i+1)*snapChunk, len(b))
		f := binary.AppendUvarint(nil, gid)
		f = binary.AppendUvarint(f, id)
		f = binary.AppendUvarint(f, i)
		f = binary.AppendUvarint(f, count)
		f = appendBytes(f, b[lo:hi])
		for !n.tr.Send(to, transport.LaneBulk, f) {
			if time.Now().After(deadline) {
				return false
			}
			select {
			case <-stop:
				return false
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return true
}

type snapKey struct{ from, group uint64 }

type snapParts struct {
	id    uint64
	count uint64
	got   uint64
	parts [][]byte
}

type snapAssembler struct {
	mu   sync.Mutex
	bufs map[snapKey]*snapParts
}

func newSnapAssembler() *snapAssembler { return &snapAssembler{bufs: make(map[snapKey]*snapParts)} }

// receiveSnapChunk adds a chunk; the last one steps the snapshot.
func (n *Node) receiveSnapChunk(from uint64, frame []byte) {
	d := reader{b: frame}
	gid, id, i, count := d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()
	chunk := d.bytes()
	if d.err != nil || len(d.b) != 0 || n.group(gid) == nil || count == 0 || i >= count || count > 1<<20 {
		n.log.Warn().Uint64("peer", from).Msg("malformed snapshot chunk")
		return
	}
	a := n.snaps
	k := snapKey{from, gid}
	a.mu.Lock()
	p := a.bufs[k]
	if p == nil || p.id != id {
		p = &snapParts{id: id, count: count, parts: make([][]byte, count)}
		a.bufs[k] = p
	}
	if p.parts[i] == nil {
		p.parts[i] = chunk
		p.got++
	}
	done := p.got == p.count
	if done {
		delete(a.bufs, k)
	}
	a.mu.Unlock()
	if !done {
		return
	}
	size := 0
	for _, c := range p.parts {
		size += len(c)
	}
	b := make([]byte, 0, size)
	for _, c := range p.parts {
		b = append(b, c...)
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(b, m); err != nil || m.GetFrom() != from || m.GetType() != pb.MsgSnap {
		n.log.Warn().Uint64("peer", from).Msg("malformed snapshot")
		return
	}
	n.queueInbound(gid, m)
}

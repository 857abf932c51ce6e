package cluster

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/junctionmq/junction/cluster/transport"
	"github.com/junctionmq/junction/core"
)

// What the nodes of a cluster must agree on travels in the handshake of
// every link between them (transport.Config.Params), and each node
// judges its peers' (checkParams):
//
//   - the number of groups and the placement rule (placementVersion):
//     a node that places addresses otherwise would send to, and read
//     from, other groups than its peers. A mismatch refuses the link,
//     both ways; a node refused by a majority of the members serves no
//     client (its operations fail as unavailable, saying why), and an
//     add of a node that differs is undone.
//   - a digest of the configuration that routes messages: the diverts
//     (applied where a send enters the cluster), the address settings
//     and virtual topics (applied by whichever node leads a group, and
//     read by each node to tell the groups a consumer reads). A
//     mismatch is logged and shown in Status, but the link stands: a
//     rolling restart that changes them has nodes that differ for a
//     while, and refusing them would take a node out of the cluster at
//     each step.
//
// The parameters, 32 bytes:
//
//	[0]      format (1)
//	[1:3]    groups, u16
//	[3]      placement version
//	[4]      flags: 1 virtual topics on, 2 diverts reloaded at run time
//	[5:13]   diverts' digest (the first 8 bytes of the SHA-256 of their JSON)
//	[13:21]  address settings' digest (the same)
//	[21:32]  zero (a later format may use them; this one ignores them)

// placementVersion numbers the rule by which groupOf places addresses:
// 1 is the FNV-1a hash of the name modulo the groups, a temporary queue
// in the group its name says, a virtual topic's consumer queue with its
// topic. Change groupOf, change this: nodes that place differently must
// not form one cluster.
const placementVersion = 1

const (
	paramsFormat = 1

	flagVirtualTopics   = 1
	flagDivertsReloaded = 2
)

// clusterParams is the decoded form of a node's parameters.
type clusterParams struct {
	groups    int
	placement uint8
	flags     byte
	diverts   [8]byte
	settings  [8]byte
}

func (p clusterParams) encode() []byte {
	b := make([]byte, transport.ParamsLen)
	b[0] = paramsFormat
	binary.BigEndian.PutUint16(b[1:3], uint16(p.groups))
	b[3] = p.placement
	b[4] = p.flags
	copy(b[5:13], p.diverts[:])
	copy(b[13:21], p.settings[:])
	return b
}

func decodeParams(b []byte) (clusterParams, error) {
	var p clusterParams
	if len(b) < transport.ParamsLen || b[0] == 0 {
		return p, fmt.Errorf("malformed cluster parameters (%d bytes)", len(b))
	}
	p.groups = int(binary.BigEndian.Uint16(b[1:3]))
	p.placement = b[3]
	p.flags = b[4]
	copy(p.diverts[:], b[5:13])
	copy(p.settings[:], b[13:21])
	return p, nil
}

// digest is the first 8 bytes of the SHA-256 of v's JSON (order kept:
// the lists must be the same, in the same order).
func digest(v any) [8]byte {
	j, err := json.Marshal(v)
	if err != nil {
		j = []byte(err.Error())
	}
	s := sha256.Sum256(j)
	return [8]byte(s[:8])
}

func diverts(ds []core.Divert) []core.Divert {
	if len(ds) == 0 {
		return nil
	}
	return ds
}

// localParams are this node's parameters from its configuration.
func localParams(cfg *Config) clusterParams {
	p := clusterParams{groups: cfg.Groups, placement: placementVersion,
		diverts: digest(diverts(cfg.Broker.Diverts)), settings: digest(cfg.Broker.AddressSettings)}
	if len(cfg.Broker.AddressSettings) == 0 {
		p.settings = digest([]core.AddressSettings(nil))
	}
	if cfg.Broker.VirtualTopics {
		p.flags |= flagVirtualTopics
	}
	return p
}

// compare says how theirs (node peer's) differs from mine: the
// differences that keep the two nodes apart (fatal), and the others.
func compare(peer uint64, mine, theirs clusterParams) (fatal, warn []string) {
	if theirs.groups != mine.groups {
		fatal = append(fatal, fmt.Sprintf("node %d has %d groups, this node %d (--cluster-groups is fixed when the cluster is created and must be the same on every node)", peer, theirs.groups, mine.groups))
	}
	if theirs.placement != mine.placement {
		fatal = append(fatal, fmt.Sprintf("node %d places addresses by rule %d, this node by rule %d (a version that places addresses otherwise cannot join this cluster)", peer, theirs.placement, mine.placement))
	}
	switch {
	case (theirs.flags|mine.flags)&flagDivertsReloaded != 0:
		// A reload changed one node's diverts after its links were made:
		// nothing to compare until both restart.
	case theirs.diverts != mine.diverts:
		warn = append(warn, fmt.Sprintf("node %d's diverts differ from this node's (a send is diverted as the node it enters says: give every node the same diverts)", peer))
	}
	if theirs.settings != mine.settings {
		warn = append(warn, fmt.Sprintf("node %d's address settings differ from this node's (each group applies its leader's, and each node reads the dead-letter and expiry addresses from its own)", peer))
	}
	if (theirs.flags^mine.flags)&flagVirtualTopics != 0 {
		warn = append(warn, fmt.Sprintf("virtual topics are %s on node %d, %s on this node (a group copies to a topic's consumer queues only while a node that has them on leads it)", onOff(theirs.flags&flagVirtualTopics != 0), peer, onOff(mine.flags&flagVirtualTopics != 0)))
	}
	return fatal, warn
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// PeerConfig is what a node found comparing its parameters with a
// peer's, in Status: only for peers that differ or could not be checked.
type PeerConfig struct {
	Node uint64 `json:"node"`
	// Refused: they differ in what must agree (the groups, the
	// placement): their links are refused.
	Refused bool `json:"refused"`
	// Problems says how they differ, or why they could not be compared.
	Problems []string `json:"problems"`
	// Checked is when the peer's parameters were last judged (each
	// connection of its links).
	Checked time.Time `json:"checked"`
}

// paramsState is what a node knows of its peers' parameters.
type paramsState struct {
	mu    sync.Mutex
	mine  clusterParams
	peers map[uint64]*PeerConfig // only those that differ or are unchecked
	// out is set when this node differs, in what must agree, from so many
	// members that those that agree with it are no majority: it serves
	// no client.
	out string
}

// checkParams is the transport's CheckParams: it judges peer's
// parameters (nil: an older version that sends none), records and logs
// (once per change) what it finds, and refuses a peer that differs in
// what must agree.
func (n *Node) checkParams(peer uint64, theirs []byte) error {
	ps := &n.params
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var fatal, warn []string
	if theirs == nil {
		warn = []string{fmt.Sprintf("node %d speaks an older cluster handshake, which does not say its groups and configuration: not checked", peer)}
	} else if p, err := decodeParams(theirs); err != nil {
		fatal = []string{fmt.Sprintf("node %d: %v", peer, err)}
	} else {
		fatal, warn = compare(peer, ps.mine, p)
	}
	problems := append(slices.Clip(fatal), warn...)
	old := ps.peers[peer]
	changed := old == nil && len(problems) > 0 || old != nil && !slices.Equal(old.Problems, problems)
	switch {
	case len(problems) == 0:
		delete(ps.peers, peer)
	default:
		if ps.peers == nil {
			ps.peers = map[uint64]*PeerConfig{}
		}
		ps.peers[peer] = &PeerConfig{Node: peer, Refused: len(fatal) > 0, Problems: problems, Checked: time.Now()}
	}
	if changed {
		switch {
		case len(fatal) > 0:
			n.log.Error().Uint64("peer", peer).Strs("problems", problems).Msg("cluster peer refused: its cluster parameters differ from this node's: " + strings.Join(fatal, "; "))
		case len(warn) > 0:
			n.log.Warn().Uint64("peer", peer).Strs("problems", warn).Msg("cluster peer's configuration differs from this node's: " + strings.Join(warn, "; "))
		default:
			n.log.Info().Uint64("peer", peer).Msg("cluster peer's parameters now agree with this node's")
		}
		n.judgeOutLocked()
	}
	if len(fatal) > 0 {
		return fmt.Errorf("%s", strings.Join(fatal, "; "))
	}
	return nil
}

// judgeOutLocked decides whether this node is out of the cluster: the
// members whose parameters agree with its own (itself included) are no
// majority of the members it knows.
func (n *Node) judgeOutLocked() {
	ps := &n.params
	ids := n.peerIDs()
	members := len(ids) + 1
	refused := 0
	var problems []string
	for _, id := range ids {
		if pc := ps.peers[id]; pc != nil && pc.Refused {
			refused++
			problems = append(problems, pc.Problems...)
		}
	}
	out := ""
	if refused > 0 && members-refused < members/2+1 {
		out = fmt.Sprintf("node %d is not part of the cluster: its parameters differ from those of most members: %s", n.cfg.NodeID, strings.Join(problems, "; "))
	}
	if out != ps.out {
		switch {
		case ps.out == "" && out != "":
			n.log.Error().Msg(out + ": it serves no client until it is restarted with the cluster's parameters")
		case ps.out != "" && out == "":
			n.log.Info().Msg("this node's parameters agree with most members' again: it serves clients")
		}
		ps.out = out
		n.outErr.Store(&out)
	}
}

// refusedPeer returns how peer's parameters differ from this node's in
// what must agree, or "".
func (n *Node) refusedPeer(peer uint64) string {
	n.params.mu.Lock()
	defer n.params.mu.Unlock()
	if pc := n.params.peers[peer]; pc != nil && pc.Refused {
		return strings.Join(pc.Problems, "; ")
	}
	return ""
}

// forgetParams drops what was found of peer's parameters.
func (n *Node) forgetParams(peer uint64) {
	n.params.mu.Lock()
	defer n.params.mu.Unlock()
	if n.params.peers[peer] != nil {
		delete(n.params.peers, peer)
		n.judgeOutLocked()
	}
}

// outOfClusterError is why a node out of the cluster refuses an
// operation: not worth trying again (it lasts until a restart).
type outOfClusterError struct{ why string }

func (e outOfClusterError) Error() string { return e.why }

func isOutOfCluster(err error) bool {
	var e outOfClusterError
	return errors.As(err, &e)
}

// OutOfCluster returns why this node serves no client, or "": its
// parameters differ, in what must agree, from those of most members.
func (n *Node) OutOfCluster() string { return n.outOfCluster() }

// outOfCluster returns why this node serves no client, or "".
func (n *Node) outOfCluster() string {
	if p := n.outErr.Load(); p != nil {
		return *p
	}
	return ""
}

// peerConfigs lists the peers whose parameters differ or are unchecked.
func (n *Node) peerConfigs() []PeerConfig {
	n.params.mu.Lock()
	defer n.params.mu.Unlock()
	var out []PeerConfig
	for _, pc := range n.params.peers {
		c := *pc
		c.Problems = slices.Clone(pc.Problems)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b PeerConfig) int { return cmpU64(a.Node, b.Node) })
	return out
}

// SetDiverts tells the node that its access broker's diverts were
// reloaded: its links, made before, carry the ones it started with, so
// from now on no node compares its diverts with this one's (until it
// restarts); the other parameters are still compared.
func (n *Node) SetDiverts(ds []core.Divert) {
	ps := &n.params
	ps.mu.Lock()
	ps.mine.diverts = digest(diverts(ds))
	ps.mine.flags |= flagDivertsReloaded
	mine := ps.mine.encode()
	// The warnings about diverts recorded so far no longer hold.
	for id, pc := range ps.peers {
		pc.Problems = slices.DeleteFunc(pc.Problems, func(s string) bool { return strings.Contains(s, "diverts differ") })
		if len(pc.Problems) == 0 {
			delete(ps.peers, id)
		}
	}
	ps.mu.Unlock()
	if s, ok := n.tr.(interface{ SetParams([]byte) }); ok {
		s.SetParams(mine)
	}
}

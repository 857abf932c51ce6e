// Package cluster makes Junction brokers a replicated cluster on
// go.etcd.io/raft/v3: every durable change is committed on a majority of
// nodes before a client is told it is durable, and a node that dies or
// is cut off loses nothing confirmed.
//
// # Groups and placement
//
// Addresses are spread over a fixed number of Raft groups (Config.Groups)
// by the FNV-1a hash of their name; a temporary queue lives in the group
// its name says (temp-queue.g<N>.…). Every node is a member of every
// group. The leader of a group runs its group broker: a plain
// core.Broker whose journals are the group's replicated log
// (groupJournal), so each group is a broker shard whose every write is a
// Raft entry. Group leaders are spread over the nodes: group g prefers
// the ((g-1) mod N)-th voter, and a leader hands the group to its
// preferred node once that node is caught up (balanceLeaders). A
// handover elects the new leader at once, while the old one still hears
// from a majority: the old leader flags what it delivers from the
// handover's start, and the new one serves only a lease later
// (lease.go).
//
// # State and activation
//
// Every node applies every committed entry of every group to the group's
// state (groupState): the live records of the group broker's message and
// bindings journals, as a single broker's journal would hold them after a
// restart. A node elected leader applies everything committed before its
// term, then builds the group broker from that state exactly as a broker
// recovers at start (messages come back flagged redelivered), and only
// then serves the group. A node that loses the leadership (a newer term,
// or CheckQuorum: it cannot hear from a majority) closes its group broker
// at once and fails every write in flight with core.ErrUnavailable ("the
// outcome is unknown"): memory and the replicated log never disagree for
// long.
//
// # The log
//
// One Raft loop drives every group (loop.go): it collects the Ready of
// every group, saves them with one raftlog.Save (one journal batch, one
// fdatasync), then sends their messages (a leader's appends and
// heartbeats before the save, so that its followers write while it
// does), then applies their committed entries, then advances (a
// leader applies those already on its disk before the save). A group
// proposes its group broker's writes only while none of its entries
// waits for its commit: the writes made meanwhile become its next entry
// (more than one only past Config.MaxEntryBytes), proposed as soon as
// the one before commits (group commit: every entry costs each node a
// save and a round of messages, whatever its size; the followers hear
// the commit with the next entry, and the leader applies the one while
// it saves the other). A write completes when its entry is applied on
// this node, which is after it is committed on a majority and durable
// here. A follower's state keeps slices of the entries it applied until
// its next snapshot, when the records still live get memory of their
// own (state.go). The log lives in Junction's journal
// (cluster/raftlog), which keeps a group's entries in memory until they
// are compacted; a group snapshots its state every
// Config.SnapshotEntries applied entries, or sooner once its entries since
// the last snapshot hold more than Config.SnapshotBytes (16 MiB) and more than its
// state, which compacts its log (keeping up to 16 MiB below the snapshot
// for followers slightly behind), so that the log held in memory is
// bounded by bytes as well as by count; a follower too far behind gets the snapshot (sent in chunks on the bulk
// lane so that it never delays heartbeats).
//
// # Forwarding
//
// A client may connect to any node and use any address. The node's
// broker is an access broker (core.Config.Cluster): its sessions forward
// sends to the leader of each address's group, and feed each consumer
// from a mirror queue whose upstream consumer lives on the group broker
// (one per group it reads: every group for a wildcard subscription).
// When the leader is this node the calls are direct (a local link);
// otherwise they are frames on the transport's RPC lane (wire.go). The
// links between nodes number their frames per epoch (links.go): a lost
// frame (or a whole epoch of them, even before any frame of the peer
// arrived), a restarted peer or a silent link resets everything the two
// nodes had with each other, and the consumers re-attach to the groups'
// current leaders, their unsettled messages redelivered flagged. Sends in
// flight when a leader changes fail (the client may send again; the
// message may then be there twice, never lost).
//
// # Membership
//
// A node is added (AddMember, `junction cluster add`) to every group as a
// learner, then promoted to voter once its log has caught up; removed
// from every group by RemoveMember. A node started with an empty log
// founds the cluster with Config.Peers unless Config.Join, with which it
// waits to be added. A node whose data was lost must restart with Join:
// it then does not vote for four election timeouts, so that it cannot
// vote twice in a term it voted in before it lost its log.
//
// What every node must agree on travels in the handshake of each link
// (params.go): the number of groups and the placement rule, whose
// mismatch refuses the link both ways (a node refused by most members
// serves no client, and an add of such a node is undone), and a digest
// of the routing configuration (diverts, address settings, virtual
// topics), whose mismatch is only warned about, so that a rolling
// restart can change it.
//
// # Broker events
//
// Each node's access broker publishes its own events (connections,
// consumers, failed logins) and those of the group brokers this node
// runs (addresses, queues, messages dead-lettered, expired or dropped,
// slow consumers, full addresses), which hand them to it
// (core.Config.EventsTo, core.Broker.ForwardEvent) instead of publishing
// them, whichever group holds the notification address: one path, one
// bounded buffer and one count of dropped events per node. It sends
// each, stamped with the node's id (core.PropEventNode), through an
// internal session as a client's non-durable multicast send to the
// notification address's group, whose broker creates the address when
// it becomes active. A group broker drops its events about sessions and
// consumers (those the access brokers open on it: their own events
// tell of them, once), and every broker drops events about the
// notification address itself, so publishing events makes none (events.go).
//
// # What a cluster does not do (yet)
//
//   - A transaction may touch one group only (core.ErrCrossGroupTx).
//   - Group brokers do not page to disk and keep large bodies in the log:
//     a message is at most Config.MaxMessageBytes, and every node holds
//     its groups' live messages in memory.
//   - The dead-letter and expiry addresses are kept per group; a consumer
//     of one reads every group.
//   - Diverts apply where a send enters the cluster: each node's access
//     broker applies those of its configuration file (the same on every
//     node), and forwards each copy to the group of its address like a
//     send of its own; group brokers apply none. Diverts made through
//     the API are refused (core.ErrNotInCluster): they would apply on
//     one node only. Virtual topics are the groups' brokers': groupOf
//     places a queue Consumer.NAME.VirtualTopic.X with its topic.
package cluster

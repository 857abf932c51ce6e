// Package core is Junction's broker: the protocol-neutral message model
// and everything that happens between a producer's send and a consumer's
// ack. It knows no protocol, no socket and no file: the front-ends
// (stomp, mqtt, amqp) translate their frames into its calls, and the
// ports it declares (below) are implemented by persistence, security
// and cluster, wired together in cmd/junction.
//
// # The model
//
//   - A [Message] is immutable once sent and shared: a multicast message
//     is held by every subscription that takes it, never copied.
//   - An address is a destination name. Anycast sends go to its queue,
//     named as the address; multicast sends go to every subscription
//     bound to it or to a wildcard pattern matching it (package
//     core/wildcard: words separated by '.', '*' one word, '#' or '>' any
//     number). An address is created on first use when its
//     [AddressSettings] allow (auto-create), or by an administrator.
//   - A [Queue] holds references to messages for its consumers: an
//     address's anycast queue, or one subscription (non-durable, deleted
//     with its consumer; durable, named clientID.name, kept until
//     unsubscribed; shared, "$share/name/address", one queue its
//     consumers compete for).
//   - A [Session] is a connection's identity (user, client id, protocol)
//     and groups its consumers, transactions and temporary queues;
//     closing it closes them.
//   - A [Consumer] reads one queue within its credit: the number of
//     further messages it may be handed. Credit only grows by
//     [Consumer.Flow] (or [Consumer.UpdateCredit], [Consumer.Drain]); an
//     ack does not restore it, so each front-end decides when to grant
//     more (STOMP on ack, AMQP by flow frames, MQTT by its receive
//     maximum). A [Delivery] is handed to the consumer's [Handler] with
//     the queue's lock held: a handler must not block and must not call
//     back into the broker. Each delivery is settled by [Consumer.Ack],
//     [Consumer.Release] (failed or not), or [Consumer.Reject]; closing a
//     consumer returns what it had not settled to the queue, counted as
//     a failed attempt.
//
// A queue dispatches by priority, then in order; honours message groups,
// exclusive consumers and consumers' selectors (package core/selector);
// redelivers after a back-off; moves a message to its address's
// dead-letter address after max-delivery-attempts and to its expiry
// address once it expires. Past its byte limit, or while the broker is
// over its memory budget, a new message follows its address's full
// policy: PAGE (to the queue's page store on disk), BLOCK, FAIL or DROP
// (memory.go, paging.go).
//
// # The ports core declares, and who implements them
//
//	Journal, TxJournal,   the durable store: records by id, transactions;  persistence/journal (structurally,
//	MessageJournal        Replay at start                                  checked in cmd/junction); a cluster's
//	                                                                        group journal (cluster)
//	LargeStore            bodies above the large-message threshold        persistence/large
//	Pager, PageStore      page stores of queues past their limit           persistence/page (adapted in cmd)
//	Authenticator         checks credentials                              security
//	Authorizer            permissions per user and address                 security
//	Cluster, Catalog,     an access broker's way to the replicated groups  cluster
//	RemoteSession,        that hold its addresses (cluster.go); Sink, Feed
//	Upstream, ClusterAdmin feed mirror queues
//
// Without a journal core keeps everything in memory; without an
// Authorizer everything is allowed; a Cluster makes the broker an access
// broker that keeps no queues of its own.
//
// # Who owns what, and which goroutines core starts
//
// Broker.mu (a RWMutex) guards the maps of addresses, queues and wildcard
// subscriptions; sends take it only to read. Broker.sessMu, a leaf,
// guards the registry of client sessions and their client ids, which
// every connection's open and close changes.
// Each Queue.mu guards its ready lists, scheduled messages, consumers
// and their in-flight lists and credit. Session.mu guards the session's
// own sets. The order, and what is never held across what (no lock across
// a journal sync; the Authorizer called with no broker-wide lock), is
// written in locksordering.txt. Statistics are atomic counters read
// without locks.
//
// Core starts few goroutines: the expiry scanner and, with disk limits,
// the disk watcher; while a queue pages to disk, one goroutine reading
// its page store back (all three joined by [Broker.Close]); and per
// queue with scheduled messages one
// time.AfterFunc timer. Completions of journal writes run on the
// journal's goroutine. With Config.Events, one goroutine publishes the
// broker's events (events.go): the code that notices one only offers it
// to a bounded channel, with whatever lock it holds, and never waits.
// Everything else runs on the caller's goroutine:
// a front-end's read loop sends and settles, and deliveries are handed to
// handlers from whichever goroutine made them possible (a send, a flow,
// a release, a timer).
//
// # The life of a durable message
//
//  1. A front-end decodes a frame into a Message and calls
//     [Session.SendAsync] (or [Session.Send], or [Tx.Send] and
//     [Tx.Commit]).
//  2. The session checks the send permission (cached), stamps id,
//     timestamp and user, and resolves the address, auto-creating it and
//     its queue if needed: a new durable queue's binding is synced to the
//     bindings journal with no lock held before the queue is bound
//     (create.go), so no confirmed message names a queue the journal
//     does not know. Scheduling properties set its delivery time, or
//     make it a repeating message the scheduler keeps as a job and sends
//     copies of (schedule.go).
//     A composite address ("queue://a,topic://b") is sent part by part,
//     and a divert or virtual topic of the address adds copies that are
//     routed like sends of the broker's own, one confirmation for all
//     (divert.go).
//  3. The router picks the queues (the anycast queue, or the matching
//     subscriptions that admit it: selector, no-local, and for a wildcard
//     subscription the reader's consume permission on this address).
//     A duplicate id claims its place in the address's cache (dedup.go).
//  4. If the message is durable and reaches a durable queue it is encoded
//     once (codec.go: the message and its durable queues' ids) and
//     appended to the journal with sync set (with its duplicate id, in
//     one journal transaction); it is enqueued at once, visible to
//     consumers, while the producer's confirmation waits for the journal
//     to call back after the fdatasync that covers it (group commit: one
//     sync for many producers).
//     On each queue a last-value key replaces the waiting message with
//     the same key, and a full ring drops its oldest (lvq.go).
//     A non-destructive queue gives each consumer a copy of each message
//     and keeps it (nondestructive.go).
//  5. A queue hands it to a consumer with credit; the consumer's front-end
//     writes it to its client.
//  6. The ack deletes its reference; with the last durable reference the
//     record is deleted from the journal (not synced: losing the delete
//     in a crash means a redelivery, flagged). A failed delivery writes
//     its count, so the redelivered flag and max-delivery-attempts
//     survive a restart.
//  7. At start [New] replays the bindings, then the messages in the order
//     they were sent, with their updates; every recovered message is
//     flagged redelivered, since it may have been delivered before.
//
// In a cluster, the group broker of the message's group does steps 2 to
// 7, its journal the group's Raft log (a write completes once committed
// on a majority), while the access broker the client talks to forwards
// the send and feeds the consumer from a mirror queue (cluster.go).
package core

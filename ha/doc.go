// Package ha is the store lock of Junction's shared-store high
// availability: two or more brokers are started on one data directory;
// the one holding the store lock is live, the others are backups that try
// the lock every poll interval and, once they hold it, recover the store
// exactly as a restart does (cmd/junction wires that; docs/ha.md is the
// user's guide).
//
// # Files
//
// Both live in the data directory:
//
//	ha.lock   the lock: a POSIX fcntl write lock on the whole file. Its
//	          content is the holder's heartbeat, rewritten in place and
//	          synced by every monitor check ("node pid N epoch E checked T").
//	ha.state  who holds, or last held, the store: JSON {state, node, pid,
//	          epoch, since}. A new holder replaces it (write, fsync,
//	          rename, fsync of the directory) as soon as it holds the lock,
//	          with the epoch one above the last; a graceful Release marks it
//	          "stopped". Backups read it to say whom they wait for.
//
// # Which lock, and why
//
// The lock is an open-file-description lock (F_OFD_SETLK, Linux 3.15 and
// later), not a classic POSIX record lock (F_SETLK): a classic lock
// belongs to the process and is dropped when the process closes any
// descriptor of the file, so an unrelated open and close of ha.lock
// anywhere in the broker (a diagnostic, a library) would silently hand
// the store to a backup. An OFD lock belongs to the one open file
// description made by TryLock and lasts until that is closed, or the
// process dies: kill -9 releases it at once, SIGSTOP keeps it. OFD locks
// also conflict between two descriptions in one process, which lets the
// tests run two brokers in one process. Where the kernel refuses OFD
// locks (EINVAL) the classic lock is used; Lock keeps its one descriptor
// for its whole life, so the rule above still holds for Junction's own
// code. fcntl locks, unlike flock(2) on some systems, are honoured by
// NFSv4 servers, which is what makes a shared store on NFS possible.
//
// # What the holder checks
//
// A holder cannot be told by the kernel that it lost its lock, so Monitor
// proves, every interval and within a deadline, that it still holds the
// store: ha.lock is still the file it locked (same device and inode), each
// file given to Watch (the journals' own LOCK files) is still the one it
// was, ha.state still names this holder (node, pid, epoch and since), and
// a write and sync of the heartbeat succeed (on NFS a lost lock makes I/O
// on the locked file fail with EIO; a dead server makes it hang, which
// the deadline catches). Any failure, or a check that does not return in
// time, is reported once as ErrLost; the caller must stop writing and
// exit rather than share the store with another live broker.
//
// # What the lock guarantees, and what it does not
//
// On a local file system (and for processes on one host) the lock is
// exact: one holder at a time, released the instant its process dies.
// On NFSv4 the lock is a lease the client renews: a holder cut off from
// the server longer than the lease (90 s by default) loses the lock and
// a backup can take it. The monitor's deadline (interval plus timeout,
// seconds) is meant to be far shorter than the lease, so a holder that
// cannot reach the store stops itself before its lease can expire. There
// is no fencing token in the store's files: a holder that is paused
// (SIGSTOP, a frozen VM) for longer than the lease wakes up and may write
// before its first check runs. That window, and file systems whose locks
// are not shared between hosts (NFSv3 without a working lock manager,
// OCFS2 without cluster locks), are outside what this package can
// detect; docs/ha.md lists the supported stores.
package ha

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/ha"
	"github.com/junctionmq/junction/management"
	"github.com/junctionmq/junction/persistence/journal"
)

// haNode is this process's part in a shared-store group (--ha
// shared-store): it takes the store lock, waiting for it as a backup,
// and once live keeps proving it holds the store (package ha).
type haNode struct {
	cfg Config
	log zerolog.Logger

	// Set by acquire on serve's goroutine, read after it returns.
	lock     *ha.Lock
	waited   bool      // was a backup before it held the lock
	lockedAt time.Time // when the lock was taken
	// auth checks the backup console's logins (with users configured):
	// a broker that holds nothing. Closed at release.
	auth *core.Broker

	mu         sync.Mutex
	st         management.HAStatus
	lastHolder ha.State
	lastErr    string
	journalLog bool // the wait for a journal's lock was logged
}

// status is what the console, /readyz and the metrics report.
func (h *haNode) status() management.HAStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st
}

func sameHolder(a, b ha.State) bool {
	return a.Node == b.Node && a.PID == b.PID && a.Epoch == b.Epoch && a.Since.Equal(b.Since)
}

// acquire takes the store lock. While another broker holds it this
// broker is a backup: it serves its console (nothing else) and tries the
// lock every ha-lock-poll. It returns false without an error when ctx
// ends first.
func (h *haNode) acquire(ctx context.Context, in *instance, cfg Config) (bool, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var backupErr error
	lock, err := ha.Acquire(actx, cfg.DataDir, cfg.HALockPoll, func(holder ha.State, err error) {
		if backupErr != nil {
			return
		}
		if !h.waited {
			h.waited = true
			h.setWaiting(holder)
			if backupErr = h.openBackupConsole(in, cfg); backupErr != nil {
				cancel()
				return
			}
			ev := h.log.Info().Str("data_dir", cfg.DataDir).Str("status", h.status().Describe()).
				Dur("lock_poll", cfg.HALockPoll)
			for name, a := range in.addrs {
				ev = ev.Str(name, a.String())
			}
			ev.Msg("junction started as a backup: no messaging listener until it holds the store lock")
			return
		}
		if err != nil {
			if err.Error() != h.lastErr {
				h.lastErr = err.Error()
				h.log.Warn().Err(err).Msg("backup: trying the store lock failed; trying again")
			}
			return
		}
		if !sameHolder(holder, h.lastHolder) {
			h.setWaiting(holder)
			h.log.Info().Str("status", h.status().Describe()).Msg("backup: the store lock changed hands")
		}
	})
	switch {
	case backupErr != nil:
		return false, backupErr
	case err != nil && ctx.Err() != nil:
		return false, nil
	case err != nil:
		return false, err
	}
	h.lock, h.lockedAt = lock, time.Now()
	st := lock.State()
	h.mu.Lock()
	h.st.Role = management.RoleBackup // until the listeners are up
	h.st.Detail = fmt.Sprintf("holding the store lock since %s (epoch %d), recovering the store", st.Since.Format(time.RFC3339), st.Epoch)
	h.mu.Unlock()
	if h.waited {
		h.log.Info().Uint64("epoch", st.Epoch).Str("previous", h.lastHolder.String()).
			Msg("backup: took the store lock; recovering the store")
	}
	return true, nil
}

func (h *haNode) setWaiting(holder ha.State) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastHolder = holder
	h.st = management.HAStatus{Role: management.RoleBackup, Takeovers: h.st.Takeovers, LastTakeover: h.st.LastTakeover}
	if holder.Epoch != 0 {
		h.st.Holder = fmt.Sprintf("%s pid %d", holder.Node, holder.PID)
		h.st.HolderEpoch, h.st.HolderSince = holder.Epoch, holder.Since
	}
}

// openBackupConsole serves the console listener with the backup's
// handler; the management handler takes its place at the takeover, on
// the same listener.
func (h *haNode) openBackupConsole(in *instance, cfg Config) error {
	if cfg.Console.Listen == "" || in.console != nil {
		return nil
	}
	if in.sec == nil {
		sec, err := newBrokerSecurity(cfg, in.log)
		if err != nil {
			return err
		}
		in.sec = sec
	}
	sec := in.sec
	var err error
	requireLogin := sec.store.HasUsers()
	if requireLogin {
		bcfg := core.Config{Logger: in.log.With().Str("component", "core").Logger(), ExpiryScanInterval: -1}
		sec.configure(&bcfg)
		if h.auth, err = core.New(bcfg); err != nil {
			return err
		}
	}
	sec.start(h.auth)
	anonymous, _, _ := cfg.anonymousPolicy() // validated: no error
	if in.hosts, err = newHostGuard(cfg, in.log.With().Str("component", "http").Logger(), requireLogin, anonymous); err != nil {
		return fmt.Errorf("allowed hosts: %w", err)
	}
	in.console = &swapHandler{}
	in.console.set(management.NewBackup(management.Config{
		Version:           version,
		Listeners:         in.listenerAddrs,
		HA:                h.status,
		Logger:            in.log.With().Str("component", "management").Logger(),
		RequireLogin:      requireLogin,
		AllowHost:         in.hosts.console.Allows,
		OnHostRefused:     in.hosts.refused,
		RequestRejections: in.hosts.rejections,
	}, h.auth))
	return in.serveHTTP("console", cfg.Console.Listen, in.console)
}

// waitForJournal waits one poll interval for a journal locked by another
// process although the store lock is ours: a broker started without
// --ha, or one whose store lock was taken from it and that stops within
// its check interval. Meanwhile the broker is a backup that says so on
// its console. It returns false when ctx ends first, or with the error
// of opening the console.
func (h *haNode) waitForJournal(ctx context.Context, in *instance, err error) (bool, error) {
	st := h.lock.State()
	h.mu.Lock()
	h.st.Detail = fmt.Sprintf("holding the store lock since %s (epoch %d), waiting for a journal locked by another process (a broker started without --ha?)",
		st.Since.Format(time.RFC3339), st.Epoch)
	logIt := !h.journalLog
	h.journalLog = true
	h.mu.Unlock()
	if logIt {
		if err := h.openBackupConsole(in, h.cfg); err != nil {
			return false, err
		}
		h.log.Warn().Err(err).Msg("holding the store lock, but a journal of the data directory is locked by another process " +
			"(a broker started without --ha, or one that lost the store lock and is stopping); waiting")
	}
	t := time.NewTimer(h.cfg.HALockPoll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, nil
	case <-t.C:
		return true, nil
	}
}

// guard starts proving that this broker still holds the store, now that
// the journals are open: their LOCK files must stay the files they
// locked. A failure fences the store and stops the broker.
func (h *haNode) guard(in *instance) error {
	if err := h.lock.Watch(
		filepath.Join(h.cfg.DataDir, "journal", journal.LockName),
		filepath.Join(h.cfg.DataDir, "bindings", journal.LockName),
	); err != nil {
		return err
	}
	h.lock.Monitor(h.cfg.HACheckInterval, h.cfg.HACheckTimeout, in.loseStore)
	return nil
}

// becameLive records that the listeners are up; after a wait as a
// backup it logs the takeover with the time from lock to ready, and of
// it the time spent opening the store (reading the journals, replaying
// them into the broker).
func (h *haNode) becameLive(storeOpen time.Duration) {
	st := h.lock.State()
	now := time.Now()
	h.mu.Lock()
	h.st = management.HAStatus{Role: management.RoleLive, Epoch: st.Epoch, Since: st.Since,
		Takeovers: h.st.Takeovers, LastTakeover: h.st.LastTakeover}
	if h.waited {
		h.st.Takeovers++
		h.st.LastTakeover = now
	}
	h.mu.Unlock()
	if h.waited {
		h.log.Info().Uint64("epoch", st.Epoch).Dur("lock_to_ready", now.Sub(h.lockedAt)).Dur("store_open_time", storeOpen).
			Msg("took over the shared store: live")
	}
}

// release gives the store lock up (last, after the stores are closed);
// nil-safe.
func (h *haNode) release() error {
	if h == nil {
		return nil
	}
	if h.auth != nil {
		h.auth.Close()
	}
	if h.lock == nil {
		return nil
	}
	return h.lock.Release()
}

// loseStore is the monitor's verdict that this broker can no longer prove
// it holds the store: nothing more is written (journals failed, page
// stores and large messages fenced), the broker stops being ready, and
// serve shuts down and returns the error (the process exits non-zero).
func (in *instance) loseStore(err error) {
	in.log.Error().Err(err).Msg("lost the shared store: writing nothing more, closing the listeners and exiting")
	in.fence.fail(err)
	in.msgs.Fail(err)
	in.bindings.Fail(err)
	in.ready.Store(false)
	select {
	case in.errc <- err:
	default: // serve is stopping already
	}
}

// swapHandler is an http.Handler whose handler can be replaced while it
// serves: the console listener a backup opens keeps serving after the
// takeover, with the management handler.
type swapHandler struct{ h atomic.Pointer[http.Handler] }

func (s *swapHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// storeFence turns the page stores' and large messages' writes into
// errors once the store is lost (the journals have Journal.Fail).
type storeFence struct{ err atomic.Pointer[error] }

func (f *storeFence) fail(err error) { f.err.CompareAndSwap(nil, &err) }

func (f *storeFence) check() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

type fencedPager struct {
	core.Pager
	f *storeFence
}

func (p fencedPager) Open(name string) (core.PageStore, error) {
	if err := p.f.check(); err != nil {
		return nil, err
	}
	s, err := p.Pager.Open(name)
	if err != nil {
		return nil, err
	}
	return fencedPageStore{s, p.f}, nil
}

func (p fencedPager) Remove(name string) error {
	if err := p.f.check(); err != nil {
		return err
	}
	return p.Pager.Remove(name)
}

type fencedPageStore struct {
	core.PageStore
	f *storeFence
}

func (s fencedPageStore) Append(rec []byte) error {
	if err := s.f.check(); err != nil {
		return err
	}
	return s.PageStore.Append(rec)
}

func (s fencedPageStore) Sync(done func(error)) {
	if err := s.f.check(); err != nil {
		go done(err) // the contract: done runs on another goroutine
		return
	}
	s.PageStore.Sync(done)
}

func (s fencedPageStore) Release(pos uint64) error {
	if err := s.f.check(); err != nil {
		return err
	}
	return s.PageStore.Release(pos)
}

// Close after the loss leaves the files as they are: closing flushes
// and syncs what was appended.
func (s fencedPageStore) Close() error {
	if err := s.f.check(); err != nil {
		return err
	}
	return s.PageStore.Close()
}

type fencedLarge struct {
	core.LargeStore
	f *storeFence
}

func (l fencedLarge) Write(id uint64, r io.Reader) (int64, error) {
	if err := l.f.check(); err != nil {
		return 0, err
	}
	return l.LargeStore.Write(id, r)
}

func (l fencedLarge) Link(from, to uint64) error {
	if err := l.f.check(); err != nil {
		return err
	}
	return l.LargeStore.Link(from, to)
}

func (l fencedLarge) Remove(id uint64) error {
	if err := l.f.check(); err != nil {
		return err
	}
	return l.LargeStore.Remove(id)
}

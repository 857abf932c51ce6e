package security

import (
	"context"
	"errors"
	"os"
	"time"
)

// Reloader rereads a users file when its modification time or size
// changes and installs it in a Store. A file that cannot be read or
// parsed leaves the table in force; OnError hears about it (once per
// change of the file, not at every poll).
type Reloader struct {
	// Path is the users file.
	Path string
	// Store receives each good table.
	Store *Store
	// Interval between polls; zero means 2s.
	Interval time.Duration
	// OnReload, if set, is called after a new table is installed.
	OnReload func(*Users)
	// OnError, if set, is called when the file changed but could not be
	// loaded.
	OnError func(error)
}

// fileStamp identifies a version of the file cheaply.
type fileStamp struct {
	mod  time.Time
	size int64
	ok   bool
}

func stat(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size(), ok: true}
}

// Run polls until ctx is done. The caller owns the goroutine that runs
// it: start it with go, cancel ctx and wait for Run to return to stop
// it. The file's current state counts as loaded (the caller loaded it
// at start), so only later changes are reloaded. A change is loaded
// once the file has stayed the same for one interval, so that a file
// being rewritten in place is not read half-written.
func (r *Reloader) Run(ctx context.Context) {
	iv := r.Interval
	if iv <= 0 {
		iv = 2 * time.Second
	}
	loaded := stat(r.Path)
	seen := loaded
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := stat(r.Path)
		if cur != seen {
			seen = cur // changed since the last poll: wait until it settles
			continue
		}
		if cur != loaded {
			loaded = cur
			r.Reload()
		}
	}
}

// ErrEmptyUsersFile: a reload found the users file empty. A file being
// rewritten in place (truncated, then written) is empty for a moment,
// and on a busy machine that moment can outlast a poll; so an empty file
// is not taken to mean "no users" (write `users: {}` for that).
var ErrEmptyUsersFile = errors.New("security: the users file is empty (not reloaded; to remove every user write \"users: {}\")")

func (r *Reloader) load() (*Users, error) {
	if fi, err := os.Stat(r.Path); err == nil && fi.Size() == 0 {
		return nil, ErrEmptyUsersFile
	}
	return LoadUsers(r.Path)
}

// Reload loads the file now and installs it, reporting to OnReload or
// OnError. It returns whether the new table was installed.
func (r *Reloader) Reload() bool {
	u, err := r.load()
	if err != nil {
		if r.OnError != nil {
			r.OnError(err)
		}
		return false
	}
	r.Store.SetUsers(u)
	if r.OnReload != nil {
		r.OnReload(u)
	}
	return true
}

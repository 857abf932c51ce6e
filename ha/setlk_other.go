//go:build unix && !linux

package ha

import (
	"os"

	"golang.org/x/sys/unix"
)

// setlk takes a classic POSIX write lock on the whole of f without
// waiting (no OFD locks here: see the package doc). It returns ErrLocked
// when another holder has it.
func setlk(f *os.File) error {
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	return lockErr(f, unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk))
}

// unlk releases the lock setlk took.
func unlk(f *os.File) error {
	lk := unix.Flock_t{Type: unix.F_UNLCK}
	return unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
}

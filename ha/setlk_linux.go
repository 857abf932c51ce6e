//go:build linux

package ha

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// setlk takes a write lock on the whole of f without waiting: an
// open-file-description lock, or a classic process lock on kernels
// without them (see the package doc). It returns ErrLocked when another
// holder has it.
func setlk(f *os.File) error {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
	if errors.Is(err, unix.EINVAL) {
		lk = unix.Flock_t{Type: unix.F_WRLCK}
		err = unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
	}
	return lockErr(f, err)
}

// unlk releases the lock setlk took.
func unlk(f *os.File) error {
	lk := unix.Flock_t{Type: unix.F_UNLCK}
	err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
	if errors.Is(err, unix.EINVAL) {
		lk = unix.Flock_t{Type: unix.F_UNLCK}
		err = unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
	}
	return err
}

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// readNoEcho reads a line from the terminal f with echo turned off.
func readNoEcho(f *os.File) (string, error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return readLine(f)
	}
	noEcho := *old
	noEcho.Lflag &^= unix.ECHO
	noEcho.Lflag |= unix.ICANON | unix.ISIG
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &noEcho); err != nil {
		return readLine(f)
	}
	defer unix.IoctlSetTermios(fd, unix.TCSETS, old)
	return readLine(f)
}

// isTTY reports whether f is a terminal: it answers the terminal
// ioctl. /dev/null, a character device as terminals are, does not.
func isTTY(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

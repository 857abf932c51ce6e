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

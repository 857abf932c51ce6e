//go:build !linux

package main

import "os"

// readNoEcho reads a line from the terminal f; echo stays on where
// Junction does not know how to turn it off.
func readNoEcho(f *os.File) (string, error) { return readLine(f) }

// isTTY reports whether f is a character device, the nearest Junction
// comes to knowing it is a terminal here.
func isTTY(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

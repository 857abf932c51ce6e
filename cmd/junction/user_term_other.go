//go:build !linux

package main

import "os"

// readNoEcho reads a line from the terminal f; echo stays on where
// Junction does not know how to turn it off.
func readNoEcho(f *os.File) (string, error) { return readLine(f) }

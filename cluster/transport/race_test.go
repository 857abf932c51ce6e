//go:build race

package transport

// raceEnabled: the race detector makes sync.Pool drop items at random,
// so allocation measurements mean nothing.
const raceEnabled = true

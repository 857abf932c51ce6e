package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// /dev/null is a character device, as a terminal is, but not a
// terminal: "junction user add" from a script or a unit with stdin on
// /dev/null must not prompt, and says what is missing instead of "EOF".
func TestUserAddStdinDevNull(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	var stdout, stderr bytes.Buffer
	path := filepath.Join(t.TempDir(), "users.yaml")
	err = runUser([]string{"add", "--file", path, "carol"}, noEnv, null, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "empty password") {
		t.Fatalf("user add with stdin on %s: %v, want an empty password refused", os.DevNull, err)
	}
	if strings.Contains(stderr.String(), "Password:") {
		t.Fatalf("prompted for a password on %s: %q", os.DevNull, stderr.String())
	}
}

// The console log format colours its lines only on a terminal: a log
// written to a file or a pipe has no escape sequences in it.
func TestConsoleLogNoColourOffTerminal(t *testing.T) {
	_, logs := startSecure(t, testConfig(t))
	out := logs.String()
	if !strings.Contains(out, "junction started") {
		t.Fatalf("no start line in the log:\n%s", out)
	}
	if strings.Contains(out, "\x1b[") {
		t.Fatalf("escape sequences in a log that is not a terminal:\n%q", out[:min(len(out), 300)])
	}
}

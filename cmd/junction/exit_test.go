package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestExitStatus runs the built binary: 0 for success and help, 2 for a
// wrong command line, 1 for a command that ran and failed; never a
// doubled "junction: junction" prefix.
func TestExitStatus(t *testing.T) {
	bin := buildBinary(t)
	stompAddr, _ := startServe(t, testConfig(t))
	console := lastInstance.addrs["console"].String()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String() // nothing listens there once closed
	l.Close()

	cases := []struct {
		want int
		args []string
	}{
		{0, []string{"--help"}},
		{0, []string{"help"}},
		{0, []string{"version"}},
		{0, []string{"queue", "-h"}},
		{0, []string{"bench", "-h"}},
		{0, []string{"bench", "stomp", "-h"}},
		{0, []string{"queue", "create", "exit.q", "--console", console}},
		{0, []string{"queue", "stat", "exit.q", "--console", console}},
		{0, []string{"send", "--to", "/queue/exit.q", "--body", "hi", "--stomp", stompAddr}},
		{0, []string{"receive", "--from", "/queue/exit.q", "--stomp", stompAddr}},

		{exitUsage, []string{"frobnicate"}},
		{exitUsage, []string{"--no-such-flag"}},
		{exitUsage, []string{"--log-level", "loud"}},
		{exitUsage, []string{"--max-connections", "many"}},
		{exitUsage, []string{"config", "validate"}},
		{exitUsage, []string{"queue"}},
		{exitUsage, []string{"queue", "stat", "--console", console}},
		{exitUsage, []string{"queue", "ls", "--bogus"}},
		{exitUsage, []string{"queue", "frob"}},
		{exitUsage, []string{"conn", "close"}},
		{exitUsage, []string{"cluster", "add", "x", "y"}},
		{exitUsage, []string{"send", "--body", "x"}},
		{exitUsage, []string{"receive", "--from", "/queue/a", "extra"}},
		{exitUsage, []string{"user", "ls"}},
		{exitUsage, []string{"cert", "dev", "extra"}},
		{exitUsage, []string{"bench", "--size", "big"}},
		{exitUsage, []string{"bench", "extra"}},
		{exitUsage, []string{"bench", "stomp", "-scenario", "nope", "-addr", closed}},
		{exitUsage, []string{"bench", "stomp", "-bogus"}},

		{exitFailure, []string{"queue", "ls", "--console", closed}},
		{exitFailure, []string{"queue", "stat", "no.such.queue", "--console", console}},
		{exitFailure, []string{"queue", "move", "exit.q", "no.such.queue", "--console", console}},
		{exitFailure, []string{"cluster", "status", "--console", console}},
		{exitFailure, []string{"config", "validate", "../../testdata/config/bad.yaml"}},
		{exitFailure, []string{"config", "validate", "no-such-file.yaml"}},
		{exitFailure, []string{"send", "--to", "/queue/a", "--body", "x", "--stomp", closed}},
		{exitFailure, []string{"receive", "--from", "/queue/exit.empty", "--timeout", "200ms", "--stomp", stompAddr}},
		{0, []string{"queue", "delete", "exit.q", "--console", console}},
		{exitFailure, []string{"queue", "delete", "exit.q", "--console", console}}, // gone
		{exitFailure, []string{"bench", "--url", "stomp://" + closed, "--count", "1", "--dial-timeout", "1s", "--console", closed}},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, bin, c.args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "TERM=dumb"}
		cmd.Dir = "."
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		got := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			got = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("junction %s: %v", strings.Join(c.args, " "), err)
		}
		if got != c.want {
			t.Errorf("junction %s: exit status %d, want %d\nstdout: %s\nstderr: %s", strings.Join(c.args, " "), got, c.want, stdout.String(), stderr.String())
		}
		if both := stdout.String() + stderr.String(); strings.Contains(both, "junction: junction") {
			t.Errorf("junction %s: doubled prefix:\n%s", strings.Join(c.args, " "), both)
		}
		if c.want != 0 && !strings.Contains(stderr.String(), "junction: ") {
			t.Errorf("junction %s: no error on stderr:\n%s", strings.Join(c.args, " "), stderr.String())
		}
	}
}

// TestExitCode checks the one function that maps run's errors to an exit
// status.
func TestExitCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{usagef("queue: unknown command %q", "x"), exitUsage},
		{&apiError{status: 404, msg: "no such queue"}, exitFailure},
		{errors.New("console 127.0.0.1:1: connection refused"), exitFailure},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

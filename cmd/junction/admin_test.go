package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	gostomp "github.com/go-stomp/stomp/v3"

	"github.com/junctionmq/junction/internal/stompclient"
)

// The admin commands against a running broker: send and receive over
// STOMP, queue and conn through the console's API.
func TestAdminCommands(t *testing.T) {
	stompAddr, _ := startServe(t, testConfig(t))
	console := "http://" + lastInstance.addrs["console"].String()
	noEnv := func(string) string { return "" }
	cli := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, noEnv, &out, &errOut)
		return out.String() + errOut.String(), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := cli(args...)
		if err != nil {
			t.Fatalf("junction %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}

	// --help lists the commands, then serve's flags.
	var help bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, noEnv, &help, &help); !errors.Is(err, flag.ErrHelp) ||
		!strings.Contains(help.String(), "junction cluster status") || !strings.Contains(help.String(), "-data-dir") {
		t.Fatalf("junction --help: %v\n%s", err, help.String())
	}

	// serve's listen address works too (the two share JUNCTION_CONSOLE).
	if out := must("queue", "ls", "--console", lastInstance.addrs["console"].String()); !strings.Contains(out, "NAME") {
		t.Fatalf("queue ls by listen address:\n%s", out)
	}
	for _, body := range []string{"first", "second\n"} {
		must("send", "--stomp", stompAddr, "--to", "/queue/cli.q", "--body", body, "--persistent", "--header", "kind=test")
	}
	if out := must("queue", "ls", "--console", console, "--filter", "cli."); !strings.Contains(out, "cli.q") || !strings.Contains(out, "DEPTH") {
		t.Fatalf("queue ls:\n%s", out)
	}
	var stat map[string]any
	if err := json.Unmarshal([]byte(must("queue", "stat", "cli.q", "--console", console, "--json")), &stat); err != nil || stat["depth"] != 2.0 {
		t.Fatalf("queue stat: %v %v", stat, err)
	}
	// Browsing does not consume; a body ending in a newline keeps its
	// row on one line.
	if out := must("queue", "browse", "cli.q", "--console", console); !strings.Contains(out, "first") || !strings.Contains(out, `second\n`) ||
		strings.Count(strings.TrimRight(out, "\n"), "\n") != 2 {
		t.Fatalf("queue browse (a header and two rows):\n%s", out)
	}
	must("queue", "create", "cli.dest", "--console", console)
	if out := must("queue", "move", "cli.q", "cli.dest", "--max", "1", "--console", console); !strings.Contains(out, "1") {
		t.Fatalf("queue move:\n%s", out)
	}
	if out := must("receive", "--stomp", stompAddr, "--from", "/queue/cli.dest", "--count", "1"); strings.TrimSpace(out) != "first" {
		t.Fatalf("receive after move: %q", out)
	}
	must("queue", "purge", "cli.q", "--console", console)
	if err := json.Unmarshal([]byte(must("queue", "stat", "cli.q", "--console", console, "--json")), &stat); err != nil || stat["depth"] != 0.0 {
		t.Fatalf("after purge: %v %v", stat, err)
	}
	must("queue", "delete", "cli.dest", "--console", console)
	if out, err := cli("queue", "stat", "cli.dest", "--console", console); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("stat of a deleted queue: %v\n%s", err, out)
	}
	if out := must("conn", "ls", "--console", console); !strings.Contains(out, "PROTOCOL") {
		t.Fatalf("conn ls:\n%s", out)
	}
	if _, err := cli("conn", "close", "999999", "--console", console); err == nil {
		t.Fatal("closing an unknown connection succeeded")
	}
}

// The top-level usage says "junction queue -h": asking a command for its
// usage prints it on stdout and succeeds, as junction --help does.
func TestAdminHelp(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, args := range [][]string{
		{"queue", "-h"}, {"queue", "--help"}, {"queue", "help"},
		{"conn", "-h"}, {"conn", "--help"},
		{"config", "-h"}, {"config", "--help"},
		{"cluster", "-h"}, {"cluster", "--help"}, {"cluster", "help"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, noEnv, &out, &errOut)
		if err != nil || !strings.Contains(out.String(), "usage:") {
			t.Errorf("junction %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out.String(), errOut.String())
		}
	}
	// A command it does not know still fails, with the usage.
	if err := run(context.Background(), []string{"queue", "bogus"}, noEnv, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "unknown command") {
		t.Errorf("junction queue bogus: %v", err)
	}
	if err := run(context.Background(), []string{"cluster", "bogus"}, noEnv, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "usage:") {
		t.Errorf("junction cluster bogus: %v", err)
	}
}

// A send or subscription the broker refuses reports why: Junction puts
// the reason in the ERROR frame's body, and the message header alone
// ("send failed") tells the user nothing.
func TestAdminSendReceiveErrorReason(t *testing.T) {
	stompAddr, _ := startServe(t, testConfig(t))
	noEnv := func(string) string { return "" }
	for _, args := range [][]string{
		{"send", "--stomp", stompAddr, "--to", "/queue/a.*", "--body", "x"},
		{"receive", "--stomp", stompAddr, "--from", "/queue/a.*", "--timeout", "5s"},
	} {
		start := time.Now()
		err := run(context.Background(), args, noEnv, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "a.*") || !strings.Contains(err.Error(), "wildcard") {
			t.Errorf("junction %s: %v, want the broker's reason (a wildcard)", strings.Join(args, " "), err)
		}
		// The broker closes the connection after its ERROR: no waiting
		// for the receipt of a DISCONNECT (go-stomp's 30 s).
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("junction %s took %v to fail", strings.Join(args, " "), d)
		}
	}
}

// With a users file, junction send and receive log in: --user, or
// $JUNCTION_USER, with $JUNCTION_PASSWORD or --password, as the queue
// and conn commands do. Without them they were anonymous, and refused.
func TestAdminSendReceiveLogin(t *testing.T) {
	in, _ := startSecure(t, secureConfig(t, writeUsers(t), false))
	stompAddr := in.addrs["stomp"].String()
	env := func(k string) string {
		return map[string]string{"JUNCTION_PASSWORD": alicePassword}[k]
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"send", "--stomp", stompAddr, "--user", "alice", "--to", "/queue/login.q", "--body", "hi"},
		env, &out, &out); err != nil {
		t.Fatalf("send as alice ($JUNCTION_PASSWORD): %v\n%s", err, out.String())
	}
	out.Reset()
	userEnv := func(k string) string { return map[string]string{"JUNCTION_USER": "alice"}[k] }
	if err := run(context.Background(), []string{"receive", "--stomp", stompAddr, "--password", alicePassword, "--from", "/queue/login.q", "--timeout", "5s"},
		userEnv, &out, io.Discard); err != nil || strings.TrimSpace(out.String()) != "hi" {
		t.Fatalf("receive as $JUNCTION_USER alice: %v, got %q", err, out.String())
	}
	// A wrong password is refused, with the broker's reason.
	err := run(context.Background(), []string{"send", "--stomp", stompAddr, "--user", "alice", "--password", wrongPassword, "--to", "/queue/login.q", "--body", "x"},
		noEnv, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("send with a wrong password: %v", err)
	}
}

// A stray argument is named as such, not reported as a missing --to
// (junction send --to /queue/q hello: the body is --body or stdin).
func TestAdminSendReceiveStrayArgument(t *testing.T) {
	for _, args := range [][]string{
		{"send", "--to", "/queue/q", "hello"},
		{"receive", "--from", "/queue/q", "extra"},
	} {
		err := run(context.Background(), args, noEnv, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "unexpected argument") || strings.Contains(err.Error(), "is required") {
			t.Errorf("junction %s: %v", strings.Join(args, " "), err)
		}
	}
	for _, args := range [][]string{{"send", "--body", "x"}, {"receive"}} {
		if err := run(context.Background(), args, noEnv, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "is required") {
			t.Errorf("junction %s: %v", strings.Join(args, " "), err)
		}
	}
}

// junction queue browse --json prints an XML body as it was sent.
func TestAdminBrowseJSONUnescaped(t *testing.T) {
	stompAddr, _ := startServe(t, testConfig(t))
	console := lastInstance.addrs["console"].String()
	if err := run(context.Background(), []string{"send", "--stomp", stompAddr, "--to", "/queue/xml.q", "--body", "<order id=\"1\"/>"},
		noEnv, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"queue", "browse", "xml.q", "--json", "--console", console}, noEnv, &out, &out); err != nil ||
		!strings.Contains(out.String(), `<order id=\"1\"/>`) {
		t.Fatalf("queue browse --json: %v\n%s", err, out.String())
	}
}

// junction send --header content-type=... sets the message's content
// type; it was sent after go-stomp's text/plain, and ignored.
func TestAdminSendContentTypeHeader(t *testing.T) {
	stompAddr, _ := startServe(t, testConfig(t))
	console := lastInstance.addrs["console"].String()
	if err := run(context.Background(), []string{"send", "--stomp", stompAddr, "--to", "/queue/ct.q", "--body", `{"a":1}`,
		"--header", "content-type=application/json", "--header", "kind=x"}, noEnv, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"queue", "browse", "ct.q", "--json", "--console", console}, noEnv, &out, &out); err != nil {
		t.Fatal(err)
	}
	var page struct {
		Messages []struct {
			ContentType string         `json:"contentType"`
			Properties  map[string]any `json:"properties"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(out.Bytes(), &page); err != nil || len(page.Messages) != 1 ||
		page.Messages[0].ContentType != "application/json" || page.Messages[0].Properties["kind"] != "x" {
		t.Fatalf("browsed %+v (%v):\n%s", page, err, out.String())
	}
}

// junction queue browse marks a binary body, which the API gives in
// base64: "AAECAw==" alone reads as a text body of those characters.
func TestAdminBrowseMarksBinary(t *testing.T) {
	startServe(t, testConfig(t))
	console := lastInstance.addrs["console"].String()
	for _, body := range []string{`{"address": "bin.q", "bodyBase64": "AAECA/8="}`, `{"address": "bin.q", "body": "AAECAw=="}`} {
		res, err := http.Post("http://"+console+"/api/v1/send", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"queue", "browse", "bin.q", "--console", console}, noEnv, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "base64:AAECA/8=") || strings.Contains(out.String(), "base64:AAECAw==") ||
		!strings.Contains(out.String(), "AAECAw==") {
		t.Fatalf("queue browse: the binary body unmarked, or the text one marked:\n%s", out.String())
	}
}

// junction queue delete --json prints what was deleted; the API answers
// 204 with no body, and it printed null.
func TestAdminQueueDeleteJSON(t *testing.T) {
	startServe(t, testConfig(t))
	console := lastInstance.addrs["console"].String()
	for _, name := range []string{"del.a", "del.b"} {
		if err := run(context.Background(), []string{"queue", "create", name, "--console", console}, noEnv, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"queue", "delete", "del.a", "--json", "--console", console}, noEnv, &out, &out); err != nil {
		t.Fatalf("queue delete --json: %v\n%s", err, out.String())
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || got["deleted"] != "del.a" {
		t.Fatalf("queue delete --json printed %q (%v), want {\"deleted\": \"del.a\"}", out.String(), err)
	}
	// Without --json it says so too.
	out.Reset()
	if err := run(context.Background(), []string{"queue", "delete", "del.b", "--console", console}, noEnv, &out, &out); err != nil ||
		!strings.Contains(out.String(), "deleted") || !strings.Contains(out.String(), "del.b") {
		t.Fatalf("queue delete: %v\n%s", err, out.String())
	}
	// A queue that is not there is still an error, with no JSON printed.
	out.Reset()
	if err := run(context.Background(), []string{"queue", "delete", "del.a", "--json", "--console", console}, noEnv, &out, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "404") || out.Len() != 0 {
		t.Fatalf("deleting a deleted queue: %v\n%s", err, out.String())
	}
}

// junction conn ls shows each connection's consumers, which the API
// gives, in a column of its own that lines up with its header.
func TestAdminConnLsConsumers(t *testing.T) {
	stompAddr, _ := startServe(t, testConfig(t))
	console := lastInstance.addrs["console"].String()
	c, err := gostomp.Dial("tcp", stompAddr, gostomp.ConnOpt.HeartBeat(0, 0), stompclient.Quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MustDisconnect()
	for _, dest := range []string{"/queue/conn.a", "/queue/conn.b"} {
		if _, err := c.Subscribe(dest, gostomp.AckAuto); err != nil {
			t.Fatal(err)
		}
	}
	// SUBSCRIBE has no answer: wait (bounded) until the API counts both.
	var out string
	for deadline := time.Now().Add(10 * time.Second); ; {
		var b bytes.Buffer
		if err := run(context.Background(), []string{"conn", "ls", "--console", console}, noEnv, &b, &b); err != nil {
			t.Fatalf("conn ls: %v\n%s", err, b.String())
		}
		out = b.String()
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		at := strings.Index(lines[0], "CONSUMERS")
		if at < 0 {
			t.Fatalf("conn ls has no CONSUMERS column:\n%s", out)
		}
		if len(lines) == 2 && len(lines[1]) > at && strings.HasPrefix(lines[1][at:], "2 ") && lines[1][at-1] == ' ' {
			break // the count sits under its header
		}
		if time.Now().After(deadline) {
			t.Fatalf("conn ls never showed 2 consumers under CONSUMERS:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

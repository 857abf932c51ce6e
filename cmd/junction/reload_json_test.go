package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// junction config reload --json on an invalid file prints the broker's
// report (its trigger, time and error), not a zero-valued one.
func TestConfigReloadJSONInvalidFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "junction.yaml")
	conf := func(level string) {
		t.Helper()
		y := fmt.Sprintf(`data-dir: %s
log-level: %s
config-watch-interval: 0s
stomp: {listen: "127.0.0.1:0"}
mqtt: {listen: ""}
amqp: {listen: ""}
websocket: {listen: ""}
all: {listen: ""}
console: {listen: "127.0.0.1:0"}
`, filepath.Join(dir, "data"), level)
		if err := os.WriteFile(file, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf("info")
	cfg, err := loadConfig([]string{"--config", file}, noEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := startSecure(t, cfg)
	console := in.addrs["console"].String()
	conf("loud")
	var out bytes.Buffer
	err = run(context.Background(), []string{"config", "reload", "--json", "--console", console}, noEnv, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "loud") {
		t.Fatalf("reload of an invalid file: %v", err)
	}
	var res ReloadResult
	if jerr := json.Unmarshal(out.Bytes(), &res); jerr != nil || res.Trigger != "api" || res.Time.IsZero() || !strings.Contains(res.Error, "loud") {
		t.Fatalf("--json printed %v (%v):\n%s", res, jerr, out.String())
	}
}

// junction config reload on a broker started without --config says
// there is no file to read, in its text and in its --json report; it
// printed "applied: (none)" as if a file had been read.
func TestConfigReloadWithoutFile(t *testing.T) {
	dir := t.TempDir()
	cfg, err := loadConfig([]string{"--data-dir", filepath.Join(dir, "data"), "--config-watch-interval", "0s",
		"--stomp", "127.0.0.1:0", "--mqtt", "", "--amqp", "", "--ws", "", "--all", "", "--console", "127.0.0.1:0"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := startSecure(t, cfg)
	console := in.addrs["console"].String()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"config", "reload", "--console", console}, noEnv, &out, &out); err != nil {
		t.Fatalf("config reload: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "no configuration file") || !strings.Contains(out.String(), "--config") ||
		strings.Contains(out.String(), "applied: (none)") {
		t.Fatalf("config reload without a file printed:\n%s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"config", "reload", "--json", "--console", console}, noEnv, &out, &out); err != nil {
		t.Fatalf("config reload --json: %v\n%s", err, out.String())
	}
	var res ReloadResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.File != "" || !strings.Contains(res.Note, "no configuration file") ||
		res.Trigger != "api" || res.Error != "" {
		t.Fatalf("--json printed %+v (%v):\n%s", res, err, out.String())
	}
}

// With a file, the report names it and has no note.
func TestConfigReloadNamesFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "junction.yaml")
	y := fmt.Sprintf("data-dir: %s\nconfig-watch-interval: 0s\nstomp: {listen: \"127.0.0.1:0\"}\nmqtt: {listen: \"\"}\n"+
		"amqp: {listen: \"\"}\nwebsocket: {listen: \"\"}\nall: {listen: \"\"}\nconsole: {listen: \"127.0.0.1:0\"}\n", filepath.Join(dir, "data"))
	if err := os.WriteFile(file, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"--config", file}, noEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := startSecure(t, cfg)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"config", "reload", "--json", "--console", in.addrs["console"].String()}, noEnv, &out, &out); err != nil {
		t.Fatalf("config reload --json: %v\n%s", err, out.String())
	}
	var res ReloadResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.File != file || res.Note != "" {
		t.Fatalf("--json printed %+v (%v):\n%s", res, err, out.String())
	}
}

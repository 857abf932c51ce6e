package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

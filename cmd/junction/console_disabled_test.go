package main

import (
	"net/http"
	"strings"
	"testing"
)

// An empty --console disables the console (README: "empty disables"): its
// pages, REST API and metrics are not served on the WebSocket port and
// the one port either, where they were the fallback of plain HTTP
// requests, open without users; their health checks still answer.
func TestConsoleDisabledNotOnWebSocketPorts(t *testing.T) {
	cfg := testConfig(t)
	cfg.Console.Listen = ""
	startServe(t, cfg)
	for _, name := range []string{"websocket", "all"} {
		base := "http://" + lastInstance.addrs[name].String()
		for _, c := range []struct {
			method, path string
			want         int
		}{
			{"GET", "/", http.StatusNotFound},
			{"GET", "/api/v1/queues", http.StatusNotFound},
			{"POST", "/api/v1/queues", http.StatusNotFound},
			{"GET", "/metrics", http.StatusNotFound},
			{"GET", "/healthz", http.StatusOK},
			{"GET", "/readyz", http.StatusOK},
		} {
			req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(`{"name":"made"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != c.want {
				t.Errorf("%s: %s %s answered %d, want %d", name, c.method, c.path, res.StatusCode, c.want)
			}
		}
	}
	if _, err := lastInstance.broker.QueueStat("made"); err == nil {
		t.Error("a queue was created through the disabled console")
	}
}

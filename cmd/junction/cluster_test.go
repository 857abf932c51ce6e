package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestClusterHelp: `junction cluster -h`, which the top-level usage
// names, prints the cluster commands and succeeds (it was "bad command
// line", exit 2).
func TestClusterHelp(t *testing.T) {
	for _, h := range []string{"-h", "--help", "help"} {
		var out, errs bytes.Buffer
		if err := run(context.Background(), []string{"cluster", h}, func(string) string { return "" }, &out, &errs); err != nil {
			t.Fatalf("junction cluster %s: %v", h, err)
		}
		if !strings.Contains(out.String(), "junction cluster add ID HOST:PORT") {
			t.Fatalf("junction cluster %s printed %q", h, out.String())
		}
	}
}

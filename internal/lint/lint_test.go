// Package lint holds the project's rules as tests, run by `make lint`:
// the import graph of docs/architecture.md (of the packages and of their
// tests), formatting and vet.
package lint

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/junctionmq/junction"

// allowed lists, for each package tree of ours, the trees of ours it may
// import (its own subpackages always). This is the table of
// docs/architecture.md; change both together.
var allowed = map[string][]string{
	"persistence":               {},
	"cluster":                   {"core", "persistence", "cluster/transport", "cluster/raftlog"},
	"ha":                        {},
	"cluster/transport":         {},
	"cluster/raftlog":           {"persistence"},
	"core":                      {},
	"transports":                {},
	"websocket":                 {},
	"websocket/wstest":          {},
	"stomp":                     {"core", "internal/inbound", "internal/outbound"},
	"stomp/stomptest":           {"stomp", "core", "internal/inbound", "internal/outbound", "internal/stompclient"},
	"mqtt":                      {"core", "internal/inbound", "internal/outbound"},
	"mqtt/mqtttest":             {"mqtt", "core", "internal/inbound", "internal/outbound"},
	"amqp":                      {"core", "internal/inbound", "internal/outbound"},
	"amqp/amqptest":             {"amqp", "core", "internal/inbound", "internal/outbound"},
	"management":                {"core"},
	"management/managementtest": {"core"},
	"security":                  {"core"},
	"internal/authztest":        {"core"},
	"internal/bench":            {"internal/stompclient"},
	"internal/clustertest":      {"internal/ledger", "internal/stompclient", "internal/faultproxy", "internal/netns", "internal/freeport"},
	"internal/faultproxy":       {},
	"internal/freeport":         {},
	"internal/hostlist":         {},
	"internal/inbound":          {},
	"internal/ledger":           {"internal/stompclient"},
	"internal/lint":             {},
	"internal/netns":            {},
	"internal/outbound":         {},
	"internal/stompclient":      {},
	"internal/testserve":        {},
	"internal/minica":           {},
}

// subtrees are trees one level down, with rows of their own: the
// cluster's transport imports nothing of ours and its Raft log only
// persistence, whatever the rest of cluster may; a protocol's test
// harness (stomp/stomptest) imports the protocol, and is a test helper,
// which the protocol's production code may not import.
var subtrees = []string{"cluster/transport", "cluster/raftlog", "stomp/stomptest", "amqp/amqptest", "mqtt/mqtttest", "management/managementtest", "websocket/wstest"}

// tree returns the top-level tree of one of our import paths
// ("stomp/internal/wire" → "stomp"; a subtree for paths under one), or
// "" for another module's package.
func tree(path string) string {
	rel, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	for _, s := range subtrees {
		if rel == s || strings.HasPrefix(rel, s+"/") {
			return s
		}
	}
	if strings.HasPrefix(rel, "cmd/") {
		parts := strings.SplitN(rel, "/", 3)
		return parts[0] + "/" + parts[1]
	}
	if strings.HasPrefix(rel, "internal/") {
		parts := strings.SplitN(rel, "/", 3)
		return parts[0] + "/" + parts[1]
	}
	return strings.SplitN(rel, "/", 2)[0]
}

// testHelpers are trees only tests import: production code of no tree
// may, tests of any tree may, and so may another helper (the cluster's
// fault harness drives the fault proxy and the namespaces). What a
// helper imports counts as imported by the test (a test importing
// internal/authztest depends on core). A protocol's harness
// (stomp/stomptest) is one: package stomp's tests and internal/e2e
// share it.
var testHelpers = map[string]bool{
	"internal/authztest":        true,
	"internal/clustertest":      true,
	"internal/faultproxy":       true,
	"internal/freeport":         true,
	"internal/netns":            true,
	"internal/testserve":        true,
	"stomp/stomptest":           true,
	"amqp/amqptest":             true,
	"mqtt/mqtttest":             true,
	"management/managementtest": true,
	"websocket/wstest":          true,
}

// testShared are trees production code imports by the table, and that
// tests of any tree may import too: certificates for TLS tests, and the
// go-stomp options tests share with the commands.
var testShared = map[string]bool{
	"internal/minica":      true,
	"internal/stompclient": true,
}

// wiring are the trees that may import everything: the command, and the
// tests that need several front-ends, or a front-end and persistence.
var wiring = map[string]bool{"cmd/junction": true, "internal/e2e": true}

// listDeps returns, for each package of ours (and, with tests, each of
// its test variants), the packages it depends on.
func listDeps(t *testing.T, tests bool) map[string][]string {
	t.Helper()
	args := []string{"-f", "{{.ImportPath}} {{join .Deps \" \"}}"}
	if tests {
		args = append([]string{"-test"}, args...)
	}
	deps := map[string][]string{}
	out, err := exec.Command("go", append(append([]string{"list"}, args...), module+"/...")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		// Test variants are listed as "path [pkg.test]": the first
		// field is the path, the second the variant; deps likewise.
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkg := f[0]
		for _, d := range f[1:] {
			if !strings.HasPrefix(d, "[") {
				deps[pkg] = append(deps[pkg], d)
			}
		}
	}
	return deps
}

// ofPackage returns the package a test package or test main belongs to
// ("stomp_test" and "stomp.test" are stomp's).
func ofPackage(path string) string {
	return strings.TrimSuffix(strings.TrimSuffix(path, ".test"), "_test")
}

func TestImportGraph(t *testing.T) {
	for _, tests := range []bool{false, true} {
		for pkg, deps := range listDeps(t, tests) {
			from := tree(ofPackage(pkg))
			if from == "" || wiring[from] {
				continue
			}
			ok, known := allowed[from]
			if !known {
				t.Errorf("package %s is in tree %q, which has no row in the import table", pkg, from)
				continue
			}
			what := pkg
			if tests {
				what = pkg + " (with its tests)"
			}
			for _, dep := range deps {
				to := tree(ofPackage(dep))
				if to == "" || to == from {
					continue
				}
				if testHelpers[to] {
					if tests || testHelpers[from] {
						continue
					}
					t.Errorf("%s imports %s: only tests may import %s", what, dep, to)
					continue
				}
				if tests && testShared[to] {
					continue
				}
				if !slices.Contains(ok, to) {
					t.Errorf("%s imports %s: %s may not depend on %s", what, dep, from, to)
				}
			}
		}
	}
}

func TestGofmt(t *testing.T) {
	out, err := exec.Command("gofmt", "-l", "../..").CombinedOutput()
	if err != nil {
		t.Fatalf("gofmt: %v\n%s", err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("gofmt would change:\n%s", s)
	}
}

func TestVet(t *testing.T) {
	cmd := exec.Command("go", "vet", module+"/...")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go vet: %v\n%s", err, out)
	}
}

func TestModTidy(t *testing.T) {
	cmd := exec.Command("go", "mod", "tidy", "-diff")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go.mod is not tidy (run go mod tidy):\n%s", out)
	}
}

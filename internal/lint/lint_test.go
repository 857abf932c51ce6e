// Package lint holds the project's rules as tests, run by `make lint`:
// the import graph of docs/architecture.md, formatting and vet.
package lint

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/junctionmq/junction"

// allowed lists, for each package tree of ours, the trees of ours it may
// import (its own subpackages always). This is the table of
// docs/architecture.md; change both together.
var allowed = map[string][]string{
	"persistence":         {},
	"cluster":             {"core", "persistence", "cluster/transport", "cluster/raftlog"},
	"ha":                  {},
	"cluster/transport":   {},
	"cluster/raftlog":     {"persistence"},
	"core":                {},
	"transports":          {},
	"websocket":           {},
	"stomp":               {"core", "internal/inbound", "internal/outbound"},
	"mqtt":                {"core", "internal/inbound", "internal/outbound"},
	"amqp":                {"core", "internal/inbound", "internal/outbound"},
	"management":          {"core"},
	"security":            {"core"},
	"cmd/junction-bench":  {"internal/bench"},
	"internal/authztest":  {"core"},
	"internal/bench":      {},
	"internal/faultproxy": {},
	"internal/hostlist":   {},
	"internal/lint":       {},
	"internal/netns":      {},
	"internal/inbound":    {},
	"internal/outbound":   {},
	"internal/stomptest":  {},
	"internal/testserve":  {},
	"internal/tlstest":    {},
}

// subtrees are trees one level down, with rows of their own: the
// cluster's transport imports nothing of ours and its Raft log only
// persistence, whatever the rest of cluster may.
var subtrees = []string{"cluster/transport", "cluster/raftlog"}

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

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, out)
	}
	return strings.Fields(string(out))
}

func TestImportGraph(t *testing.T) {
	pkgs := goList(t, module+"/...")
	for _, pkg := range pkgs {
		from := tree(pkg)
		if from == "cmd/junction" {
			continue // cmd wires everything
		}
		ok, known := allowed[from]
		if !known {
			t.Errorf("package %s is in tree %q, which has no row in the import table", pkg, from)
			continue
		}
		deps := goList(t, "-deps", "-f", "{{.ImportPath}}", pkg)
		for _, dep := range deps {
			to := tree(dep)
			if to == "" || to == from {
				continue
			}
			permitted := false
			for _, a := range ok {
				permitted = permitted || a == to
			}
			if !permitted {
				t.Errorf("%s imports %s: %s may not depend on %s", pkg, dep, from, to)
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

package selector

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// envs are the messages every fuzzed selector is evaluated against: the
// evaluator must not panic whatever the values.
var envs = []func(string) (any, bool){
	get,
	func(string) (any, bool) { return nil, false },
	func(string) (any, bool) { return nil, true },
	func(string) (any, bool) { return int64(math.MinInt64), true },
	func(string) (any, bool) { return int64(0), true },
	func(string) (any, bool) { return math.Inf(-1), true },
	func(string) (any, bool) { return "x%_\xff", true },
	func(string) (any, bool) { return true, true },
	func(string) (any, bool) { return []byte{1}, true },
}

// FuzzParse checks that Parse never panics, that every error is a
// *SyntaxError, and that an accepted selector evaluates without
// panicking and survives a round trip through its canonical form (same
// tree, same results). Seeds are in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, expr string) {
		sel, err := Parse(expr)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || se.Pos < 0 || se.Pos > len(expr) {
				t.Fatalf("Parse(%q): %v (%T)", expr, err, err)
			}
			return
		}
		if sel.String() != expr {
			t.Fatalf("String() = %q, want %q", sel.String(), expr)
		}
		results := make([]bool, len(envs))
		for i, env := range envs {
			results[i] = sel.Matches(env)
		}
		canon := format(sel.root)
		again, err := Parse(canon)
		if err != nil {
			var se *SyntaxError
			// Parenthesizing may push a deep or long tree over the limits.
			if errors.As(err, &se) && (strings.Contains(se.Msg, "nested deeper") || strings.Contains(se.Msg, "longer than")) {
				return
			}
			t.Fatalf("canonical form %q of %q does not parse: %v", canon, expr, err)
		}
		if c2 := format(again.root); c2 != canon {
			t.Fatalf("round trip of %q changed the tree:\n%s\n%s", expr, canon, c2)
		}
		for i, env := range envs {
			if r := again.Matches(env); r != results[i] {
				// NaN-free environments must agree exactly.
				t.Fatalf("%q and its canonical form %q disagree in environment %d: %v, %v", expr, canon, i, results[i], r)
			}
		}
	})
}

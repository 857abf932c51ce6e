package selector

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// props is the message every evaluation case runs against.
var props = map[string]any{
	"s":       "hello",
	"quote":   "it's",
	"empty":   "",
	"i":       int64(5),
	"neg":     int64(-3),
	"zero":    int64(0),
	"big":     int64(math.MaxInt64),
	"f":       2.5,
	"nan":     math.NaN(),
	"t":       true,
	"fl":      false,
	"nil":     nil,
	"bytes":   []byte("hello"),
	"color":   "red",
	"path":    "a%b_c",
	"uni":     "héllo wörld",
	"JMSX_y":  "ok",
	"$dollar": int64(1),
}

func get(name string) (any, bool) {
	v, ok := props[name]
	return v, ok
}

func TestMatches(t *testing.T) {
	cases := []struct {
		expr string
		want bool
	}{
		// Literals and identifiers.
		{"TRUE", true},
		{"false", false},
		{"t", true},
		{"fl", false},
		{"s", false},       // a string is not a boolean: UNKNOWN
		{"missing", false}, // NULL
		{"s = 'hello'", true},
		{"s='hello'", true},
		{"quote = 'it''s'", true},
		{"empty = ''", true},
		{"s = 'Hello'", false}, // strings are case-sensitive
		{"S = 'hello'", false}, // so are identifiers (S is absent)
		{"JMSX_y = 'ok' AND $dollar = 1", true},
		{"uni = 'héllo wörld'", true},
		// Numbers.
		{"i = 5", true},
		{"i = 5.0", true}, // int promoted to float
		{"i > 4.9", true},
		{"f = 2.5", true},
		{"f = 25e-1", true},
		{"f = .25E1", true},
		{"f < 3.", true},
		{"i = +5", true},
		{"neg = -3", true},
		{"-neg = 3", true},
		{"- -3 = 3", true},
		{"-(neg) = 3", true},
		{"+i = 5", true},
		{"big = 9223372036854775807", true},
		{"-9223372036854775808 < big", true},
		{"i <> 6", true},
		{"i < 6 AND i <= 5 AND i > 4 AND i >= 5", true},
		{"i < 5", false},
		{"nan = nan", false},
		{"nan <> nan", true},
		{"nan < 1", false},
		// Arithmetic and precedence.
		{"i + 1 = 6", true},
		{"i - 1 * 2 = 3", true},
		{"(i - 1) * 2 = 8", true},
		{"i / 2 = 2", true},     // integer division
		{"i / 2.0 = 2.5", true}, // float division
		{"f * 2 = 5", true},
		{"i / zero = 0", false}, // UNKNOWN
		{"NOT (i / zero = 0)", false},
		{"f / 0 > 1000", true}, // +Inf
		{"big + 1 < 0", true},  // wraps like Java's long
		{"2 * 3 + 4 = 10 AND 2 + 3 * 4 = 14 AND 10 - 4 - 3 = 3 AND 12 / 3 / 2 = 2", true},
		{"i + s = 5", false},       // arithmetic on a string: NULL
		{"-s = 0", false},          // sign on a string: NULL
		{"i + missing = 5", false}, // NULL
		// Kinds that do not compare.
		{"s = 5", false},
		{"NOT (s = 5)", false},
		{"s <> 5", false},
		{"i = '5'", false},
		{"t = 1", false},
		{"t = TRUE", true},
		{"t <> fl", true},
		{"bytes = 'hello'", false},
		{"bytes IS NULL", false},
		{"bytes IS NOT NULL", true},
		// Three-valued logic.
		{"missing = 1 OR TRUE", true},
		{"missing = 1 OR FALSE", false},
		{"NOT (missing = 1 OR FALSE)", false},
		{"missing = 1 AND FALSE", false},
		{"NOT (missing = 1 AND FALSE)", true},
		{"missing = 1 AND TRUE", false},
		{"NOT (missing = 1 AND TRUE)", false},
		{"NOT missing", false},
		{"NOT NOT t", true},
		{"not t or i = 5 and s = 'hello'", true}, // AND before OR
		{"NOT t OR i = 6", false},
		{"(t OR fl) AND NOT fl", true},
		{"t AND s", false}, // a string operand is UNKNOWN
		{"fl OR s", false},
		{"NOT (fl AND s)", true}, // FALSE AND UNKNOWN is FALSE
		// BETWEEN.
		{"i BETWEEN 1 AND 10", true},
		{"i BETWEEN 5 AND 5", true},
		{"i BETWEEN 6 AND 10", false},
		{"i NOT BETWEEN 6 AND 10", true},
		{"f BETWEEN 2 AND 3", true},
		{"i BETWEEN 1 + 1 AND 2 * 3", true},
		{"missing BETWEEN 1 AND 2", false},
		{"missing NOT BETWEEN 1 AND 2", false},
		{"i BETWEEN missing AND 2", false},      // UNKNOWN AND FALSE... is FALSE
		{"NOT (i BETWEEN missing AND 2)", true}, // so NOT is TRUE
		{"i BETWEEN missing AND 10", false},     // UNKNOWN AND TRUE: UNKNOWN
		{"NOT (i BETWEEN missing AND 10)", false},
		{"s BETWEEN 1 AND 2", false},
		// LIKE.
		{"s LIKE 'hello'", true},
		{"s LIKE 'hell'", false},
		{"s LIKE 'h%'", true},
		{"s LIKE '%o'", true},
		{"s LIKE '%ll%'", true},
		{"s LIKE 'h_llo'", true},
		{"s LIKE 'h_lo'", false},
		{"s LIKE '_____'", true},
		{"s LIKE '______'", false},
		{"s LIKE '%'", true},
		{"empty LIKE '%'", true},
		{"empty LIKE '_'", false},
		{"s LIKE 'h%l%o'", true},
		{"s LIKE 'h%l%l%l%o'", false},
		{"s LIKE '%l_o'", true},
		{"s LIKE '%%'", true},
		{"s LIKE 'he%%lo'", true},
		{"s LIKE 'hello%'", true},
		{"s LIKE '%hello'", true},
		{"s LIKE 'h%lo%'", true},
		{"s LIKE '_%_'", true},
		{"s LIKE '%_l_%'", true},
		{"s NOT LIKE 'x%'", true},
		{"uni LIKE 'h_llo w_rld'", true}, // _ is one character, not one byte
		{"uni LIKE '%_rld'", true},
		{"uni LIKE 'h%ö%'", true},
		{"path LIKE 'a\\%b\\_c' ESCAPE '\\'", true},
		{"path LIKE 'a!%b!_c' ESCAPE '!'", true},
		{"s LIKE 'h!%' ESCAPE '!'", false},
		{"path LIKE '%!%%' ESCAPE '!'", true},
		{"path LIKE '%!_%' escape '!'", true},
		{"s LIKE 'hel!lo' ESCAPE '!'", true}, // an escaped ordinary character is itself
		{"missing LIKE '%'", false},
		{"missing NOT LIKE '%'", false},
		{"i LIKE '5'", false}, // not a string: UNKNOWN
		{"quote LIKE 'it''_'", true},
		// IN.
		{"color IN ('red', 'green')", true},
		{"color IN ('green','blue')", false},
		{"color NOT IN ('green', 'blue')", true},
		{"color in ('red')", true},
		{"missing IN ('red')", false},
		{"missing NOT IN ('red')", false},
		{"i IN ('5')", false},
		// IS NULL.
		{"missing IS NULL", true},
		{"nil IS NULL", true},
		{"s IS NULL", false},
		{"s IS NOT NULL", true},
		{"missing IS NOT NULL", false},
		{"i + missing IS NULL", true},
		{"(i = missing) IS NULL", true},
		// Keywords in any case, whitespace anywhere.
		{"\tnot\n(i\r=\f6)\n", true},
		{"i Between 1 aNd 9 AnD color Like 'r%' oR FALSE", true},
	}
	for _, tc := range cases {
		sel, err := Parse(tc.expr)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.expr, err)
			continue
		}
		if got := sel.Matches(get); got != tc.want {
			t.Errorf("%q = %v, want %v", tc.expr, got, tc.want)
		}
		if sel.String() != tc.expr {
			t.Errorf("String() = %q, want %q", sel.String(), tc.expr)
		}
		// The canonical form means the same.
		again, err := Parse(format(sel.root))
		if err != nil {
			t.Errorf("canonical form %q of %q: %v", format(sel.root), tc.expr, err)
			continue
		}
		if got := again.Matches(get); got != tc.want {
			t.Errorf("canonical %q = %v, want %v", format(sel.root), got, tc.want)
		}
	}
}

func TestNilSelectorMatchesAll(t *testing.T) {
	var s *Selector
	if !s.Matches(get) || s.String() != "" {
		t.Fatal("a nil selector must match everything")
	}
}

func TestStructure(t *testing.T) {
	cases := []struct{ expr, want string }{
		{"a OR b AND c", "(a OR (b AND c))"},
		{"a AND b AND c OR d", "((a AND b AND c) OR d)"},
		{"NOT a = 1", "(NOT (a = 1))"},
		{"a + b * c = d", "((a + (b * c)) = d)"},
		{"a - b - c = 0", "(((a - b) - c) = 0)"},
		{"-a = -5", "((-(a)) = -5)"},
		{"-(5) = x", "((-(5)) = x)"},
		{"a NOT BETWEEN 1 AND 2 + 3", "(a NOT BETWEEN 1 AND (2 + 3))"},
		{"a LIKE 'x' ESCAPE '!'", "(a LIKE 'x' ESCAPE '!')"},
		{"a NOT IN ('x', 'y''z')", "(a NOT IN ('x', 'y''z'))"},
		{"a IS NOT NULL", "(a IS NOT NULL)"},
		{"x = 1.5", "(x = 1.5e+00)"},
		{"TRUE AND false", "(TRUE AND FALSE)"},
	}
	for _, tc := range cases {
		sel, err := Parse(tc.expr)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.expr, err)
			continue
		}
		if got := format(sel.root); got != tc.want {
			t.Errorf("%q parsed as %s, want %s", tc.expr, got, tc.want)
		}
	}
}

func TestSyntaxErrors(t *testing.T) {
	cases := []struct {
		expr string
		pos  int
		msg  string // part of the message
	}{
		{"", 0, "empty"},
		{"   ", 0, "empty"},
		{"a =", 3, "end of expression"},
		{"a = 1 b", 6, `unexpected "b"`},
		{"(a = 1", 6, "end of expression"},
		{"a = 1)", 5, `unexpected ")"`},
		{"a = 'x", 4, "unterminated string"},
		{"a # 1", 2, "unexpected character '#'"},
		{"a = 1e", 4, "malformed exponent"},
		{"a = 12abc", 4, "malformed number"},
		{"a = 1.2.3", 4, "malformed number"},
		{"a = 0x1F", 4, "malformed number"},
		{"a = 9223372036854775808", 4, "integer out of range"},
		{"a = 1e999", 4, "number out of range"},
		{"a = NULL", 4, "IS [NOT] NULL"},
		{"AND = 1", 0, `unexpected "AND"`},
		{"a = 1 AND", 9, "end of expression"},
		{"5", 0, "not a boolean"},
		{"'x'", 0, "not a boolean"},
		{"a + 1", 0, "not a boolean"},
		{"1 AND a", 2, "AND needs boolean"},
		{"NOT 'x'", 0, "NOT needs boolean"},
		{"a OR 5", 2, "OR needs boolean"},
		{"'a' < b", 4, "compare only with = and <>"},
		{"TRUE >= b", 5, "compare only with = and <>"},
		{"a + 'x' = 1", 2, "arithmetic needs numeric"},
		{"-'x' = 1", 0, "a sign needs numeric"},
		{"(a = 1) * 2 = 3", 8, "arithmetic needs numeric"},
		{"'a' BETWEEN 1 AND 2", 4, "BETWEEN needs numeric"},
		{"a BETWEEN 1 OR 2", 12, `unexpected "OR"`},
		{"5 LIKE 'x'", 2, "LIKE needs a string"},
		{"a LIKE b", 7, "string literal pattern"},
		{"a LIKE 'x' ESCAPE 'ab'", 18, "exactly one character"},
		{"a LIKE 'x' ESCAPE ''", 18, "exactly one character"},
		{"a LIKE 'x!' ESCAPE '!'", 7, "ends with its escape"},
		{"a IN ()", 6, "list of string literals"},
		{"a IN (1, 2)", 6, "list of string literals"},
		{"a IN ('x' 'y')", 10, `unexpected "y"`},
		{"5 IN ('x')", 2, "IN needs a string"},
		{"a IS 5", 5, `unexpected "5"`},
		{"a NOT 5", 6, `unexpected "5"`},
		{"a = 1 = 2", 6, `unexpected "="`},
		{strings.Repeat("(", 200) + "a" + strings.Repeat(")", 200), 100, "nested deeper"},
		{strings.Repeat("NOT ", 200) + "a", 400, "nested deeper"},
		{"a = " + strings.Repeat("- ", 200) + "(1)", 204, "nested deeper"},
		{"a = 1" + strings.Repeat(" + 1", 200), 402, "nested deeper"},
		{"a = '" + strings.Repeat("x", MaxLength) + "'", MaxLength, "longer than"},
	}
	for _, tc := range cases {
		_, err := Parse(tc.expr)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%.40q): %v, want a *SyntaxError", tc.expr, err)
			continue
		}
		if se.Pos != tc.pos || !strings.Contains(se.Msg, tc.msg) {
			t.Errorf("Parse(%.40q): %v, want %q at offset %d", tc.expr, err, tc.msg, tc.pos)
		}
	}
}

// Long chains of alternatives are flat, so they are not "nested".
func TestLongOrChainIsAccepted(t *testing.T) {
	var b strings.Builder
	for i := range 500 {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("a = " + strconv.Itoa(i))
	}
	sel, err := Parse(b.String())
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(func(string) (any, bool) { return int64(499), true }) {
		t.Fatal("the last alternative did not match")
	}
}

func TestLikeIsNotExponential(t *testing.T) {
	sel, err := Parse("s LIKE '" + strings.Repeat("%a", 50) + "%b'")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 100000)
	if sel.Matches(func(string) (any, bool) { return long, true }) {
		t.Fatal("matched without a b")
	}
}

func BenchmarkMatches(b *testing.B) {
	sel, err := Parse("color IN ('red', 'green') AND i BETWEEN 1 AND 10 AND s LIKE 'he%' AND missing IS NULL")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if !sel.Matches(get) {
			b.Fatal("no match")
		}
	}
}

// format renders a tree fully parenthesized, in a form Parse reads back
// into the same tree: the tests' view of the structure, and the fuzz
// test's round trip.
func format(n *node) string {
	var b strings.Builder
	n.format(&b)
	return b.String()
}

var opText = map[op]string{
	opAdd: "+", opSub: "-", opMul: "*", opDiv: "/",
	opEq: "=", opNe: "<>", opLt: "<", opLe: "<=", opGt: ">", opGe: ">=",
	opAnd: "AND", opOr: "OR",
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func (n *node) format(b *strings.Builder) {
	switch n.op {
	case opLit:
		switch n.val.k {
		case kBool:
			b.WriteString(strings.ToUpper(strconv.FormatBool(n.val.b)))
		case kInt:
			b.WriteString(strconv.FormatInt(n.val.i, 10))
		case kFloat:
			b.WriteString(strconv.FormatFloat(n.val.f, 'e', -1, 64))
		case kString:
			b.WriteString(quote(n.val.s))
		}
		return
	case opIdent:
		b.WriteString(n.name)
		return
	}
	b.WriteByte('(')
	switch n.op {
	case opNeg, opPos:
		// The operand is parenthesized so that a sign before a number
		// does not fold into the literal when read back.
		if n.op == opNeg {
			b.WriteString("-(")
		} else {
			b.WriteString("+(")
		}
		n.args[0].format(b)
		b.WriteByte(')')
	case opNot:
		b.WriteString("NOT ")
		n.args[0].format(b)
	case opBetween, opNotBetween:
		n.args[0].format(b)
		if n.op == opNotBetween {
			b.WriteString(" NOT")
		}
		b.WriteString(" BETWEEN ")
		n.args[1].format(b)
		b.WriteString(" AND ")
		n.args[2].format(b)
	case opLike, opNotLike:
		n.args[0].format(b)
		if n.op == opNotLike {
			b.WriteString(" NOT")
		}
		b.WriteString(" LIKE " + quote(n.like.src))
		if n.like.esc != "" {
			b.WriteString(" ESCAPE " + quote(n.like.esc))
		}
	case opIn, opNotIn:
		n.args[0].format(b)
		if n.op == opNotIn {
			b.WriteString(" NOT")
		}
		b.WriteString(" IN (")
		for i, s := range n.set {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(quote(s))
		}
		b.WriteByte(')')
	case opIsNull, opIsNotNull:
		n.args[0].format(b)
		if n.op == opIsNull {
			b.WriteString(" IS NULL")
		} else {
			b.WriteString(" IS NOT NULL")
		}
	default:
		for i, a := range n.args {
			if i > 0 {
				b.WriteString(" " + opText[n.op] + " ")
			}
			a.format(b)
		}
	}
	b.WriteByte(')')
}

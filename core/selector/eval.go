package selector

import (
	"math"
	"slices"
)

// kind is the runtime type of a value.
type kind uint8

const (
	kNull   kind = iota // absent, nil, or UNKNOWN in a boolean position
	kBool               //
	kInt                // int64
	kFloat              // float64
	kString             //
	kOther              // any other type (such as []byte): not NULL, comparable with nothing
)

// value is a value during evaluation. A struct rather than an interface,
// so that evaluating allocates nothing.
type value struct {
	k kind
	b bool
	i int64
	f float64
	s string
}

var unknown = value{}

func boolean(b bool) value { return value{k: kBool, b: b} }

// valueOf converts a value returned by the caller's get function.
func valueOf(v any) value {
	switch x := v.(type) {
	case nil:
		return unknown
	case string:
		return value{k: kString, s: x}
	case int64:
		return value{k: kInt, i: x}
	case float64:
		return value{k: kFloat, f: x}
	case bool:
		return boolean(x)
	}
	return value{k: kOther}
}

func (v value) numeric() bool { return v.k == kInt || v.k == kFloat }

func (v value) float() float64 {
	if v.k == kInt {
		return float64(v.i)
	}
	return v.f
}

// not is three-valued NOT: UNKNOWN (or a non-boolean) stays UNKNOWN.
func not(v value) value {
	if v.k != kBool {
		return unknown
	}
	return boolean(!v.b)
}

func (n *node) eval(get func(string) (any, bool)) value {
	switch n.op {
	case opLit:
		return n.val
	case opIdent:
		v, ok := get(n.name)
		if !ok {
			return unknown
		}
		return valueOf(v)
	case opAnd, opOr:
		// SQL: FALSE AND x is FALSE, TRUE OR x is TRUE, whatever x is;
		// otherwise an UNKNOWN operand makes the result UNKNOWN.
		decisive := n.op == opOr
		sawUnknown := false
		for _, a := range n.args {
			v := a.eval(get)
			if v.k != kBool {
				sawUnknown = true
				continue
			}
			if v.b == decisive {
				return boolean(decisive)
			}
		}
		if sawUnknown {
			return unknown
		}
		return boolean(!decisive)
	case opNot:
		return not(n.args[0].eval(get))
	case opNeg, opPos:
		x := n.args[0].eval(get)
		switch {
		case !x.numeric():
			return unknown
		case n.op == opPos:
			return x
		case x.k == kInt:
			return value{k: kInt, i: -x.i}
		}
		return value{k: kFloat, f: -x.f}
	case opAdd, opSub, opMul, opDiv:
		return arith(n.op, n.args[0].eval(get), n.args[1].eval(get))
	case opEq, opNe, opLt, opLe, opGt, opGe:
		return compare(n.op, n.args[0].eval(get), n.args[1].eval(get))
	case opBetween, opNotBetween:
		x := n.args[0].eval(get)
		lo, hi := n.args[1].eval(get), n.args[2].eval(get)
		// x BETWEEN lo AND hi is x >= lo AND x <= hi, in three values.
		a, b := compare(opGe, x, lo), compare(opLe, x, hi)
		var v value
		switch {
		case a.k == kBool && !a.b, b.k == kBool && !b.b:
			v = boolean(false)
		case a.k == kBool && b.k == kBool:
			v = boolean(true)
		}
		if n.op == opNotBetween {
			return not(v)
		}
		return v
	case opLike, opNotLike:
		x := n.args[0].eval(get)
		if x.k != kString {
			return unknown
		}
		return boolean(n.like.match(x.s) == (n.op == opLike))
	case opIn, opNotIn:
		x := n.args[0].eval(get)
		if x.k != kString {
			return unknown
		}
		return boolean(slices.Contains(n.set, x.s) == (n.op == opIn))
	case opIsNull, opIsNotNull:
		x := n.args[0].eval(get)
		return boolean((x.k == kNull) == (n.op == opIsNull))
	}
	return unknown
}

// arith applies + - * / to numbers: int with int stays int (wrapping as
// Java's long does), anything with a float is float, anything else is
// NULL. Integer division by zero, which Java refuses with an exception,
// is NULL.
func arith(o op, x, y value) value {
	if !x.numeric() || !y.numeric() {
		return unknown
	}
	if x.k == kInt && y.k == kInt {
		a, b := x.i, y.i
		switch o {
		case opAdd:
			return value{k: kInt, i: a + b}
		case opSub:
			return value{k: kInt, i: a - b}
		case opMul:
			return value{k: kInt, i: a * b}
		}
		if b == 0 {
			return unknown
		}
		return value{k: kInt, i: a / b} // MinInt64 / -1 wraps; Go does not panic
	}
	a, b := x.float(), y.float()
	switch o {
	case opAdd:
		return value{k: kFloat, f: a + b}
	case opSub:
		return value{k: kFloat, f: a - b}
	case opMul:
		return value{k: kFloat, f: a * b}
	}
	return value{k: kFloat, f: a / b}
}

// compare applies a comparison. Numbers compare with numbers (promoted
// to float when either is one), strings and booleans with their own kind
// and only for = and <>; anything else is UNKNOWN.
func compare(o op, x, y value) value {
	var c int // -1, 0, 1; NaN compares false both ways
	switch {
	case x.k == kInt && y.k == kInt:
		c = cmpOrdered(x.i, y.i)
	case x.numeric() && y.numeric():
		a, b := x.float(), y.float()
		if math.IsNaN(a) || math.IsNaN(b) {
			return boolean(o == opNe)
		}
		c = cmpOrdered(a, b)
	case x.k == kString && y.k == kString && (o == opEq || o == opNe):
		return boolean((x.s == y.s) == (o == opEq))
	case x.k == kBool && y.k == kBool && (o == opEq || o == opNe):
		return boolean((x.b == y.b) == (o == opEq))
	default:
		return unknown
	}
	switch o {
	case opEq:
		return boolean(c == 0)
	case opNe:
		return boolean(c != 0)
	case opLt:
		return boolean(c < 0)
	case opLe:
		return boolean(c <= 0)
	case opGt:
		return boolean(c > 0)
	}
	return boolean(c >= 0)
}

func cmpOrdered[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

package selector

import (
	"fmt"
	"strconv"
)

// op is what a node computes.
type op uint8

const (
	opLit op = iota
	opIdent
	opNeg
	opPos
	opAdd
	opSub
	opMul
	opDiv
	opEq
	opNe
	opLt
	opLe
	opGt
	opGe
	opAnd
	opOr
	opNot
	opBetween
	opNotBetween
	opLike
	opNotLike
	opIn
	opNotIn
	opIsNull
	opIsNotNull
)

// typ is what the parser knows of a node's value: enough to refuse the
// mistakes the literals make certain, not a full type system (an
// identifier may hold anything).
type typ uint8

const (
	tAny typ = iota
	tBool
	tNum
	tStr
)

// node is one operator or operand of the expression tree. One concrete
// type, not an interface, keeps evaluation free of dynamic calls, so the
// caller's get function does not escape to the heap.
type node struct {
	op    op
	typ   typ
	depth int     // 1 for a leaf
	val   value   // opLit
	name  string  // opIdent
	args  []*node // operands: two for binary operators, any number for AND and OR
	like  *likePattern
	set   []string // opIn, opNotIn
}

type parser struct {
	toks []token
	i    int
	nest int // open parentheses, NOTs and signs being parsed
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tokEOF {
		p.i++
	}
	return t
}

func (p *parser) unexpected(t token) error {
	if t.kind == tokEOF {
		return &SyntaxError{Pos: t.pos, Msg: "unexpected end of expression"}
	}
	return &SyntaxError{Pos: t.pos, Msg: fmt.Sprintf("unexpected %q", t.text)}
}

// enter guards the parser's recursion; leave undoes it.
func (p *parser) enter(t token) error {
	p.nest++
	if p.nest > MaxDepth {
		return &SyntaxError{Pos: t.pos, Msg: fmt.Sprintf("expression nested deeper than %d", MaxDepth)}
	}
	return nil
}

func (p *parser) leave() { p.nest-- }

// mk builds a node over args, refusing trees deeper than MaxDepth so
// that evaluation recursion stays bounded.
func mk(at token, o op, t typ, args ...*node) (*node, error) {
	d := 0
	for _, a := range args {
		d = max(d, a.depth)
	}
	if d+1 > MaxDepth {
		return nil, &SyntaxError{Pos: at.pos, Msg: fmt.Sprintf("expression nested deeper than %d", MaxDepth)}
	}
	return &node{op: o, typ: t, depth: d + 1, args: args}, nil
}

func needBool(at token, what string, ns ...*node) error {
	for _, n := range ns {
		if n.typ == tNum || n.typ == tStr {
			return &SyntaxError{Pos: at.pos, Msg: what + " needs boolean operands"}
		}
	}
	return nil
}

func needNum(at token, what string, ns ...*node) error {
	for _, n := range ns {
		if n.typ == tBool || n.typ == tStr {
			return &SyntaxError{Pos: at.pos, Msg: what + " needs numeric operands"}
		}
	}
	return nil
}

// parseOr: and { OR and }. A chain becomes one node, so a long list of
// alternatives does not nest.
func (p *parser) parseOr() (*node, error) {
	return p.parseChain("OR", opOr, p.parseAnd)
}

// parseAnd: not { AND not }.
func (p *parser) parseAnd() (*node, error) {
	return p.parseChain("AND", opAnd, p.parseNot)
}

func (p *parser) parseChain(kw string, o op, operand func() (*node, error)) (*node, error) {
	first, err := operand()
	if err != nil {
		return nil, err
	}
	if !p.peek().keyword(kw) {
		return first, nil
	}
	at := p.peek()
	args := []*node{first}
	for p.peek().keyword(kw) {
		p.next()
		n, err := operand()
		if err != nil {
			return nil, err
		}
		args = append(args, n)
	}
	if err := needBool(at, kw, args...); err != nil {
		return nil, err
	}
	return mk(at, o, tBool, args...)
}

// parseNot: NOT not | predicate.
func (p *parser) parseNot() (*node, error) {
	t := p.peek()
	if !t.keyword("NOT") {
		return p.parsePredicate()
	}
	p.next()
	if err := p.enter(t); err != nil {
		return nil, err
	}
	x, err := p.parseNot()
	p.leave()
	if err != nil {
		return nil, err
	}
	if err := needBool(t, "NOT", x); err != nil {
		return nil, err
	}
	return mk(t, opNot, tBool, x)
}

var compareOps = map[tokKind]op{tokEq: opEq, tokNe: opNe, tokLt: opLt, tokLe: opLe, tokGt: opGt, tokGe: opGe}

// parsePredicate: sum [ comparison sum | [NOT] BETWEEN sum AND sum |
// [NOT] LIKE string [ESCAPE string] | [NOT] IN ( string, ... ) |
// IS [NOT] NULL ].
func (p *parser) parsePredicate() (*node, error) {
	x, err := p.parseSum()
	if err != nil {
		return nil, err
	}
	t := p.peek()
	if o, ok := compareOps[t.kind]; ok {
		p.next()
		y, err := p.parseSum()
		if err != nil {
			return nil, err
		}
		if o != opEq && o != opNe {
			for _, n := range []*node{x, y} {
				if n.typ == tStr || n.typ == tBool {
					return nil, &SyntaxError{Pos: t.pos, Msg: "strings and booleans compare only with = and <>"}
				}
			}
		}
		return mk(t, o, tBool, x, y)
	}
	if t.keyword("IS") {
		p.next()
		o := opIsNull
		if p.peek().keyword("NOT") {
			p.next()
			o = opIsNotNull
		}
		if n := p.next(); !n.keyword("NULL") {
			return nil, p.unexpected(n)
		}
		return mk(t, o, tBool, x)
	}
	negate := false
	if t.keyword("NOT") {
		p.next()
		negate = true
		t = p.peek()
		if !t.keyword("BETWEEN") && !t.keyword("LIKE") && !t.keyword("IN") {
			return nil, p.unexpected(t)
		}
	}
	switch {
	case t.keyword("BETWEEN"):
		p.next()
		lo, err := p.parseSum()
		if err != nil {
			return nil, err
		}
		if n := p.next(); !n.keyword("AND") {
			return nil, p.unexpected(n)
		}
		hi, err := p.parseSum()
		if err != nil {
			return nil, err
		}
		if err := needNum(t, "BETWEEN", x, lo, hi); err != nil {
			return nil, err
		}
		o := opBetween
		if negate {
			o = opNotBetween
		}
		return mk(t, o, tBool, x, lo, hi)
	case t.keyword("LIKE"):
		p.next()
		if x.typ == tNum || x.typ == tBool {
			return nil, &SyntaxError{Pos: t.pos, Msg: "LIKE needs a string"}
		}
		pat := p.next()
		if pat.kind != tokString {
			return nil, &SyntaxError{Pos: pat.pos, Msg: "LIKE needs a string literal pattern"}
		}
		var esc *token
		if p.peek().keyword("ESCAPE") {
			p.next()
			e := p.next()
			if e.kind != tokString {
				return nil, &SyntaxError{Pos: e.pos, Msg: "ESCAPE needs a string literal"}
			}
			esc = &e
		}
		lp, err := compileLike(pat, esc)
		if err != nil {
			return nil, err
		}
		o := opLike
		if negate {
			o = opNotLike
		}
		n, err := mk(t, o, tBool, x)
		if err != nil {
			return nil, err
		}
		n.like = lp
		return n, nil
	case t.keyword("IN"):
		p.next()
		if x.typ == tNum || x.typ == tBool {
			return nil, &SyntaxError{Pos: t.pos, Msg: "IN needs a string"}
		}
		if l := p.next(); l.kind != tokLParen {
			return nil, p.unexpected(l)
		}
		var set []string
		for {
			s := p.next()
			if s.kind != tokString {
				return nil, &SyntaxError{Pos: s.pos, Msg: "IN needs a list of string literals"}
			}
			set = append(set, s.text)
			sep := p.next()
			if sep.kind == tokRParen {
				break
			}
			if sep.kind != tokComma {
				return nil, p.unexpected(sep)
			}
		}
		o := opIn
		if negate {
			o = opNotIn
		}
		n, err := mk(t, o, tBool, x)
		if err != nil {
			return nil, err
		}
		n.set = set
		return n, nil
	}
	return x, nil
}

// parseSum: product { (+|-) product }.
func (p *parser) parseSum() (*node, error) {
	x, err := p.parseProduct()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		o := opAdd
		switch t.kind {
		case tokPlus:
		case tokMinus:
			o = opSub
		default:
			return x, nil
		}
		p.next()
		y, err := p.parseProduct()
		if err != nil {
			return nil, err
		}
		if err := needNum(t, "arithmetic", x, y); err != nil {
			return nil, err
		}
		if x, err = mk(t, o, tNum, x, y); err != nil {
			return nil, err
		}
	}
}

// parseProduct: unary { (*|/) unary }.
func (p *parser) parseProduct() (*node, error) {
	x, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		o := opMul
		switch t.kind {
		case tokStar:
		case tokSlash:
			o = opDiv
		default:
			return x, nil
		}
		p.next()
		y, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		if err := needNum(t, "arithmetic", x, y); err != nil {
			return nil, err
		}
		if x, err = mk(t, o, tNum, x, y); err != nil {
			return nil, err
		}
	}
}

// parseUnary: (+|-) unary | primary. A sign directly before a number is
// part of the literal, so that -9223372036854775808 is in range.
func (p *parser) parseUnary() (*node, error) {
	t := p.peek()
	if t.kind != tokPlus && t.kind != tokMinus {
		return p.parsePrimary()
	}
	p.next()
	if n := p.peek(); n.kind == tokInt || n.kind == tokFloat {
		p.next()
		sign := ""
		if t.kind == tokMinus {
			sign = "-"
		}
		return number(n, sign)
	}
	if err := p.enter(t); err != nil {
		return nil, err
	}
	x, err := p.parseUnary()
	p.leave()
	if err != nil {
		return nil, err
	}
	if err := needNum(t, "a sign", x); err != nil {
		return nil, err
	}
	o := opPos
	if t.kind == tokMinus {
		o = opNeg
	}
	return mk(t, o, tNum, x)
}

// number makes the literal of a numeric token, with sign "" or "-".
func number(t token, sign string) (*node, error) {
	if t.kind == tokInt {
		i, err := strconv.ParseInt(sign+t.text, 10, 64)
		if err != nil {
			return nil, &SyntaxError{Pos: t.pos, Msg: "integer out of range"}
		}
		return &node{op: opLit, typ: tNum, depth: 1, val: value{k: kInt, i: i}}, nil
	}
	f, err := strconv.ParseFloat(sign+t.text, 64)
	if err != nil {
		return nil, &SyntaxError{Pos: t.pos, Msg: "number out of range"}
	}
	return &node{op: opLit, typ: tNum, depth: 1, val: value{k: kFloat, f: f}}, nil
}

// parsePrimary: literal | identifier | ( or ).
func (p *parser) parsePrimary() (*node, error) {
	t := p.next()
	switch t.kind {
	case tokString:
		return &node{op: opLit, typ: tStr, depth: 1, val: value{k: kString, s: t.text}}, nil
	case tokInt, tokFloat:
		return number(t, "")
	case tokLParen:
		if err := p.enter(t); err != nil {
			return nil, err
		}
		x, err := p.parseOr()
		p.leave()
		if err != nil {
			return nil, err
		}
		if r := p.next(); r.kind != tokRParen {
			return nil, p.unexpected(r)
		}
		return x, nil
	case tokIdent:
		switch {
		case t.keyword("TRUE"):
			return &node{op: opLit, typ: tBool, depth: 1, val: value{k: kBool, b: true}}, nil
		case t.keyword("FALSE"):
			return &node{op: opLit, typ: tBool, depth: 1, val: value{k: kBool}}, nil
		case t.keyword("NULL"):
			return nil, &SyntaxError{Pos: t.pos, Msg: "NULL is allowed only in IS [NOT] NULL"}
		case isKeyword(t.text):
			return nil, p.unexpected(t)
		}
		return &node{op: opIdent, typ: tAny, depth: 1, name: t.text}, nil
	}
	return nil, p.unexpected(t)
}

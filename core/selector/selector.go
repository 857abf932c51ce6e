// Package selector parses and evaluates JMS message selectors: the subset
// of SQL-92 conditional expressions that JMS 2.0 §3.8.1 defines, which
// STOMP brokers (the selector header) and AMQP brokers (the
// apache.org:selector-filter) accept too.
//
// # Syntax
//
//	literals      'text' (a quote inside is doubled: 'it''s'),
//	              exact numbers 57, -957, approximate numbers 7.5, 7.,
//	              .5, 1.5e3, -57.9E-2 (decimal only: no hex, octal or
//	              Java suffixes), TRUE, FALSE
//	identifiers   a letter, '_' or '$', then letters, digits, '_' or
//	              '$'; case-sensitive; never one of the keywords
//	keywords      NOT AND OR BETWEEN LIKE IN IS NULL ESCAPE TRUE FALSE,
//	              in any case
//	grouping      ( expression )
//	arithmetic    unary + -, then * /, then binary + -
//	comparison    = <> < <= > >=
//	              x [NOT] BETWEEN a AND b
//	              x [NOT] LIKE 'pattern' [ESCAPE 'c']   (% any run of
//	              characters, _ exactly one; c makes the next
//	              character literal)
//	              x [NOT] IN ('a', 'b', ...)
//	              x IS [NOT] NULL
//	logic         NOT, then AND, then OR (lowest)
//
// A selector must be a boolean expression. Mistakes that the literals
// make certain are refused by [Parse]: ordering a string or a boolean
// ('a' < x), arithmetic on one, LIKE or IN on a number, AND of numbers.
//
// # Evaluation
//
// Values are string, int64, float64 and bool; an identifier the message
// does not have, or whose value is nil, is NULL. Evaluation follows SQL's
// three-valued logic: a comparison or arithmetic involving NULL is
// UNKNOWN, NOT UNKNOWN is UNKNOWN, FALSE AND UNKNOWN is FALSE, TRUE OR
// UNKNOWN is TRUE, and a message is selected only when the whole
// expression is TRUE. An integer compared with or combined with a float
// is promoted to float; integer division by zero is UNKNOWN. Values of
// different kinds (a string and a number) never compare equal: the
// comparison is UNKNOWN. Strings and booleans compare only with = and
// <>. A value of any other type (such as []byte) is not NULL but
// compares with nothing.
//
// # Limits
//
// Parse refuses expressions longer than [MaxLength] bytes or nested
// deeper than [MaxDepth], so that a hostile selector cannot make the
// parser or the evaluator recurse without bound. Evaluation takes time
// linear in the expression, except LIKE, which is linear in the value
// for patterns without _, and at worst the product of the value's and
// the pattern's lengths.
package selector

import (
	"fmt"
)

// MaxLength is the longest expression, in bytes, that [Parse] accepts.
// It is generous for hand-written selectors and long IN lists, and
// bounds the work one evaluation can take.
const MaxLength = 8192

// MaxDepth bounds how deeply expressions may nest: parentheses, NOT,
// unary signs, and operands of operands (a chain a+b+c+... nests one
// level per operator; AND and OR chains do not nest).
const MaxDepth = 100

// SyntaxError is returned by [Parse] for an expression it refuses.
type SyntaxError struct {
	// Pos is the byte offset in the expression where the problem was
	// found (the start of the offending token).
	Pos int
	// Msg says what is wrong.
	Msg string
}

// Error returns "selector: " + Msg + " at offset " + Pos.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("selector: %s at offset %d", e.Msg, e.Pos)
}

// Selector is a parsed selector. It is immutable and safe for concurrent
// use.
type Selector struct {
	src  string
	root *node
}

// Parse parses a selector expression. The error, if any, is a
// *SyntaxError.
func Parse(expr string) (*Selector, error) {
	if len(expr) > MaxLength {
		return nil, &SyntaxError{Pos: MaxLength, Msg: fmt.Sprintf("expression longer than %d bytes", MaxLength)}
	}
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	if p.peek().kind == tokEOF {
		return nil, &SyntaxError{Pos: 0, Msg: "empty expression"}
	}
	n, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEOF {
		return nil, p.unexpected(t)
	}
	if n.typ != tBool && n.typ != tAny {
		return nil, &SyntaxError{Pos: 0, Msg: "not a boolean expression"}
	}
	return &Selector{src: expr, root: n}, nil
}

// String returns the expression as it was given to Parse; parsing it
// again gives an equal selector.
func (s *Selector) String() string {
	if s == nil {
		return ""
	}
	return s.src
}

// Matches reports whether the expression is TRUE for a message whose
// identifiers get resolves: it returns the value of the named property
// or header and whether the message has it. get is called only during
// Matches and not kept. A nil Selector matches everything.
func (s *Selector) Matches(get func(name string) (any, bool)) bool {
	if s == nil {
		return true
	}
	v := s.root.eval(get)
	return v.k == kBool && v.b
}

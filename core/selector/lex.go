package selector

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind uint8

const (
	tokEOF tokKind = iota
	tokIdent
	tokString
	tokInt
	tokFloat
	tokLParen
	tokRParen
	tokComma
	tokEq
	tokNe
	tokLt
	tokLe
	tokGt
	tokGe
	tokPlus
	tokMinus
	tokStar
	tokSlash
)

// token is one lexical unit. text is the identifier, the string
// literal's value (quotes removed, doubled quotes undone) or the
// number's digits.
type token struct {
	kind tokKind
	pos  int
	text string
}

// keyword reports whether t is the keyword kw (given in upper case);
// keywords are case-insensitive.
func (t token) keyword(kw string) bool {
	return t.kind == tokIdent && strings.EqualFold(t.text, kw)
}

var keywords = []string{"NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "NULL", "ESCAPE", "TRUE", "FALSE"}

func isKeyword(s string) bool {
	for _, kw := range keywords {
		if strings.EqualFold(s, kw) {
			return true
		}
	}
	return false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// Identifiers follow Java's rules closely enough for selectors: JMS
// defines them as Java identifiers.
func isIdentStart(r rune) bool { return r == '_' || r == '$' || unicode.IsLetter(r) }
func isIdentPart(r rune) bool  { return isIdentStart(r) || unicode.IsDigit(r) }

// lex splits s into tokens, ending with tokEOF. Its input is bounded by
// MaxLength, so the slice is too.
func lex(s string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(s) {
		c := s[i]
		start := i
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
			continue
		case c == '\'':
			var b strings.Builder
			i++
			for {
				j := strings.IndexByte(s[i:], '\'')
				if j < 0 {
					return nil, &SyntaxError{Pos: start, Msg: "unterminated string literal"}
				}
				b.WriteString(s[i : i+j])
				i += j + 1
				if i < len(s) && s[i] == '\'' { // '' is a quote
					b.WriteByte('\'')
					i++
					continue
				}
				break
			}
			toks = append(toks, token{tokString, start, b.String()})
			continue
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			t, n, err := lexNumber(s, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, t)
			i = n
			continue
		}
		if r, w := utf8.DecodeRuneInString(s[i:]); isIdentStart(r) {
			i += w
			for i < len(s) {
				r, w := utf8.DecodeRuneInString(s[i:])
				if !isIdentPart(r) {
					break
				}
				i += w
			}
			toks = append(toks, token{tokIdent, start, s[start:i]})
			continue
		}
		kind := tokEOF
		switch c {
		case '(':
			kind = tokLParen
		case ')':
			kind = tokRParen
		case ',':
			kind = tokComma
		case '=':
			kind = tokEq
		case '+':
			kind = tokPlus
		case '-':
			kind = tokMinus
		case '*':
			kind = tokStar
		case '/':
			kind = tokSlash
		case '<':
			kind = tokLt
			if i+1 < len(s) && s[i+1] == '=' {
				kind = tokLe
				i++
			} else if i+1 < len(s) && s[i+1] == '>' {
				kind = tokNe
				i++
			}
		case '>':
			kind = tokGt
			if i+1 < len(s) && s[i+1] == '=' {
				kind = tokGe
				i++
			}
		}
		if kind == tokEOF {
			r, _ := utf8.DecodeRuneInString(s[i:])
			return nil, &SyntaxError{Pos: start, Msg: fmt.Sprintf("unexpected character %q", r)}
		}
		i++
		toks = append(toks, token{kind, start, s[start:i]})
	}
	return append(toks, token{tokEOF, len(s), ""}), nil
}

// lexNumber reads a decimal number at s[i:]: digits, an optional
// fraction and an optional exponent. It is a float when it has a '.' or
// an exponent.
func lexNumber(s string, i int) (token, int, error) {
	start := i
	kind := tokInt
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i < len(s) && s[i] == '.' {
		kind = tokFloat
		i++
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j >= len(s) || !isDigit(s[j]) {
			return token{}, 0, &SyntaxError{Pos: start, Msg: "malformed exponent"}
		}
		kind = tokFloat
		i = j
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) {
		// "12abc" or "1.2.3" is a mistake, not a number and a name.
		if r, _ := utf8.DecodeRuneInString(s[i:]); isIdentPart(r) || r == '.' {
			return token{}, 0, &SyntaxError{Pos: start, Msg: "malformed number"}
		}
	}
	return token{kind, start, s[start:i]}, i, nil
}

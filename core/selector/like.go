package selector

import (
	"strings"
	"unicode/utf8"
)

// likePattern is a compiled LIKE pattern: segments separated by '%',
// each a list of literal pieces separated by '_' (one character each).
// "ab_c%x" is segments [["ab","c"], ["x"]].
//
// Matching anchors the first segment at the start and the last at the
// end, and finds each middle segment at its leftmost place after the
// previous one: with only '%' between them, the leftmost place is
// always as good as any. No backtracking, so a pattern such as
// '%a%a%a%b' costs a pass over the value, not a combinatorial search.
type likePattern struct {
	src  string // the pattern as written, and its escape ("" if none)
	esc  string
	segs []likeSeg
}

type likeSeg struct {
	pieces []string
	runes  int // characters the segment matches: its literals' and one per '_'
}

func compileLike(pat token, esc *token) (*likePattern, error) {
	lp := &likePattern{src: pat.text}
	var escRune rune = -1
	if esc != nil {
		r, w := utf8.DecodeRuneInString(esc.text)
		if esc.text == "" || w != len(esc.text) {
			return nil, &SyntaxError{Pos: esc.pos, Msg: "ESCAPE needs exactly one character"}
		}
		escRune = r
		lp.esc = esc.text
	}
	s := pat.text
	var seg likeSeg
	var lit strings.Builder
	endPiece := func() {
		seg.pieces = append(seg.pieces, lit.String())
		lit.Reset()
	}
	endSeg := func() {
		endPiece()
		seg.runes = len(seg.pieces) - 1
		for _, p := range seg.pieces {
			seg.runes += utf8.RuneCountInString(p)
		}
		lp.segs = append(lp.segs, seg)
		seg = likeSeg{}
	}
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == escRune {
			i += w
			if i >= len(s) {
				return nil, &SyntaxError{Pos: pat.pos, Msg: "LIKE pattern ends with its escape character"}
			}
			_, w = utf8.DecodeRuneInString(s[i:])
			lit.WriteString(s[i : i+w]) // bytes as written, even invalid UTF-8
			i += w
			continue
		}
		switch r {
		case '%':
			endSeg()
		case '_':
			endPiece()
		default:
			lit.WriteString(s[i : i+w])
		}
		i += w
	}
	endSeg()
	return lp, nil
}

// match reports whether the whole of s matches the pattern.
func (lp *likePattern) match(s string) bool {
	segs := lp.segs
	if len(segs) == 1 {
		return segs[0].matchAt(s) == len(s)
	}
	pos := segs[0].matchAt(s)
	if pos < 0 {
		return false
	}
	for _, g := range segs[1 : len(segs)-1] {
		i, j := g.find(s[pos:])
		if i < 0 {
			return false
		}
		pos += j
	}
	// The last segment matches a fixed number of characters, so it can
	// only sit at the very end, after everything matched so far.
	last := segs[len(segs)-1]
	start := len(s)
	for range last.runes {
		if start <= pos {
			return false
		}
		_, w := utf8.DecodeLastRuneInString(s[pos:start])
		start -= w
	}
	return last.matchAt(s[start:]) == len(s)-start
}

// matchAt returns how many bytes of s the segment matches at its start,
// or -1.
func (g *likeSeg) matchAt(s string) int {
	n := 0
	for k, p := range g.pieces {
		if k > 0 { // a '_' before this piece
			if n >= len(s) {
				return -1
			}
			_, w := utf8.DecodeRuneInString(s[n:])
			n += w
		}
		if !strings.HasPrefix(s[n:], p) {
			return -1
		}
		n += len(p)
	}
	return n
}

// find returns the leftmost match of the segment in s as byte offsets
// [i, j), or -1, -1.
func (g *likeSeg) find(s string) (int, int) {
	first := g.pieces[0]
	if len(g.pieces) == 1 {
		i := strings.Index(s, first)
		if i < 0 {
			return -1, -1
		}
		return i, i + len(first)
	}
	for i := 0; i <= len(s); {
		if first != "" {
			j := strings.Index(s[i:], first)
			if j < 0 {
				return -1, -1
			}
			i += j
		}
		if n := g.matchAt(s[i:]); n >= 0 {
			return i, i + n
		}
		if i == len(s) {
			break
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return -1, -1
}

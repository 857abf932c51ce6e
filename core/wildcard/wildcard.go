// Package wildcard matches dotted address names against patterns.
//
// An address is a sequence of words separated by '.', for example
// "sensors.kitchen.temp". A pattern is an address in which a word may be
// replaced by a wildcard:
//
//   - '*' matches exactly one word: "sensors.*.temp" matches
//     "sensors.kitchen.temp" but not "sensors.temp" nor "sensors.a.b.temp".
//   - '#' matches zero or more words: "sensors.#" matches "sensors",
//     "sensors.kitchen" and "sensors.kitchen.temp"; "#" matches everything.
//   - '>' is accepted as a synonym of '#', as ActiveMQ users write it.
//
// A wildcard must be a whole word: "sens*" is a literal word, not a
// pattern. These are the rules of ActiveMQ Artemis's default wildcard syntax.
package wildcard

import (
	"errors"
	"strings"
)

// ErrInvalidPattern is returned by [Validate] for a pattern with an empty word.
var ErrInvalidPattern = errors.New("wildcard: invalid pattern")

const (
	sep     = '.'
	anyOne  = "*"
	anyMany = "#"
	anyGT   = ">"
)

// IsPattern reports whether s contains a wildcard word.
func IsPattern(s string) bool {
	for len(s) > 0 {
		w, rest, _ := strings.Cut(s, string(sep))
		if w == anyOne || w == anyMany || w == anyGT {
			return true
		}
		s = rest
	}
	return false
}

// Validate reports ErrInvalidPattern for an empty pattern or one with an
// empty word ("a..b", ".a", "a.").
func Validate(pattern string) error {
	if pattern == "" {
		return ErrInvalidPattern
	}
	for _, w := range strings.Split(pattern, string(sep)) {
		if w == "" {
			return ErrInvalidPattern
		}
	}
	return nil
}

// Match reports whether address matches pattern. An address without
// wildcards matches only itself.
func Match(pattern, address string) bool {
	return match(pattern, address)
}

// match walks pattern and address word by word; '#' backtracks over the
// positions it could end at. Patterns are short, so the recursion is shallow.
func match(p, a string) bool {
	for {
		if p == "" {
			return a == ""
		}
		pw, prest, pmore := strings.Cut(p, string(sep))
		if pw == anyMany || pw == anyGT {
			if !pmore {
				return true // trailing '#' matches the rest, even nothing
			}
			// '#' takes zero words, then one more at a time.
			if match(prest, a) {
				return true
			}
			for a != "" {
				_, arest, amore := strings.Cut(a, string(sep))
				if !amore {
					a = ""
				} else {
					a = arest
				}
				if match(prest, a) {
					return true
				}
			}
			return false
		}
		if a == "" {
			return false
		}
		aw, arest, amore := strings.Cut(a, string(sep))
		if pw != anyOne && pw != aw {
			return false
		}
		if pmore != amore {
			// One side has more words. Only a trailing "#" can absorb none.
			if pmore && !amore {
				return prest == anyMany || prest == anyGT
			}
			return false
		}
		p, a = prest, arest
	}
}

// Specificity orders patterns from least to most specific, for choosing
// the settings that apply to an address when several patterns match it:
// a literal word outranks '*', which outranks '#'; earlier words weigh
// more. The result is only meaningful for comparing two patterns.
func Specificity(pattern string) []int {
	words := strings.Split(pattern, string(sep))
	score := make([]int, 0, len(words)+1)
	for _, w := range words {
		switch w {
		case anyMany, anyGT:
			score = append(score, 0)
		case anyOne:
			score = append(score, 1)
		default:
			score = append(score, 2)
		}
	}
	return score
}

// Compare orders two patterns by specificity: negative if a is less
// specific than b, positive if more, zero if equally specific.
func Compare(a, b string) int {
	sa, sb := Specificity(a), Specificity(b)
	for i := 0; i < len(sa) && i < len(sb); i++ {
		if sa[i] != sb[i] {
			return sa[i] - sb[i]
		}
	}
	// Equal prefix: the longer pattern is more specific unless it only
	// adds a '#'.
	return len(sa) - len(sb)
}

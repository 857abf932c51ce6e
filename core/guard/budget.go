package guard

import (
	"errors"
	"io"
	"sync/atomic"
)

// ErrBudget is returned by [Account.Charge] (and by the reads of
// [Account.Reader]) when the broker-wide pre-authentication budget has no
// room for the bytes a connection received: the front-end refuses the
// connection with its protocol's "server busy".
var ErrBudget = errors.New("guard: pre-authentication budget exhausted")

// Budget is the broker-wide budget of bytes held for connections that
// have not authenticated yet. It is safe for concurrent use.
type Budget struct {
	max  int64 // 0: unlimited (charges are still counted)
	held atomic.Int64
}

// NewBudget returns a budget of max bytes; max <= 0 means unlimited.
func NewBudget(max int64) *Budget {
	return &Budget{max: max}
}

// Max returns the budget's size in bytes; 0 means unlimited.
func (b *Budget) Max() int64 { return b.max }

// Held returns the bytes charged to open accounts.
func (b *Budget) Held() int64 { return b.held.Load() }

// Open returns a new account for one connection that charges at most
// limit bytes (limit <= 0: no limit of its own).
func (b *Budget) Open(limit int64) *Account {
	return &Account{b: b, limit: limit}
}

// take reserves n bytes, or reports false if the budget lacks room.
func (b *Budget) take(n int64) bool {
	if b.max <= 0 {
		b.held.Add(n)
		return true
	}
	for {
		h := b.held.Load()
		if h+n > b.max {
			return false
		}
		if b.held.CompareAndSwap(h, h+n) {
			return true
		}
	}
}

// Account is one connection's charge against a [Budget]. It is used by
// the connection's reading goroutine only (not safe for concurrent use).
type Account struct {
	b      *Budget
	limit  int64
	held   int64
	closed bool
}

// Charge charges n more bytes received, up to the account's limit (bytes
// past it are not charged: the front-end's frame limit refuses them). It
// returns ErrBudget, charging nothing, when the budget lacks room. After
// Close it does nothing.
func (a *Account) Charge(n int) error {
	if a.closed || n <= 0 {
		return nil
	}
	c := int64(n)
	if a.limit > 0 {
		c = min(c, a.limit-a.held)
	}
	if c <= 0 {
		return nil
	}
	if !a.b.take(c) {
		return ErrBudget
	}
	a.held += c
	return nil
}

// Held returns the bytes the account holds of the budget.
func (a *Account) Held() int64 { return a.held }

// Close gives the account's bytes back to the budget: the client has
// authenticated, or the connection ended. It is idempotent.
func (a *Account) Close() {
	if a.closed {
		return
	}
	a.closed = true
	a.b.held.Add(-a.held)
	a.held = 0
}

// Reader returns a reader that charges a with every byte it reads from r
// until a is closed; past that it reads from r and charges nothing. A
// read whose bytes the budget cannot take fails with ErrBudget (its
// bytes are dropped: the front-end refuses the connection).
func (a *Account) Reader(r io.Reader) io.Reader {
	return &chargedReader{a: a, r: r}
}

type chargedReader struct {
	a *Account
	r io.Reader
}

func (c *chargedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if !c.a.closed && n > 0 {
		if cerr := c.a.Charge(n); cerr != nil {
			return 0, cerr
		}
	}
	return n, err
}

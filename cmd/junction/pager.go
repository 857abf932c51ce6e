package main

import (
	"github.com/junctionmq/junction/core"
	"github.com/junctionmq/junction/persistence/page"
)

// pagerAdapter makes a *page.Dir a core.Pager: the two differ only in
// Open's result type (*page.Store satisfies core.PageStore as it is).
type pagerAdapter struct{ d *page.Dir }

var (
	_ core.Pager     = pagerAdapter{}
	_ core.PageStore = (*page.Store)(nil)
)

func (a pagerAdapter) Open(name string) (core.PageStore, error) {
	s, err := a.d.Open(name)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return s, nil
}

func (a pagerAdapter) List() ([]string, error)  { return a.d.List() }
func (a pagerAdapter) Remove(name string) error { return a.d.Remove(name) }
func (a pagerAdapter) Bytes() int64             { return a.d.Bytes() }

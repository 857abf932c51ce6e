package core

// NewMemJournal gives the external tests (package core_test) the
// in-memory journal of persist_test.go, as messages and bindings
// journal.
func NewMemJournal() MessageJournal { return newMemJournal() }

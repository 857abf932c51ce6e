package core

import (
	"fmt"
	"time"
)

// DiskLimits bound the space durable messages take. Past a limit durable
// sends (including paging) are refused with ErrDiskFull and a log line;
// confirmed messages are kept, and sends are taken again once consumers
// have freed space (checked every Interval).
type DiskLimits struct {
	// Usage reports the bytes the stores use (journals, page stores,
	// large messages) and the bytes free on their file system.
	Usage func() (used, free int64, err error)
	// MaxUsage bounds used; 0 = no bound.
	MaxUsage int64
	// MinFree is the free space to keep; 0 = none.
	MinFree int64
	// Interval between checks; zero means 500ms.
	Interval time.Duration
	// Free reports the bytes free where large bodies are stored, checked
	// (less MinFree and the bodies being received) before a large body
	// is taken (Session.ReceiveBody); nil skips the check. It is asked
	// even when Usage is nil.
	Free func() (int64, error)
}

// diskLoop checks the disk limits until the broker closes.
func (b *Broker) diskLoop(l DiskLimits) {
	defer b.wg.Done()
	iv := l.Interval
	if iv <= 0 {
		iv = 500 * time.Millisecond
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		b.checkDisk(l)
		select {
		case <-t.C:
		case <-b.done:
			return
		}
	}
}

// checkDisk sets or clears the refusal of durable sends, logging each
// change once.
func (b *Broker) checkDisk(l DiskLimits) {
	used, free, err := l.Usage()
	if err != nil {
		b.log.Warn().Err(err).Msg("checking disk usage failed")
		return
	}
	var why string
	switch {
	case l.MaxUsage > 0 && used >= l.MaxUsage:
		why = fmt.Sprintf("stores use %d bytes, limit %d", used, l.MaxUsage)
	case l.MinFree > 0 && free < l.MinFree:
		why = fmt.Sprintf("%d bytes free on disk, minimum %d", free, l.MinFree)
	}
	was := b.diskFull.Load()
	switch {
	case why != "" && was == nil:
		b.diskFull.Store(&why)
		b.log.Error().Int64("used", used).Int64("free", free).Int64("max_usage", l.MaxUsage).Int64("min_free", l.MinFree).
			Msg("disk limit reached: refusing durable sends (" + why + ")")
	case why != "" && *was != why:
		b.diskFull.Store(&why) // keep the figures current for the error text
	case why == "" && was != nil:
		b.diskFull.Store(nil)
		b.log.Info().Int64("used", used).Int64("free", free).Msg("disk back under its limits: durable sends accepted again")
	}
}

// DiskFull returns why durable sends are refused, or "" when they are not.
func (b *Broker) DiskFull() string {
	if p := b.diskFull.Load(); p != nil {
		return *p
	}
	return ""
}

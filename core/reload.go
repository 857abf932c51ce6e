package core

// Live configuration: what a running broker can change without a
// restart. A connection, a consumer or a message in flight notices
// nothing but the new values.

// SetAddressSettings puts new address settings in force: every address
// and queue resolves its settings again (dead-letter and expiry
// addresses, delivery attempts, redelivery delays, size limits and full
// policy, slow-consumer threshold and policy, auto-create, default
// routing type, duplicate-id cache size, last-value key, ring size,
// non-destructive consumption). A queue whose consumer gave it
// its own size limit (ConsumerOptions.MaxBytes) keeps that limit. On an
// invalid list nothing changes.
func (b *Broker) SetAddressSettings(list []AddressSettings) error {
	if err := b.settings.set(list); err != nil {
		return err
	}
	b.mu.Lock()
	for name, a := range b.addresses {
		a.settings = b.settings.resolve(name) // read under b.mu
		a.dupFromID.Store(a.settings.DuplicateIDFromMessageID)
	}
	qs := make([]*Queue, 0, len(b.queues))
	for _, q := range b.queues {
		qs = append(qs, q)
	}
	b.mu.Unlock()
	for _, q := range qs {
		st := b.settings.resolve(q.address)
		q.st.Store(&st)
		if !q.capped.Load() {
			q.maxBytes.Store(st.MaxSizeBytes)
		}
		q.setNonDestructive(st.NonDestructive)
	}
	// A raised limit may make room: producers waiting on a BLOCK queue
	// look again (they also do every roomWaitMax).
	if b.mem.waiters.Load() > 0 {
		b.mem.mu.Lock()
		if b.mem.ch != nil {
			close(b.mem.ch)
			b.mem.ch = nil
		}
		b.mem.mu.Unlock()
	}
	return nil
}

// AddressSettingsInForce returns the address settings in force, as
// configured.
func (b *Broker) AddressSettingsInForce() []AddressSettings {
	return append([]AddressSettings(nil), *b.settings.given.Load()...)
}

// SetMaxAutoCreatedQueuesPerUser changes Config.MaxAutoCreatedQueuesPerUser;
// queues already created stay.
func (b *Broker) SetMaxAutoCreatedQueuesPerUser(n int) {
	b.mu.Lock()
	b.cfg.MaxAutoCreatedQueuesPerUser = n
	b.mu.Unlock()
}

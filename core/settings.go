package core

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/junctionmq/junction/core/wildcard"
)

// Settings are the effective per-address policies, resolved from the
// AddressSettings whose patterns match the address.
type Settings struct {
	// DeadLetterAddress receives messages rejected, or released more than
	// MaxDeliveryAttempts times. Empty drops them (counted).
	DeadLetterAddress string
	// ExpiryAddress receives expired messages. Empty drops them (counted).
	ExpiryAddress string
	// MaxDeliveryAttempts before a message is dead-lettered; 0 = no limit.
	MaxDeliveryAttempts int
	// RedeliveryDelay before a failed delivery is tried again; it grows by
	// RedeliveryMultiplier per attempt up to MaxRedeliveryDelay.
	RedeliveryDelay      time.Duration
	RedeliveryMultiplier float64
	MaxRedeliveryDelay   time.Duration
	// AutoCreate addresses and queues on first use.
	AutoCreate bool
	// DefaultRoutingType for addresses auto-created by a send that does
	// not say.
	DefaultRoutingType RoutingType
	// MaxSizeBytes bounds the body bytes each queue of the address holds
	// in memory (ready, scheduled and in flight); 0 = unlimited.
	MaxSizeBytes int64
	// FullPolicy says what a new message does to a queue over
	// MaxSizeBytes, or to any queue while the broker is over its memory
	// budget (Config.MaxMemory).
	FullPolicy FullPolicy
	// SlowConsumerThreshold is the depth (messages) past which a
	// non-durable subscription's consumer is slow; 0 = never.
	// SlowConsumerPolicy says what then happens.
	SlowConsumerThreshold int64
	SlowConsumerPolicy    SlowConsumerPolicy
	// IDCacheSize is the number of duplicate ids the address remembers
	// (dedup.go); 0 turns duplicate detection off.
	IDCacheSize int
	// DuplicateIDFromMessageID makes an AMQP message's message-id its
	// duplicate id when it has no _AMQ_DUPL_ID (dedup.go).
	DuplicateIDFromMessageID bool
	// LastValueKey names the property whose value keys a last-value
	// queue (lvq.go): a new message replaces the queued one with the same
	// value. Empty: only messages with _AMQ_LVQ_NAME are keyed.
	LastValueKey string
	// RingSize bounds the messages each queue of the address holds; when
	// it is full the oldest waiting one is dropped (counted, lvq.go).
	// 0 = no bound.
	RingSize int64
	// NonDestructive makes consumers of the address's queues leave the
	// messages queued: each consumer is given each message once, and an
	// ack removes nothing (nondestructive.go).
	NonDestructive bool
}

// FullPolicy is what happens to a message sent to a full queue.
type FullPolicy string

// The full policies, as in ActiveMQ Artemis' address-full-policy.
const (
	// FullPage writes durable messages to the queue's page store on disk
	// and reads them back in order as consumers make room; non-durable
	// messages are dropped (counted). Without a page store (no
	// persistence) durable messages block as with FullBlock.
	FullPage FullPolicy = "PAGE"
	// FullBlock makes producers wait for room: STOMP and MQTT stop
	// reading the connection, AMQP stops granting link credit.
	FullBlock FullPolicy = "BLOCK"
	// FullFail refuses the send with ErrAddressFull.
	FullFail FullPolicy = "FAIL"
	// FullDrop drops the message for that queue (counted and logged).
	FullDrop FullPolicy = "DROP"
)

// valid reports whether p is one of the policies.
func (p FullPolicy) valid() bool {
	return p == FullPage || p == FullBlock || p == FullFail || p == FullDrop
}

// DefaultSettings is the table every address starts from:
//
//	dead-letter-address    DLQ
//	expiry-address         ExpiryQueue
//	max-delivery-attempts  10
//	redelivery-delay       0 (multiplier 1, max delay 0 = 10 × delay)
//	auto-create            true
//	default-routing-type   anycast
//	max-size-bytes         0 (unlimited; the broker's budget still applies)
//	address-full-policy    PAGE
//	slow-consumer-threshold 0 (off), slow-consumer-policy NOTIFY
//	id-cache-size          20000
//	duplicate-id-from-message-id false
//	last-value-key         "" (only _AMQ_LVQ_NAME keys)
//	ring-size              0 (off)
//	non-destructive        false
func DefaultSettings() Settings {
	return Settings{
		DeadLetterAddress:    "DLQ",
		ExpiryAddress:        "ExpiryQueue",
		MaxDeliveryAttempts:  10,
		RedeliveryMultiplier: 1,
		AutoCreate:           true,
		DefaultRoutingType:   Anycast,
		FullPolicy:           FullPage,
		SlowConsumerPolicy:   SlowNotify,
		IDCacheSize:          DefaultIDCacheSize,
	}
}

// AddressSettings overrides Settings for the addresses matching Match (a
// wildcard pattern, see package wildcard). Nil fields inherit from less
// specific matches and finally from DefaultSettings. When several
// patterns match an address the more specific one wins, field by field,
// as in ActiveMQ Artemis.
type AddressSettings struct {
	Match                 string         `yaml:"match"`
	DeadLetterAddress     *string        `yaml:"dead-letter-address"`
	ExpiryAddress         *string        `yaml:"expiry-address"`
	MaxDeliveryAttempts   *int           `yaml:"max-delivery-attempts"`
	RedeliveryDelay       *time.Duration `yaml:"redelivery-delay"`
	RedeliveryMultiplier  *float64       `yaml:"redelivery-multiplier"`
	MaxRedeliveryDelay    *time.Duration `yaml:"max-redelivery-delay"`
	AutoCreate            *bool          `yaml:"auto-create"`
	DefaultRoutingType    *string        `yaml:"default-routing-type"`
	MaxSizeBytes          *int64         `yaml:"max-size-bytes"`
	FullPolicy            *string        `yaml:"address-full-policy"`
	SlowConsumerThreshold *int64         `yaml:"slow-consumer-threshold"`
	SlowConsumerPolicy    *string        `yaml:"slow-consumer-policy"`
	IDCacheSize           *int           `yaml:"id-cache-size"`
	// Artemis' duplicate detection, last-value and ring queues
	// (dedup.go, lvq.go).
	DuplicateIDFromMessageID *bool   `yaml:"duplicate-id-from-message-id"`
	LastValueKey             *string `yaml:"last-value-key"`
	RingSize                 *int64  `yaml:"ring-size"`
	NonDestructive           *bool   `yaml:"non-destructive"`
}

// Validate checks the pattern and the values.
func (a *AddressSettings) Validate() error {
	if err := wildcard.Validate(a.Match); err != nil {
		return fmt.Errorf("address settings match %q: %w", a.Match, err)
	}
	if a.MaxDeliveryAttempts != nil && *a.MaxDeliveryAttempts < 0 {
		return fmt.Errorf("address settings %q: max-delivery-attempts must be >= 0", a.Match)
	}
	if a.RedeliveryDelay != nil && *a.RedeliveryDelay < 0 {
		return fmt.Errorf("address settings %q: redelivery-delay must be >= 0", a.Match)
	}
	if a.MaxRedeliveryDelay != nil && *a.MaxRedeliveryDelay < 0 {
		return fmt.Errorf("address settings %q: max-redelivery-delay must be >= 0", a.Match)
	}
	if a.RedeliveryMultiplier != nil && *a.RedeliveryMultiplier < 1 {
		return fmt.Errorf("address settings %q: redelivery-multiplier must be >= 1", a.Match)
	}
	if a.MaxSizeBytes != nil && *a.MaxSizeBytes < 0 {
		return fmt.Errorf("address settings %q: max-size-bytes must be >= 0", a.Match)
	}
	if a.SlowConsumerThreshold != nil && *a.SlowConsumerThreshold < 0 {
		return fmt.Errorf("address settings %q: slow-consumer-threshold must be >= 0", a.Match)
	}
	if a.IDCacheSize != nil && (*a.IDCacheSize < 0 || *a.IDCacheSize > 10_000_000) {
		return fmt.Errorf("address settings %q: id-cache-size must be between 0 and 10000000", a.Match)
	}
	if a.RingSize != nil && *a.RingSize < 0 {
		return fmt.Errorf("address settings %q: ring-size must be >= 0", a.Match)
	}
	if a.SlowConsumerPolicy != nil && !SlowConsumerPolicy(*a.SlowConsumerPolicy).valid() {
		return fmt.Errorf("address settings %q: slow-consumer-policy must be NOTIFY or KILL", a.Match)
	}
	if a.FullPolicy != nil && !FullPolicy(*a.FullPolicy).valid() {
		return fmt.Errorf("address settings %q: address-full-policy must be PAGE, BLOCK, FAIL or DROP", a.Match)
	}
	if a.DefaultRoutingType != nil {
		rt, err := ParseRoutingType(*a.DefaultRoutingType)
		if err != nil || rt == RoutingDefault {
			return fmt.Errorf("address settings %q: default-routing-type must be anycast or multicast", a.Match)
		}
	}
	return nil
}

func (a *AddressSettings) applyTo(s *Settings) {
	if a.DeadLetterAddress != nil {
		s.DeadLetterAddress = *a.DeadLetterAddress
	}
	if a.ExpiryAddress != nil {
		s.ExpiryAddress = *a.ExpiryAddress
	}
	if a.MaxDeliveryAttempts != nil {
		s.MaxDeliveryAttempts = *a.MaxDeliveryAttempts
	}
	if a.RedeliveryDelay != nil {
		s.RedeliveryDelay = *a.RedeliveryDelay
	}
	if a.RedeliveryMultiplier != nil {
		s.RedeliveryMultiplier = *a.RedeliveryMultiplier
	}
	if a.MaxRedeliveryDelay != nil {
		s.MaxRedeliveryDelay = *a.MaxRedeliveryDelay
	}
	if a.AutoCreate != nil {
		s.AutoCreate = *a.AutoCreate
	}
	if a.DefaultRoutingType != nil {
		s.DefaultRoutingType, _ = ParseRoutingType(*a.DefaultRoutingType)
	}
	if a.MaxSizeBytes != nil {
		s.MaxSizeBytes = *a.MaxSizeBytes
	}
	if a.FullPolicy != nil {
		s.FullPolicy = FullPolicy(*a.FullPolicy)
	}
	if a.SlowConsumerThreshold != nil {
		s.SlowConsumerThreshold = *a.SlowConsumerThreshold
	}
	if a.SlowConsumerPolicy != nil {
		s.SlowConsumerPolicy = SlowConsumerPolicy(*a.SlowConsumerPolicy)
	}
	if a.IDCacheSize != nil {
		s.IDCacheSize = *a.IDCacheSize
	}
	if a.DuplicateIDFromMessageID != nil {
		s.DuplicateIDFromMessageID = *a.DuplicateIDFromMessageID
	}
	if a.LastValueKey != nil {
		s.LastValueKey = *a.LastValueKey
	}
	if a.RingSize != nil {
		s.RingSize = *a.RingSize
	}
	if a.NonDestructive != nil {
		s.NonDestructive = *a.NonDestructive
	}
}

// settingsTable resolves Settings for an address. Its entries are
// replaced whole by a reload (Broker.SetAddressSettings), read without a
// lock.
type settingsTable struct {
	entries atomic.Pointer[[]AddressSettings] // least specific first
	given   atomic.Pointer[[]AddressSettings] // as configured
}

func newSettingsTable(list []AddressSettings) (*settingsTable, error) {
	t := &settingsTable{}
	if err := t.set(list); err != nil {
		return nil, err
	}
	return t, nil
}

// set checks list and puts it in force.
func (t *settingsTable) set(list []AddressSettings) error {
	entries := slices.Clone(list)
	for i := range entries {
		if err := entries[i].Validate(); err != nil {
			return err
		}
	}
	slices.SortStableFunc(entries, func(a, b AddressSettings) int {
		return wildcard.Compare(a.Match, b.Match)
	})
	given := slices.Clone(list)
	t.entries.Store(&entries)
	t.given.Store(&given)
	return nil
}

func (t *settingsTable) resolve(address string) Settings {
	s := DefaultSettings()
	entries := *t.entries.Load()
	for i := range entries {
		if wildcard.Match(entries[i].Match, address) {
			entries[i].applyTo(&s)
		}
	}
	return s
}

// redeliveryDelay is the wait before attempt n+1 after n failed ones.
func (s *Settings) redeliveryDelay(failures uint32) time.Duration {
	if s.RedeliveryDelay <= 0 || failures == 0 {
		return 0
	}
	d := float64(s.RedeliveryDelay)
	max := s.MaxRedeliveryDelay
	if max <= 0 {
		max = 10 * s.RedeliveryDelay
	}
	for i := uint32(1); i < failures && d < float64(max); i++ {
		d *= s.RedeliveryMultiplier
	}
	if d > float64(max) {
		return max
	}
	return time.Duration(d)
}

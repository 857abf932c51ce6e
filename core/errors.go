package core

import (
	"errors"
	"fmt"
)

// Errors returned by the broker. Front-ends map them to their protocol's
// error (STOMP ERROR, AMQP condition, MQTT reason code).
var (
	ErrClosed            = errors.New("core: broker closed")
	ErrSessionClosed     = errors.New("core: session closed")
	ErrInvalidMessage    = errors.New("core: invalid message")
	ErrInvalidAddress    = errors.New("core: invalid address")
	ErrAddressNotFound   = errors.New("core: address does not exist")
	ErrQueueNotFound     = errors.New("core: queue does not exist")
	ErrQueueExists       = errors.New("core: queue already exists")
	ErrRoutingMismatch   = errors.New("core: routing type not supported by address")
	ErrUnknownDelivery   = errors.New("core: unknown delivery")
	ErrConsumerClosed    = errors.New("core: consumer closed")
	ErrTxClosed          = errors.New("core: transaction already ended")
	ErrSubscriptionInUse = errors.New("core: queue or subscription in use by a consumer") // a plain queue too: see inUse
	ErrClientIDRequired  = errors.New("core: durable subscription needs a client id")
	ErrAuthFailed        = errors.New("core: authentication failed")
	ErrAddressFull       = errors.New("core: queue full")
	// ErrConnectionNotFound: Broker.CloseConnection was given the id of
	// no open connection, or of one that cannot be closed.
	ErrConnectionNotFound = errors.New("core: connection not found")
	// ErrInvalidSelector wraps the *selector.SyntaxError of a consumer's
	// selector that does not parse.
	ErrInvalidSelector = errors.New("core: invalid selector")
	// ErrUnroutable: a message moved by an administrator (MoveMessages)
	// would reach no queue of its target address (a multicast address
	// with no subscription): it stays where it is rather than be dropped.
	ErrUnroutable = errors.New("core: no queue of the address takes the message")
)

// inUse is an ErrSubscriptionInUse (errors.Is) whose text says what is
// in use, in words that fit it: a plain queue is no subscription.
// Consumers forbid what was asked: a queue (a plain one too) or an
// address cannot be deleted while one of its queues has consumers; a
// subscription that is not shared takes one consumer at a time; a
// durable subscription with a consumer cannot be replaced or removed; a
// shared subscription's consumers share one selector.
type inUse string

func (e inUse) Error() string        { return "core: " + string(e) }
func (e inUse) Is(target error) bool { return target == ErrSubscriptionInUse }

func inUsef(format string, a ...any) error { return inUse(fmt.Sprintf(format, a...)) }

package core

import "errors"

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
	ErrSubscriptionInUse = errors.New("core: durable subscription has an active consumer")
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

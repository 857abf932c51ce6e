package frames

import (
	"errors"
	"fmt"

	"github.com/junctionmq/junction/amqp/internal/encoding"
)

// Errors returned by this package, wrapped with context. Decoding errors from
// the type system wrap the sentinels of package encoding instead.
var (
	// ErrMissingField means a mandatory field is absent or null
	// (answer with amqp:invalid-field or amqp:decode-error).
	ErrMissingField = errors.New("amqp: mandatory field missing")
	// ErrInvalidField means a field holds a value outside its domain, such as
	// a settle mode of 7 or a filter-set key that is not a symbol.
	ErrInvalidField = errors.New("amqp: invalid field value")
	// ErrInvalidHeader means a frame header is malformed.
	ErrInvalidHeader = errors.New("amqp: invalid frame header")
	// ErrUnexpectedBody means a frame body's descriptor is unknown, or does
	// not belong to the frame type (an AMQP performative in a SASL frame...),
	// or bytes follow a performative that carries no payload.
	ErrUnexpectedBody = errors.New("amqp: unexpected frame body")
	// ErrInvalidMessage means a message's sections are unknown, repeated or
	// out of order.
	ErrInvalidMessage = errors.New("amqp: invalid message sections")
)

func errUnknownDescriptor(d any) error {
	return fmt.Errorf("%w: unknown descriptor %v", ErrUnexpectedBody, d)
}

// Error is the AMQP error type (descriptor 0x1d), carried by detach, end,
// close and rejected. It implements the error interface.
type Error struct {
	Condition   encoding.Symbol // mandatory
	Description string
	Info        encoding.Map
}

// Error returns the condition and the description.
func (e *Error) Error() string {
	if e.Description == "" {
		return string(e.Condition)
	}
	return string(e.Condition) + ": " + e.Description
}

// Error conditions (Part 2 §2.8.15 to §2.8.18, Part 4 §4.5.8).
const (
	ErrCondInternal              encoding.Symbol = "amqp:internal-error"
	ErrCondNotFound              encoding.Symbol = "amqp:not-found"
	ErrCondUnauthorizedAccess    encoding.Symbol = "amqp:unauthorized-access"
	ErrCondDecodeError           encoding.Symbol = "amqp:decode-error"
	ErrCondResourceLimitExceeded encoding.Symbol = "amqp:resource-limit-exceeded"
	ErrCondNotAllowed            encoding.Symbol = "amqp:not-allowed"
	ErrCondInvalidField          encoding.Symbol = "amqp:invalid-field"
	ErrCondNotImplemented        encoding.Symbol = "amqp:not-implemented"
	ErrCondResourceLocked        encoding.Symbol = "amqp:resource-locked"
	ErrCondPreconditionFailed    encoding.Symbol = "amqp:precondition-failed"
	ErrCondResourceDeleted       encoding.Symbol = "amqp:resource-deleted"
	ErrCondIllegalState          encoding.Symbol = "amqp:illegal-state"
	ErrCondFrameSizeTooSmall     encoding.Symbol = "amqp:frame-size-too-small"

	ErrCondConnectionForced encoding.Symbol = "amqp:connection:forced"
	ErrCondFramingError     encoding.Symbol = "amqp:connection:framing-error"
	ErrCondRedirect         encoding.Symbol = "amqp:connection:redirect"

	ErrCondWindowViolation  encoding.Symbol = "amqp:session:window-violation"
	ErrCondErrantLink       encoding.Symbol = "amqp:session:errant-link"
	ErrCondHandleInUse      encoding.Symbol = "amqp:session:handle-in-use"
	ErrCondUnattachedHandle encoding.Symbol = "amqp:session:unattached-handle"

	ErrCondDetachForced          encoding.Symbol = "amqp:link:detach-forced"
	ErrCondTransferLimitExceeded encoding.Symbol = "amqp:link:transfer-limit-exceeded"
	ErrCondMessageSizeExceeded   encoding.Symbol = "amqp:link:message-size-exceeded"
	ErrCondLinkRedirect          encoding.Symbol = "amqp:link:redirect"
	ErrCondStolen                encoding.Symbol = "amqp:link:stolen"

	ErrCondTxUnknownID encoding.Symbol = "amqp:transaction:unknown-id"
	ErrCondTxRollback  encoding.Symbol = "amqp:transaction:rollback"
	ErrCondTxTimeout   encoding.Symbol = "amqp:transaction:timeout"
)

func (e *Error) encode(w *encoding.Writer) {
	f := beginComposite(w, codeError)
	f.symReq(e.Condition)
	f.str(e.Description)
	f.mapf(e.Info)
	f.end()
}

// readError reads an optional error field's value (the caller has ruled
// out null).
func readError(r *encoding.Reader) (*Error, error) {
	f, err := readComposite(r, codeError, "error")
	if err != nil {
		return nil, err
	}
	e := new(Error)
	f.need("condition")
	f.sym(&e.Condition)
	f.str(&e.Description)
	f.mapf(&e.Info)
	return e, f.err
}

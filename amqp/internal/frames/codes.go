package frames

import "github.com/junctionmq/junction/amqp/internal/encoding"

// Descriptor codes of the composite types (domain 0x00000000, so the code is
// the whole ulong descriptor).
const (
	codeOpen        uint64 = 0x10
	codeBegin       uint64 = 0x11
	codeAttach      uint64 = 0x12
	codeFlow        uint64 = 0x13
	codeTransfer    uint64 = 0x14
	codeDisposition uint64 = 0x15
	codeDetach      uint64 = 0x16
	codeEnd         uint64 = 0x17
	codeClose       uint64 = 0x18
	codeError       uint64 = 0x1d

	codeReceived uint64 = 0x23
	codeAccepted uint64 = 0x24
	codeRejected uint64 = 0x25
	codeReleased uint64 = 0x26
	codeModified uint64 = 0x27
	codeSource   uint64 = 0x28
	codeTarget   uint64 = 0x29

	codeCoordinator        uint64 = 0x30
	codeDeclare            uint64 = 0x31
	codeDischarge          uint64 = 0x32
	codeDeclared           uint64 = 0x33
	codeTransactionalState uint64 = 0x34

	codeSASLMechanisms uint64 = 0x40
	codeSASLInit       uint64 = 0x41
	codeSASLChallenge  uint64 = 0x42
	codeSASLResponse   uint64 = 0x43
	codeSASLOutcome    uint64 = 0x44

	codeHeader                uint64 = 0x70
	codeDeliveryAnnotations   uint64 = 0x71
	codeMessageAnnotations    uint64 = 0x72
	codeProperties            uint64 = 0x73
	codeApplicationProperties uint64 = 0x74
	codeData                  uint64 = 0x75
	codeAMQPSequence          uint64 = 0x76
	codeAMQPValue             uint64 = 0x77
	codeFooter                uint64 = 0x78
)

// Filter descriptors registered by Apache (Qpid/ActiveMQ) and used by JMS
// clients, as codes and as symbolic names.
const (
	SelectorFilterCode uint64          = 0x0000468C00000004
	NoLocalFilterCode  uint64          = 0x0000468C00000003
	SelectorFilterName encoding.Symbol = "apache.org:selector-filter:string"
	NoLocalFilterName  encoding.Symbol = "apache.org:no-local-filter:list"
)

// IsFilter reports whether filter f has the descriptor code or name given.
func IsFilter(f *encoding.Described, code uint64, name encoding.Symbol) bool {
	if f == nil {
		return false
	}
	switch d := f.Descriptor.(type) {
	case uint64:
		return d == code
	case encoding.Symbol:
		return d == name
	}
	return false
}

// symbolCodes maps the symbolic descriptors of the AMQP types to their codes.
var symbolCodes = map[encoding.Symbol]uint64{
	"amqp:open:list":                  codeOpen,
	"amqp:begin:list":                 codeBegin,
	"amqp:attach:list":                codeAttach,
	"amqp:flow:list":                  codeFlow,
	"amqp:transfer:list":              codeTransfer,
	"amqp:disposition:list":           codeDisposition,
	"amqp:detach:list":                codeDetach,
	"amqp:end:list":                   codeEnd,
	"amqp:close:list":                 codeClose,
	"amqp:error:list":                 codeError,
	"amqp:received:list":              codeReceived,
	"amqp:accepted:list":              codeAccepted,
	"amqp:rejected:list":              codeRejected,
	"amqp:released:list":              codeReleased,
	"amqp:modified:list":              codeModified,
	"amqp:source:list":                codeSource,
	"amqp:target:list":                codeTarget,
	"amqp:coordinator:list":           codeCoordinator,
	"amqp:declare:list":               codeDeclare,
	"amqp:discharge:list":             codeDischarge,
	"amqp:declared:list":              codeDeclared,
	"amqp:transactional-state:list":   codeTransactionalState,
	"amqp:sasl-mechanisms:list":       codeSASLMechanisms,
	"amqp:sasl-init:list":             codeSASLInit,
	"amqp:sasl-challenge:list":        codeSASLChallenge,
	"amqp:sasl-response:list":         codeSASLResponse,
	"amqp:sasl-outcome:list":          codeSASLOutcome,
	"amqp:header:list":                codeHeader,
	"amqp:delivery-annotations:map":   codeDeliveryAnnotations,
	"amqp:message-annotations:map":    codeMessageAnnotations,
	"amqp:properties:list":            codeProperties,
	"amqp:application-properties:map": codeApplicationProperties,
	"amqp:data:binary":                codeData,
	"amqp:amqp-sequence:list":         codeAMQPSequence,
	"amqp:amqp-value:*":               codeAMQPValue,
	"amqp:footer:map":                 codeFooter,
}

// descriptorCode maps a decoded descriptor (uint64 or Symbol) to a code; ok
// is false for a symbol this package does not know.
func descriptorCode(d any) (code uint64, ok bool) {
	switch d := d.(type) {
	case uint64:
		return d, true
	case encoding.Symbol:
		code, ok = symbolCodes[d]
		return code, ok
	}
	return 0, false
}

// readDescriptor reads the descriptor of a described value and returns its
// code, mapping symbolic descriptors to codes.
func readDescriptor(r *encoding.Reader) (uint64, error) {
	d, err := r.ReadDescriptor()
	if err != nil {
		return 0, err
	}
	code, ok := descriptorCode(d)
	if !ok {
		return 0, errUnknownDescriptor(d)
	}
	return code, nil
}

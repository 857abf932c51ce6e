package frames

import "github.com/junctionmq/junction/amqp/internal/encoding"

// SASL outcome codes (SASLOutcome.Code).
const (
	SASLCodeOK      uint8 = 0 // authentication succeeded
	SASLCodeAuth    uint8 = 1 // failed: bad credentials
	SASLCodeSys     uint8 = 2 // failed: system error
	SASLCodeSysPerm uint8 = 3 // failed: permanent system error
	SASLCodeSysTemp uint8 = 4 // failed: transient system error
)

// SASLMechanisms advertises the server's SASL mechanisms (0x40).
type SASLMechanisms struct {
	Mechanisms []encoding.Symbol // mandatory
}

func (m *SASLMechanisms) encode(w *encoding.Writer) {
	f := beginComposite(w, codeSASLMechanisms)
	w.SymbolArray(m.Mechanisms)
	f.next()
	f.end()
}

func decodeSASLMechanisms(r *encoding.Reader) (*SASLMechanisms, error) {
	f, err := readFields(r, "sasl-mechanisms")
	if err != nil {
		return nil, err
	}
	m := new(SASLMechanisms)
	f.need("sasl-server-mechanisms")
	f.syms(&m.Mechanisms)
	return m, f.err
}

// SASLInit selects a mechanism and carries the initial response (0x41).
type SASLInit struct {
	Mechanism       encoding.Symbol // mandatory
	InitialResponse []byte          // nil when absent; empty but present is distinct
	Hostname        string
}

func (i *SASLInit) encode(w *encoding.Writer) {
	f := beginComposite(w, codeSASLInit)
	f.symReq(i.Mechanism)
	f.bin(i.InitialResponse)
	f.str(i.Hostname)
	f.end()
}

func decodeSASLInit(r *encoding.Reader) (*SASLInit, error) {
	f, err := readFields(r, "sasl-init")
	if err != nil {
		return nil, err
	}
	i := new(SASLInit)
	f.need("mechanism")
	f.sym(&i.Mechanism)
	f.bin(&i.InitialResponse)
	f.str(&i.Hostname)
	return i, f.err
}

// SASLChallenge carries a security challenge (0x42).
type SASLChallenge struct {
	Challenge []byte // mandatory
}

func (c *SASLChallenge) encode(w *encoding.Writer) {
	f := beginComposite(w, codeSASLChallenge)
	f.binReq(c.Challenge)
	f.end()
}

func decodeSASLChallenge(r *encoding.Reader) (*SASLChallenge, error) {
	f, err := readFields(r, "sasl-challenge")
	if err != nil {
		return nil, err
	}
	c := new(SASLChallenge)
	f.need("challenge")
	f.bin(&c.Challenge)
	return c, f.err
}

// SASLResponse carries the response to a challenge (0x43).
type SASLResponse struct {
	Response []byte // mandatory
}

func (c *SASLResponse) encode(w *encoding.Writer) {
	f := beginComposite(w, codeSASLResponse)
	f.binReq(c.Response)
	f.end()
}

func decodeSASLResponse(r *encoding.Reader) (*SASLResponse, error) {
	f, err := readFields(r, "sasl-response")
	if err != nil {
		return nil, err
	}
	c := new(SASLResponse)
	f.need("response")
	f.bin(&c.Response)
	return c, f.err
}

// SASLOutcome ends the SASL exchange (0x44).
type SASLOutcome struct {
	Code           uint8 // mandatory: SASLCodeOK, SASLCodeAuth...
	AdditionalData []byte
}

func (o *SASLOutcome) encode(w *encoding.Writer) {
	f := beginComposite(w, codeSASLOutcome)
	w.Ubyte(o.Code)
	f.next()
	f.bin(o.AdditionalData)
	f.end()
}

func decodeSASLOutcome(r *encoding.Reader) (*SASLOutcome, error) {
	f, err := readFields(r, "sasl-outcome")
	if err != nil {
		return nil, err
	}
	o := new(SASLOutcome)
	f.need("code")
	f.ubyte(&o.Code)
	f.bin(&o.AdditionalData)
	return o, f.err
}

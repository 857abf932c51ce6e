// Package stompclient holds what code that drives a broker with the
// go-stomp client shares: the send and receive commands of junction, its
// load generator, and tests.
package stompclient

import gostomp "github.com/go-stomp/stomp/v3"

// Quiet is a go-stomp connection option that silences the client's own
// logging of the ERRORs it sees when it disconnects with subscriptions
// open, or when a test stops or kills the broker under it.
var Quiet = gostomp.ConnOpt.Logger(nopLogger{})

type nopLogger struct{}

func (nopLogger) Debugf(string, ...any)   {}
func (nopLogger) Debug(string)            {}
func (nopLogger) Infof(string, ...any)    {}
func (nopLogger) Info(string)             {}
func (nopLogger) Warningf(string, ...any) {}
func (nopLogger) Warning(string)          {}
func (nopLogger) Errorf(string, ...any)   {}
func (nopLogger) Error(string)            {}

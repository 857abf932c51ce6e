package core

import "context"

// Authenticator checks a client's credentials when it connects. A
// front-end calls it with what the protocol carried (STOMP login and
// passcode, MQTT username and password, AMQP SASL PLAIN) and uses the
// returned user name as the session's identity.
type Authenticator interface {
	// Authenticate returns the user name for the credentials, or an error
	// wrapping ErrAuthFailed.
	Authenticate(ctx context.Context, login, passcode string) (user string, err error)
}

// AllowAll accepts every client; the user is the login as given (empty
// for anonymous). It is the default, meant for loopback-only brokers.
type AllowAll struct{}

// Authenticate implements Authenticator.
func (AllowAll) Authenticate(_ context.Context, login, _ string) (string, error) {
	return login, nil
}

package management

import (
	"context"
	"net/http"

	"github.com/junctionmq/junction/core"
)

// userKey is the context key of the user a request authenticated as.
type userKey struct{}

// requestUser is the user a request authenticated as, or consoleUser
// when the server requires no login.
func requestUser(r *http.Request) string {
	if u, ok := r.Context().Value(userKey{}).(string); ok {
		return u
	}
	return consoleUser
}

// openPaths answer without a login: probes must not need credentials.
var openPaths = map[string]bool{"/healthz": true, "/readyz": true}

// login checks a request's HTTP Basic credentials with the broker's
// authenticator (failed attempts slow down per client IP, see
// core.Broker.AuthenticateFrom) and that the user holds
// core.PermManage. It answers 401 with a WWW-Authenticate challenge
// without valid credentials and 403 for a user who may not manage, and
// then returns nil; otherwise the request, carrying the user.
func (s *Server) login(w http.ResponseWriter, r *http.Request) *http.Request {
	challenge := func(msg string) {
		w.Header().Set("WWW-Authenticate", `Basic realm="Junction", charset="UTF-8"`)
		writeError(w, http.StatusUnauthorized, msg)
	}
	name, pass, ok := r.BasicAuth()
	if !ok {
		challenge("authentication required")
		return nil
	}
	user, err := s.b.AuthenticateFrom(r.Context(), r.RemoteAddr, name, pass)
	if err != nil {
		challenge("invalid user name or password")
		return nil
	}
	if err := s.b.Authorize(user, core.PermManage, ""); err != nil {
		s.log.Warn().Str("user", name).Str("remote", r.RemoteAddr).Str("path", r.URL.Path).
			Msg("console access refused: the user lacks the manage permission")
		writeError(w, http.StatusForbidden, "user "+name+" may not manage the broker")
		return nil
	}
	return r.WithContext(context.WithValue(r.Context(), userKey{}, user))
}

package management

import (
	"net/http"
)

// getConfig is GET /api/v1/config: the settings in force.
func (s *Server) getConfig(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Settings == nil {
		writeError(w, http.StatusNotFound, "this broker reports no configuration")
		return
	}
	writeJSON(w, http.StatusOK, s.cfg.Settings())
}

// reloadConfig is POST /api/v1/config/reload: the broker reads its
// configuration again; 200 with what was applied and what needs a
// restart, 400 (with the same report) when the configuration is invalid.
func (s *Server) reloadConfig(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Reload == nil {
		writeError(w, http.StatusNotFound, "this broker cannot reload its configuration")
		return
	}
	var none struct{}
	if !decode(w, r, &none) {
		return
	}
	res, err := s.cfg.Reload()
	s.log.Info().Str("remote", r.RemoteAddr).AnErr("error", err).Msg("console: configuration reload")
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error(), "result": res})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

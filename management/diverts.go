package management

import (
	"errors"
	"net/http"

	"github.com/junctionmq/junction/core"
)

// divertList is GET /api/v1/diverts.
type divertList struct {
	VirtualTopics bool          `json:"virtualTopics"`
	Diverts       []core.Divert `json:"diverts"`
}

func (s *Server) listDiverts(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, divertList{VirtualTopics: s.b.VirtualTopics(), Diverts: s.b.Diverts()})
}

func (s *Server) createDivert(w http.ResponseWriter, r *http.Request) {
	var d core.Divert
	if !decode(w, r, &d) {
		return
	}
	if err := s.b.CreateDivert(d); err != nil {
		switch {
		case errors.Is(err, core.ErrDivertExists):
			writeError(w, http.StatusConflict, err.Error())
		case errors.Is(err, core.ErrInvalidDivert), errors.Is(err, core.ErrInvalidAddress):
			writeError(w, http.StatusBadRequest, err.Error())
		case errors.Is(err, core.ErrNotInCluster):
			writeError(w, http.StatusNotImplemented, err.Error())
		default:
			s.fail(w, r, err)
		}
		return
	}
	s.log.Info().Str("divert", d.Name).Str("address", d.Address).Str("to", d.ForwardingAddress).Str("remote", r.RemoteAddr).
		Msg("console: divert created")
	writeJSON(w, http.StatusCreated, d)
}

func (s *Server) deleteDivert(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.b.DeleteDivert(name); err != nil {
		switch {
		case errors.Is(err, core.ErrDivertNotFound):
			writeError(w, http.StatusNotFound, err.Error())
			return
		case errors.Is(err, core.ErrNotInCluster):
			writeError(w, http.StatusNotImplemented, err.Error())
			return
		}
		s.fail(w, r, err)
		return
	}
	s.log.Info().Str("divert", name).Str("remote", r.RemoteAddr).Msg("console: divert deleted")
	w.WriteHeader(http.StatusNoContent)
}

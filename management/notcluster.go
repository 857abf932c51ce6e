package management

import "net/http"

// notClusterRoutes answers the cluster's paths on a single broker with
// what is the matter: junction cluster status against it printed "no such
// endpoint: /api/v1/cluster", as if the path were wrong.
func (s *Server) notClusterRoutes() {
	notCluster := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "this broker is not a cluster node (started without --cluster-node-id)")
	}
	s.route("/cluster", map[string]http.HandlerFunc{"GET": notCluster})
	s.route("/cluster/members", map[string]http.HandlerFunc{"POST": notCluster})
	s.route("/cluster/members/{id}", map[string]http.HandlerFunc{"DELETE": notCluster})
}

package httpapi

import (
	"net/http"
	"strconv"

	"github.com/peerlimit/peerlimit/envoyrls/rlconfig"
	"github.com/peerlimit/peerlimit/limiter"
)

// GET /v1/envoy-rls/config is envoyproxy/ratelimit's /rlconfig debug
// page: the Envoy rate limit service's rules this node has in force, as
// JSON (EnvoyRLSConfig), or with ?format=text one line per rule in
// upstream's shape, so that the two can be compared and diffed between
// nodes. docs/envoy.md describes both.
//
// The rules come as rlconfig views, not as envoyrls.RuleSets: envoyrls
// serves Envoy's gRPC API, and this package links no gRPC
// (nogrpc_test.go); the node adapts with envoyrls.Viewer.

// EnvoyRLSConfig is the answer of GET /v1/envoy-rls/config.
type EnvoyRLSConfig = rlconfig.View

// EnvoyRLSRule is one rule of EnvoyRLSConfig.
type EnvoyRLSRule = rlconfig.Rule

func (h *handler) envoyRLSConfig(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if format != "" && format != "json" && format != "text" {
		writeError(w, &limiter.ArgumentError{Field: "format", Reason: `must be "json" or "text", got ` + strconv.Quote(format)})
		return
	}
	cfg := h.deps.EnvoyRLS()
	if cfg == nil {
		writeNoEnvoyRLS(w)
		return
	}
	if format == "text" {
		serveEnvoyRLSText(w, cfg)
		return
	}
	writeJSON(w, http.StatusOK, cfg)
}

// RLConfigHandler serves envoyproxy/ratelimit's debug page, GET /rlconfig
// on its debug port, from the view of the rules in force (nil: no Envoy
// rate limit service): the text of GET /v1/envoy-rls/config?format=text.
// The ratelimit mode serves it on DEBUG_HOST:DEBUG_PORT, without
// authentication, as upstream does: it shows the limits, which Envoy's
// callers see in every answer anyway.
func RLConfigHandler(view func() *rlconfig.View) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		cfg := view()
		if cfg == nil {
			writeNoEnvoyRLS(w)
			return
		}
		serveEnvoyRLSText(w, cfg)
	})
}

func writeNoEnvoyRLS(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, errorBody{Error{Code: "NOT_FOUND",
		Message: "this node serves no Envoy rate limit service: it was started without its configuration"}})
}

func serveEnvoyRLSText(w http.ResponseWriter, cfg *rlconfig.View) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_ = cfg.WriteText(w) // the client may be gone; nothing to do
}

package httpapi

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/limiter"
)

// crossSite refuses what a browser sends on behalf of another site's page
// (issue 38, item 5). A node's API takes POSTs of any Content-Type, so a
// page a visitor's browser shows could otherwise POST /v1/reset or spend
// limits as a "simple" request (text/plain or a form: no CORS preflight),
// with whatever the browser can reach: a node on localhost or the
// visitor's network.
//
// It is net/http's CrossOriginProtection: a request that changes anything
// (any method but GET, HEAD and OPTIONS) whose Sec-Fetch-Site is not
// same-origin or none, or, without that header, whose Origin's host is not
// the request's Host, is refused 403 PERMISSION_DENIED, unless its Origin
// is one of Config.AllowedOrigins. Browsers send these headers on every
// cross-site POST; curl and server-side clients send neither and are let
// through (that is what the bearer token is for). The console at /ui/ is
// same-origin and only GETs. A GET changes nothing and, without CORS
// headers, the other site's page cannot read its answer.
//
// CORS headers are sent only to Config.AllowedOrigins: such an origin's
// preflight (OPTIONS with Access-Control-Request-Method) is answered 204,
// and its requests carry Access-Control-Allow-Origin. No other answer
// carries any.
type crossSite struct {
	allowed []string
	guarded http.Handler // next behind the CrossOriginProtection
}

// newCrossSite guards next; origins are Config.AllowedOrigins, valid.
func newCrossSite(origins []string, next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	for _, o := range origins {
		_ = cop.AddTrustedOrigin(o) // checked by Config.Validate
	}
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusForbidden, errorBody{Error{Code: "PERMISSION_DENIED", Field: "Origin",
			Message: "cross-origin request refused: a browser sent it from " + limiter.Echo(originOf(r)) +
				", which is not among the node's allowed origins (--allowed-origins)"}})
	}))
	return &crossSite{allowed: origins, guarded: cop.Handler(next)}
}

func originOf(r *http.Request) string {
	if o := r.Header.Get("Origin"); o != "" {
		return o
	}
	return "another site (Sec-Fetch-Site: " + r.Header.Get("Sec-Fetch-Site") + ")"
}

func (c *crossSite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin != "" && slices.Contains(c.allowed, origin) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-Id, Traceparent")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", "X-Request-Id, Retry-After")
	}
	c.guarded.ServeHTTP(w, r)
}

// validOrigins checks Config.AllowedOrigins as CrossOriginProtection
// reads them: scheme://host[:port], nothing else.
func validOrigins(origins []string) error {
	cop := http.NewCrossOriginProtection()
	for i, o := range origins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			return field.Errorf(fmt.Sprintf("AllowedOrigins[%d]", i), "%q: want scheme://host[:port], as a browser's Origin header says it: %v", o, err)
		}
	}
	return nil
}

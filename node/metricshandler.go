package node

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsHandler serves the node's metrics, as GET /metrics on the HTTP
// address does, for a process that also serves them on an address of
// their own (cmd/node's --metrics-addr, upstream's PROMETHEUS_ADDR). It
// has no authentication: give it an address only scrapers reach.
func (n *Node) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{Registry: n.reg})
}

package node

import (
	"net/http"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/httpapi"
)

// RLConfigHandler serves envoyproxy/ratelimit's /rlconfig debug page from
// the Envoy rules this node has in force (httpapi.RLConfigHandler):
// cmd/node's ratelimit mode serves it on upstream's debug port.
func (n *Node) RLConfigHandler() http.Handler {
	return httpapi.RLConfigHandler(envoyrls.Viewer(n.envoyRLSLoaded))
}

package node

import (
	"time"

	"github.com/peerlimit/peerlimit/console"
	"github.com/peerlimit/peerlimit/route"
)

// The operator's console: the node samples its own metrics once a second
// for the page's charts (console.Sampler), and serves the page on its HTTP
// port (httpapi mounts console.Handler).

// sampleInterval is the console's resolution: one sample a second, which
// the page's rates are per.
const sampleInterval = time.Second

// consoleAPI is what the console's HTTP routes and gRPC calls ask of the
// node: an inspection of one key from the request path, every member's
// report and the cluster's top keys from the cluster's view.
type consoleAPI struct {
	*route.Queries
	*console.Cluster
}

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

func (n *Node) initConsole() (err error) {
	n.sampler, err = console.NewSampler(n.reg, console.DefaultKeep)
	return err
}

// sampleNow samples the metrics; the node runs it once a second (every).
// Reading the registry costs ~0.1 ms.
func (n *Node) sampleNow() {
	if err := n.sampler.Sample(n.cfg.Now()); err != nil {
		n.log.Warn("console: sampling metrics failed", "err", err)
	}
}

// consoleAPI is what the console's HTTP routes and gRPC calls ask of the
// node: an inspection of one key from the request path, every member's
// report and the cluster's top keys from the cluster's view.
type consoleAPI struct {
	*route.Queries
	*console.Cluster
}

// consoleView is the node's console API over its request path and peers.
func (n *Node) consoleView() consoleAPI {
	return consoleAPI{n.svc.Queries, console.NewCluster(n.cfg.ID, n.own, n.peers, n.svc.Peer, n.cfg.Now)}
}

package node

import (
	"context"
)

// The tracers of the packages that record spans, named by import path as
// OpenTelemetry's instrumentation scopes are.
const (
	routeTracer    = "github.com/peerlimit/peerlimit/route"
	envoyRLSTracer = "github.com/peerlimit/peerlimit/envoyrls"
	httpTracer     = "github.com/peerlimit/peerlimit/httpapi"
	peerTracer     = "github.com/peerlimit/peerlimit/peerrpc"
)

// stopTracing exports the spans still queued, within ctx, and stops the
// exporter.
func (n *Node) stopTracing(ctx context.Context) error { return n.traces.Shutdown(ctx) }

// expired is a context that has ended: what is left to export is dropped
// at once.
func expired() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

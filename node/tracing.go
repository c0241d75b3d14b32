package node

import (
	"context"

	"github.com/peerlimit/peerlimit/tracing"
)

// The tracers of the packages that record spans, named by import path as
// OpenTelemetry's instrumentation scopes are.
const (
	routeTracer    = "github.com/peerlimit/peerlimit/route"
	envoyRLSTracer = "github.com/peerlimit/peerlimit/envoyrls"
	httpTracer     = "github.com/peerlimit/peerlimit/httpapi"
	peerTracer     = "github.com/peerlimit/peerlimit/peerrpc"
)

// initTracing builds the span exporter of Config.Tracing (a provider that
// records nothing when it is off), named after the node unless told
// otherwise.
func (n *Node) initTracing() (err error) {
	tc := n.cfg.Tracing
	if tc.InstanceID == "" {
		tc.InstanceID = n.cfg.ID
	}
	if n.traces, err = tracing.New(context.Background(), tc); err != nil {
		return err
	}
	n.onUndo(func() { _ = n.stopTracing(expired()) })
	if tc.Enabled {
		n.log.Info("tracing on", "protocol", tc.Protocol, "endpoint", tc.Endpoint, "service", tc.ServiceName,
			"instance", tc.InstanceID, "sampling_rate", tc.SamplingRate)
	}
	return nil
}

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

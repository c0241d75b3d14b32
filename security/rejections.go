package security

import (
	"log/slog"
	"time"

	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/prometheus/client_golang/prometheus"
)

// API names the face a refused call came through: the label api of
// peerlimit_auth_failures_total.
type API uint8

const (
	APIGRPC API = iota // the public gRPC API
	APIHTTP            // the public HTTP API
	APIPeer            // the node-to-node Peer service
)

var apiLabels = [...]string{"grpc", "http", "peer"}

func (a API) String() string { return apiLabels[a] }

// Rejections counts refused calls in peerlimit_auth_failures_total{api,
// reason} and logs them, at most one warning a second per API: a scan or
// a misconfigured peer must not flood the log. A nil *Rejections does
// nothing.
type Rejections struct {
	log      *slog.Logger
	counters [len(apiLabels)][len(reasonLabels)]prometheus.Counter
	logs     [len(apiLabels)]logging.Gate
	now      func() time.Time
}

// NewRejections registers the counter with reg.
func NewRejections(reg prometheus.Registerer, log *slog.Logger) (*Rejections, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peerlimit",
		Name:      "auth_failures_total",
		Help:      "Calls refused for missing or wrong credentials, or (peer) an origin that is not a member, by api (grpc, http, peer) and reason.",
	}, []string{"api", "reason"})
	if err := reg.Register(vec); err != nil {
		return nil, err
	}
	r := &Rejections{log: log, now: time.Now}
	for a := range apiLabels {
		for reason := range reasonLabels {
			if reason != int(OK) {
				r.counters[a][reason] = vec.WithLabelValues(apiLabels[a], reasonLabels[reason])
			}
		}
	}
	return r, nil
}

// Reject counts one refused call and maybe logs it with attrs.
func (r *Rejections) Reject(api API, reason Reason, attrs ...any) {
	if r == nil || reason == OK || int(reason) >= len(reasonLabels) {
		return
	}
	r.counters[api][reason].Inc()
	if !r.logs[api].AllowAt(r.now()) {
		return
	}
	r.log.Warn("refused a call", append([]any{"api", api.String(), "reason", reason.String()}, attrs...)...)
}

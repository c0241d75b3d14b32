package node

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/xdsconfig"
)

// targetFunc is an xdsconfig.Target that answers as its function does.
type targetFunc func(xdsconfig.Update) error

func (f targetFunc) Apply(u xdsconfig.Update) error { return f(u) }

// Each configuration from the control plane counts as one load, as each
// update of upstream's xDS subscription does: put in force or resent
// alike, a success; refused, an error, which the subscriber still sees.
func TestEnvoyRLSXDSLoadsAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := envoyrls.NewMetrics(reg, envoyrls.DefaultConfig())
	require.NoError(t, err)
	refused := errors.New("rls.yaml:2: bad")
	answers := []error{nil, nil, refused}
	target := (&envoyRLS{metrics: m}).countLoads(targetFunc(func(xdsconfig.Update) error {
		err := answers[0]
		answers = answers[1:]
		return err
	}))
	assert.NoError(t, target.Apply(xdsconfig.Update{Version: "1"}))
	assert.NoError(t, target.Apply(xdsconfig.Update{Version: "1"}))
	assert.ErrorIs(t, target.Apply(xdsconfig.Update{Version: "2"}), refused)
	assert.Equal(t, 2.0, metrictest.Value(t, reg, "ratelimit_service_config_load_success"))
	assert.Equal(t, 1.0, metrictest.Value(t, reg, "ratelimit_service_config_load_error"))
}

package route_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testring"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/ring"
	"github.com/peerlimit/peerlimit/route"
)

// Invalid settings are errors naming the field, never replaced by
// defaults; so are missing dependencies.
func TestConfigValidate(t *testing.T) {
	good := route.DefaultConfig()
	require.NoError(t, good.Validate())
	assert.Equal(t, route.Config{MaxBatch: 1000, Fallback: route.FallbackLocal, MaxInflightForwards: 10_000, SettleWait: 250 * time.Millisecond,
		HoldTTL: 10 * time.Second}, good)
	for name, mutate := range map[string]func(*route.Config){
		"MaxBatch":            func(c *route.Config) { c.MaxBatch = 0 },
		"MaxInflightForwards": func(c *route.Config) { c.MaxInflightForwards = -1 },
		"SettleWait":          func(c *route.Config) { c.SettleWait = -time.Second },
		"Fallback":            func(c *route.Config) { c.Fallback = 7 },
		"HoldTTL":             func(c *route.Config) { c.HoldTTL = 0 },
	} {
		c := good
		mutate(&c)
		assert.ErrorContains(t, c.Validate(), name)
	}

	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
	deps := route.Deps{NodeID: "n1", Store: store, Now: time.Now}
	for name, mutate := range map[string]func(*route.Deps){
		"NodeID": func(d *route.Deps) { d.NodeID = "" },
		"Store":  func(d *route.Deps) { d.Store = nil },
		"Now":    func(d *route.Deps) { d.Now = nil },
		"Peers":  func(d *route.Deps) { d.Cluster = testring.OwnedBy(t, ring.Member{ID: "n2"}) },
	} {
		d := deps
		mutate(&d)
		_, err := route.NewService(good, d)
		assert.ErrorContains(t, err, name)
	}
	bad := good
	bad.MaxBatch = 0
	_, err = route.NewService(bad, deps)
	assert.ErrorContains(t, err, "MaxBatch")
	svc, err := route.NewService(good, deps)
	require.NoError(t, err)
	assert.NoError(t, svc.BatchTooLarge("checks", 1000))
	assert.ErrorIs(t, svc.BatchTooLarge("checks", 1001), route.ErrBatchTooLarge)
	assert.Equal(t, "local", route.FallbackLocal.String())
	for _, p := range []route.FallbackPolicy{route.FallbackLocal, route.FallbackAllow, route.FallbackDeny} {
		got, err := route.ParseFallbackPolicy(p.String())
		require.NoError(t, err)
		assert.Equal(t, p, got)
	}
	_, err = route.ParseFallbackPolicy("maybe")
	assert.ErrorContains(t, err, "want local, allow, deny or share")
}

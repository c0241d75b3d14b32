package lease_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/memnet"
	"github.com/peerlimit/peerlimit/lease"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
)

// Invalid settings are errors naming the field, never replaced by
// defaults; leases off is no Book at all.
func TestConfigValidate(t *testing.T) {
	good := lease.DefaultConfig()
	require.NoError(t, good.Validate())
	assert.Equal(t, lease.Config{Duration: 250 * time.Millisecond, MaxDuration: 5 * time.Second, MinHits: 8, MinRate: 1}, good)
	for name, mutate := range map[string]func(*lease.Config){
		"Duration": func(c *lease.Config) { c.Duration = time.Millisecond },
		"MinRate":  func(c *lease.Config) { c.MinRate = 0 },
	} {
		c := good
		mutate(&c)
		assert.ErrorContains(t, c.Validate(), name)
	}
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
	net := memnet.New(1, time.Second)
	t.Cleanup(net.Close)
	_, err = lease.New(good, lease.Deps{Store: store})
	assert.ErrorContains(t, err, "Peers")
	off := good
	off.Duration = 0
	b, err := lease.New(off, lease.Deps{Store: store, Peers: net.Join("n1")})
	require.NoError(t, err)
	assert.Nil(t, b, "off")
}

package node

import (
	"log/slog"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
)

// chores are the node's own periodic work, which no other package owns:
// freeing expired keys and reporting capacity, forgetting expired
// reservations, sampling the metrics for the console. Each runs on its
// own loop (startServing); none runs concurrently with itself.
type chores struct {
	store    *limiter.Store
	capacity *capacityReport // written by sweep only
	sampler  sampler
	now      func() time.Time
	log      *slog.Logger
}

// sampler is what samples the node's metrics for the console
// (console.Sampler).
type sampler interface {
	Sample(now time.Time) error
}

// sweep frees expired keys and reports the store's capacity; the node
// runs it every SweepInterval.
func (c *chores) sweep() {
	if freed := c.store.Sweep(c.now()); freed > 0 {
		c.log.Debug("swept expired keys", "freed", freed)
	}
	c.capacity.report(c.store.Stats())
}

// expireReservations forgets the reservations due now: a hold whose
// all-or-nothing coordinator died gives its hits back about a second
// after its expiry at worst. Nearly free while none are remembered.
func (c *chores) expireReservations() {
	if expired := c.store.Reservations().Expire(c.now()); expired > 0 {
		c.log.Debug("reservations expired unsettled", "expired", expired)
	}
}

// sample samples the metrics for the console's charts; the node runs it
// once a second. Reading the registry costs ~0.1 ms.
func (c *chores) sample() {
	if err := c.sampler.Sample(c.now()); err != nil {
		c.log.Warn("console: sampling metrics failed", "err", err)
	}
}

package cluster

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// isolation cuts one member off from every other, both ways, while on.
type isolation struct {
	id string
	on atomic.Bool
}

func (l *isolation) Gossip(from, to string) (bool, time.Duration) {
	return !(l.on.Load() && (from == l.id || to == l.id)), 0
}

// views keeps the first moment each member's views said something.
type views struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func (v *views) at(what string) time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.first[what]
}

func (v *views) note(what string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.first[what]; !ok {
		v.first[what] = time.Now()
	}
}

// A member cut off from the others knows it before they take its keys:
// they declare it dead after a suspicion their confirmations shorten and
// an agreement round, while its suspicions of them, confirmed by nobody,
// take the longest timeout. Its own probes fail with no word from the
// members it asked to help (memberlist's health score rises), and its
// own entry says CutOff from then until a probe succeeds again. Without
// it the cut-off member decided its keys undegraded while their heirs
// did too (the simulation's seed 322: a log key 12 of 11, silently).
func TestACutOffMemberKnowsBeforeTheOthersTakeItsKeys(t *testing.T) {
	for _, profile := range []Profile{ProfileLocal, ProfileLAN} {
		t.Run(string(profile), func(t *testing.T) { cutOffKnowsFirst(t, profile) })
	}
}

func cutOffKnowsFirst(t *testing.T, profile Profile) {
	synctest.Test(t, func(t *testing.T) {
		cut := &isolation{id: "n3"}
		network := NewMemNetwork(cut)
		seen := &views{first: map[string]time.Time{}}
		var nodes []*Cluster
		for _, id := range []string{"n1", "n2", "n3"} {
			var join []string
			if len(nodes) > 0 {
				join = []string{nodes[0].GossipAddr()}
			}
			c, err := Start(Config{ID: id, GRPCAddr: id + ":9090", Network: network, Join: join, Profile: profile,
				Logger: slog.New(slog.DiscardHandler),
				OnChange: func(view []Member) {
					for _, m := range view {
						switch {
						case m.ID == id && m.CutOff:
							seen.note(id + " cut off")
						case m.ID == id && !m.CutOff && !seen.at(id+" cut off").IsZero():
							seen.note(id + " whole again")
						case id == "n1" && m.ID == "n3" && m.State == StateFailed && !m.Unconfirmed:
							seen.note("n1 takes n3's keys")
						}
					}
				}})
			require.NoError(t, err)
			nodes = append(nodes, c)
		}
		defer func() {
			for _, c := range nodes {
				_ = c.Shutdown()
			}
			time.Sleep(5 * time.Second) // memberlist's probes outlive Shutdown by a timeout
		}()
		time.Sleep(5 * time.Second)
		for _, c := range nodes {
			require.Len(t, c.Members(), 3, "joined")
		}

		start := time.Now()
		cut.on.Store(true)
		time.Sleep(15 * time.Second)
		cutAt, takenAt := seen.at("n3 cut off"), seen.at("n1 takes n3's keys")
		require.False(t, takenAt.IsZero(), "the others confirm the cut-off member gone")
		require.False(t, cutAt.IsZero(), "the cut-off member says it is cut off")
		t.Logf("cut at 0; n3 knows after %v; n1 takes its keys after %v", cutAt.Sub(start), takenAt.Sub(start))
		require.True(t, cutAt.Before(takenAt), "n3 knows (%v) before n1 takes its keys (%v)", cutAt.Sub(start), takenAt.Sub(start))
		for _, c := range nodes[:2] {
			m, _ := stateOf(c, c.LocalID())
			require.False(t, m.CutOff, "%s, on the side that reaches a majority, is not cut off", c.LocalID())
		}

		cut.on.Store(false)
		time.Sleep(40 * time.Second)
		m, _ := stateOf(nodes[2], "n3")
		require.False(t, m.CutOff, "after the heal n3's probes succeed again")
		require.False(t, seen.at("n3 whole again").IsZero(), "and it said so")
	})
}

// The verdict's rule, step by step: a rise of the health score is not
// enough while any member is heard from (a member under load misses a
// nack, and a killed peer's probe fails); a rise and two probe intervals
// of silence are; a fall, or a word from anyone, ends it.
func TestSelfVerdict(t *testing.T) {
	const probe = 500 * time.Millisecond
	var v selfVerdict
	steps := []struct {
		score   int
		silence time.Duration
		cut     bool
		why     string
	}{
		{0, 10 * time.Second, false, "healthy, though nothing heard: a member alone"},
		{1, 200 * time.Millisecond, false, "a probe failed, nack missing, but a member was heard just now"},
		{1, 600 * time.Millisecond, false, "no new rise; still heard within two intervals"},
		{0, 700 * time.Millisecond, false, "a probe answered: the score fell to zero"},
		{2, 600 * time.Millisecond, false, "a rise, silence of 1.2 intervals"},
		{3, time.Second, true, "rising, and nobody heard for two intervals: cut off"},
		{7, 5 * time.Second, true, "the score at its cap, still silent"},
		{7, 100 * time.Millisecond, false, "a member heard from again (the heal)"},
		{7, 1500 * time.Millisecond, true, "silent again, no fall since the rise"},
		{6, 2 * time.Second, false, "a probe answered: the score fell"},
		{6, 3 * time.Second, false, "no rise since the fall"},
	}
	for i, st := range steps {
		require.Equal(t, st.cut, v.observe(st.score, st.silence, probe), "step %d: %s", i, st.why)
	}
}

package cluster

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
)

func startWithDigests(t *testing.T, id string, digests map[string]string, join ...string) *Cluster {
	t.Helper()
	c, err := Start(Config{
		ID: id, BindAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:1", Join: join, Profile: ProfileLocal, ConfigDigests: digests,
		Logger: slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", id),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown() })
	return c
}

// configOf is what c sees member id advertise, as text for messages.
func configOf(c *Cluster, id string) string {
	for _, m := range c.Members() {
		if m.ID == id {
			if m.Config == nil {
				return "nil"
			}
			return fmt.Sprint(m.Config)
		}
	}
	return "not a member"
}

// A member's digests are in its first message, and a change reaches
// every other member, and the member itself, by gossip.
func TestConfigDigestsReachTheOthers(t *testing.T) {
	first := map[string]string{"policies": "aaaaaaaaaaaa", "envoy_rls": "bbbbbbbbbbbb"}
	a := startWithDigests(t, "node-1", first)
	b := startWithDigests(t, "node-2", nil, a.GossipAddr())
	c := startWithDigests(t, "node-3", nil, a.GossipAddr())
	for _, o := range []*Cluster{b, c} {
		eventually(t, 5*time.Second, func() bool { return configOf(o, "node-1") == fmt.Sprint(first) },
			"%s sees node-1 with %s", o.LocalID, func() string { return configOf(o, "node-1") })
	}
	eventually(t, 5*time.Second, func() bool { return configOf(a, "node-2") == "map[]" },
		"no digests: an empty set, not an unknown one; node-1 sees node-2 with %s", func() string { return configOf(a, "node-2") })

	second := map[string]string{"policies": "cccccccccccc"}
	require.NoError(t, a.SetConfigDigests(second))
	for _, o := range []*Cluster{a, b, c} {
		eventually(t, 5*time.Second, func() bool { return configOf(o, "node-1") == fmt.Sprint(second) },
			"%s sees node-1 with %s", o.LocalID, func() string { return configOf(o, "node-1") })
	}
	require.NoError(t, a.SetConfigDigests(maps.Clone(second)), "unchanged: nothing to send")
}

// The worst case fits memberlist's metadata: the longest gRPC address,
// leaving, a boot, restored and a fault injected, and every source at its longest.
func TestConfigDigestsWorstCaseFitsTheMetadata(t *testing.T) {
	d := map[string]string{}
	for i := range MaxConfigSources {
		d[fmt.Sprintf("%0*d", MaxConfigSourceLen, i)] = strings.Repeat("f", MaxConfigDigestLen)
	}
	require.NoError(t, validateConfigDigests(d))
	grpc := strings.Repeat("h", maxGRPCAddrLen-len(":65535")) + ":65535"
	boot := NewBoot()
	b, err := json.Marshal(meta{GRPC: grpc, Leaving: true, Config: d, Boot: boot, Restored: true, FaultInjection: true})
	require.NoError(t, err)
	assert.LessOrEqual(t, len(b), memberlist.MetaMaxSize, "%s", b)
	t.Logf("worst case: %d of %d bytes", len(b), memberlist.MetaMaxSize)

	c := &Cluster{meta: meta{GRPC: grpc, Leaving: true, Config: d, Boot: boot, Restored: true, FaultInjection: true}}
	assert.Equal(t, b, (&delegate{c}).NodeMeta(memberlist.MetaMaxSize), "sent whole")
}

// What could overflow the metadata is refused, naming why, and changes
// nothing: the gRPC address must never be crowded out.
func TestSetConfigDigestsRefusesWhatCouldNotFit(t *testing.T) {
	a := startWithDigests(t, "node-1", map[string]string{"policies": "aaaaaaaaaaaa"})
	for why, digests := range map[string]map[string]string{
		"at most 4 sources, got 5":    {"a": "1", "b": "1", "c": "1", "d": "1", "e": "1"},
		"must be 1 to 16 bytes":       {"policies": strings.Repeat("f", 17)},
		`must be of [A-Za-z0-9_.:-]`:  {"policies": `a"b`},
		`source "": must be 1 to 16 `: {"": "1"},
	} {
		assert.ErrorContains(t, a.SetConfigDigests(digests), why)
	}
	assert.Equal(t, "map[policies:aaaaaaaaaaaa]", configOf(a, "node-1"))

	_, err := Start(Config{ID: "x", BindAddr: "127.0.0.1:0", GRPCAddr: strings.Repeat("h", 300) + ":1",
		ConfigDigests: map[string]string{"p": "é"}})
	require.Error(t, err)
	assert.ErrorContains(t, err, "GRPCAddr must be at most 261 bytes")
	assert.ErrorContains(t, err, `ConfigDigests: digest of "p": must be of`)
}

// A member that sends no digests at all is unknown, not different; one
// that sends an empty set serves nothing, and differs from a member that
// serves something.
func TestConfigDiffers(t *testing.T) {
	assert.Nil(t, parseMeta([]byte(`{"grpc":"h:1"}`)).Config, "a member older than digests")
	assert.NotNil(t, parseMeta([]byte(`{"grpc":"h:1","cfg":{}}`)).Config)

	want := map[string]string{"policies": "aaa", "envoy_rls": "bbb"}
	for _, tc := range []struct {
		config  map[string]string
		differs []string
	}{
		{nil, nil},
		{map[string]string{"policies": "aaa", "envoy_rls": "bbb"}, nil},
		{map[string]string{}, []string{"envoy_rls", "policies"}},
		{map[string]string{"policies": "aaa", "envoy_rls": "ccc"}, []string{"envoy_rls"}},
		{map[string]string{"policies": "aaa", "envoy_rls": "bbb", "other": "x"}, []string{"other"}},
	} {
		assert.Equal(t, tc.differs, Member{Config: tc.config}.ConfigDiffers(want), "%v", tc.config)
	}
	assert.Nil(t, Member{Config: map[string]string{}}.ConfigDiffers(nil), "neither serves anything")
}

// Once leaving, a change is kept but not sent: memberlist ignores this
// member's own alive messages after a leave, and waiting for their
// broadcast would stall the caller (a reload during shutdown).
func TestSetConfigDigestsWhileLeavingSendsNothing(t *testing.T) {
	a := startWithDigests(t, "node-1", nil)
	b := startWithDigests(t, "node-2", nil, a.GossipAddr())
	eventually(t, 5*time.Second, func() bool { return len(a.Members()) == 2 }, "join")
	require.NoError(t, b.Leave(t.Context()))
	start := time.Now()
	require.NoError(t, b.SetConfigDigests(map[string]string{"policies": "aaaaaaaaaaaa"}))
	assert.Less(t, time.Since(start), configUpdateTimeout/2, "no wait for a broadcast that never comes")
	require.NoError(t, b.Shutdown())
	require.NoError(t, b.SetConfigDigests(map[string]string{"policies": "bbbbbbbbbbbb"}), "after shutdown: nothing to do")
}

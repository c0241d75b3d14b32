package envoyrls_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
	"github.com/peerlimit/peerlimit/rpc"
)

// Every node a test starts must be gone, goroutines and all, when it ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// See node's TestMain: memberlist's probe of a silent peer ends by
		// itself, later than goleak's retries.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

// The node's access guard spells the service's method prefix out; it must
// be the generated one.
func TestGuardPrefixIsTheService(t *testing.T) {
	assert.Equal(t, "/"+rlspb.RateLimitService_ServiceDesc.ServiceName+"/", rpc.EnvoyRLSPrefix)
}

const clusterConfig = `domain: edge
descriptors:
  # Exact: a log, 20 per minute per client.
  - key: client
    algorithm: SLIDING_WINDOW_LOG
    rate_limit: {unit: minute, requests_per_unit: 20}
  # Nested: per route, then per user under it.
  - key: route
    value: /checkout
    descriptors:
      - key: user
        algorithm: SLIDING_WINDOW_LOG
        rate_limit: {unit: hour, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000}
---
# The peerlimit extensions, across owners.
domain: bundle
all_or_nothing: true
descriptors:
  - key: user
    algorithm: SLIDING_WINDOW_LOG
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: org
    algorithm: SLIDING_WINDOW_LOG
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: tokens
    charge_over_limit: true
    rate_limit: {unit: hour, requests_per_unit: 10}
`

type rlsCluster struct {
	c       *testcluster.Cluster
	clients []rlspb.RateLimitServiceClient // by node
}

func startRLSCluster(t *testing.T, n int) *rlsCluster {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rls.yaml")
	require.NoError(t, os.WriteFile(path, []byte(clusterConfig), 0o600))
	c := testcluster.New(t, n, func(cfg *node.Config) {
		cfg.EnvoyRLSConfig, cfg.EnvoyRLS.Headers = path, true
	})
	rc := &rlsCluster{c: c}
	for i := range n {
		conn, err := grpc.NewClient(c.Node(i).GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		rc.clients = append(rc.clients, rlspb.NewRateLimitServiceClient(conn))
	}
	return rc
}

func descriptor(kvs ...string) *rlscommon.RateLimitDescriptor {
	d := &rlscommon.RateLimitDescriptor{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// owner is the node that owns descriptor d's state in domain, as node i's
// ring says.
func (rc *rlsCluster) owner(i int, domain string, d *rlscommon.RateLimitDescriptor) string {
	return rc.c.Node(i).Ring().Owner(envoyrls.Key(domain, d.GetEntries(), 1024)).ID
}

// Envoys call every node at once: a log descriptor's limit holds exactly
// over the cluster, since each descriptor is decided by its owner.
func TestClusterExactAcrossNodes(t *testing.T) {
	rc := startRLSCluster(t, 3)
	const perNode, limit = 15, 20
	var mu sync.Mutex
	ok, over := 0, 0
	var wg sync.WaitGroup
	for i, cl := range rc.clients {
		wg.Go(func() {
			for j := range perNode {
				resp, err := cl.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge",
					Descriptors: []*rlscommon.RateLimitDescriptor{descriptor("client=acme")}})
				if !assert.NoError(t, err, "node %d call %d", i, j) {
					return
				}
				mu.Lock()
				if resp.GetOverallCode() == rlspb.RateLimitResponse_OK {
					ok++
				} else {
					over++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, limit, ok, "exactly the limit passed, over 3 nodes")
	assert.Equal(t, 3*perNode-limit, over)
}

// One call with nested and plain descriptors whose owners differ: each is
// decided on its owner (forwarded, batched per owner) and the answer is
// per descriptor.
func TestClusterNestedDescriptorsOnTheirOwners(t *testing.T) {
	rc := startRLSCluster(t, 3)
	// Users whose nested descriptor and plain descriptor live on two
	// different nodes, neither of them node 0, which receives the calls.
	var user string
	for i := 0; i < 1000 && user == ""; i++ {
		u := fmt.Sprintf("u%d", i)
		a := rc.owner(0, "edge", descriptor("route=/checkout", "user="+u))
		b := rc.owner(0, "edge", descriptor("user="+u))
		if a != b && a != rc.c.Node(0).ID() && b != rc.c.Node(0).ID() {
			user = u
		}
	}
	require.NotEmpty(t, user)
	req := func() *rlspb.RateLimitRequest {
		return &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{
			descriptor("route=/checkout", "user="+user), descriptor("user=" + user), descriptor("route=/checkout")}}
	}
	for i := range 3 {
		resp, err := rc.clients[0].ShouldRateLimit(context.Background(), req())
		require.NoError(t, err)
		require.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode(), "call %d", i)
		sts := resp.GetStatuses()
		assert.Equal(t, uint32(2-i), sts[0].GetLimitRemaining())
		assert.Equal(t, uint32(3), sts[0].GetCurrentLimit().GetRequestsPerUnit())
		assert.Equal(t, rlspb.RateLimitResponse_RateLimit_HOUR, sts[0].GetCurrentLimit().GetUnit())
		assert.Equal(t, uint32(999_999-i), sts[1].GetLimitRemaining())
		assert.Nil(t, sts[2].GetCurrentLimit(), "a placeholder level alone matches nothing")
		assert.Nil(t, resp.GetDynamicMetadata(), "no owner was unreachable")
	}
	// Asked of another node, the same counts: the owners hold them.
	resp, err := rc.clients[1].ShouldRateLimit(context.Background(), req())
	require.NoError(t, err)
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.GetOverallCode())
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.GetStatuses()[0].GetCode())
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetStatuses()[1].GetCode())
	hdr := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		hdr[h.GetKey()] = h.GetValue()
	}
	assert.Equal(t, `"route_/checkout.user";q=3;w=3600`, hdr["RateLimit-Policy"])
	assert.Regexp(t, `^"route_/checkout.user";r=0;t=\d+$`, hdr["RateLimit"])
	assert.NotEmpty(t, hdr["Retry-After"])
}

// all_or_nothing, charge_over_limit and is_negative_hits on descriptors
// that two other nodes own: the request's checks count on both owners or
// on neither, and charges and refunds reach the owner's count.
func TestClusterAllOrNothingAndDebtOnTheirOwners(t *testing.T) {
	rc := startRLSCluster(t, 3)
	self := rc.c.Node(0).ID()
	var user, org, tokens *rlscommon.RateLimitDescriptor
	for i := 0; i < 1000 && (user == nil || org == nil || tokens == nil); i++ {
		u, o, tk := descriptor(fmt.Sprintf("user=u%d", i)), descriptor(fmt.Sprintf("org=o%d", i)), descriptor(fmt.Sprintf("tokens=t%d", i))
		if a, b := rc.owner(0, "bundle", u), rc.owner(0, "bundle", o); user == nil && a != b && a != self && b != self {
			user, org = u, o
		}
		if tokens == nil && rc.owner(0, "bundle", tk) != self {
			tokens = tk
		}
	}
	require.NotNil(t, user)
	require.NotNil(t, tokens)
	call := func(i int, ds ...*rlscommon.RateLimitDescriptor) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := rc.clients[i].ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "bundle", Descriptors: ds})
		require.NoError(t, err)
		require.Nil(t, resp.GetDynamicMetadata(), "no owner was unreachable")
		return resp
	}
	with := func(d *rlscommon.RateLimitDescriptor, hits uint64, negative bool) *rlscommon.RateLimitDescriptor {
		c := descriptor()
		c.Entries, c.HitsAddend, c.IsNegativeHits = d.Entries, wrapperspb.UInt64(hits), negative
		return c
	}
	for i := range 2 {
		assert.Equal(t, rlspb.RateLimitResponse_OK, call(0, user, org).GetOverallCode(), "call %d", i)
	}
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call(0, user, org).GetOverallCode())
	assert.Equal(t, uint32(3), call(1, with(org, 0, false)).GetStatuses()[0].GetLimitRemaining(), "the org counted 2, not 3")

	// A charge past the limit, then a refund, each asked of another node.
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call(0, with(tokens, 15, false)).GetOverallCode())
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call(2, with(tokens, 0, false)).GetOverallCode(), "in debt: 15 of 10")
	st := call(1, with(tokens, 10, true)).GetStatuses()[0]
	assert.Equal(t, rlspb.RateLimitResponse_OK, st.GetCode())
	assert.Equal(t, uint32(5), st.GetLimitRemaining(), "15 − 10 refunded")
}

// duration_until_reset comes from the owner's decision, carried back over
// the forward: a counter's is the rest of its fixed window (here the hour)
// on whichever node the descriptor is asked, not the whole window the
// adapter falls back to when an owner does not say.
func TestClusterDurationUntilResetCrossesTheForward(t *testing.T) {
	rc := startRLSCluster(t, 3)
	var d *rlscommon.RateLimitDescriptor
	for i := 0; i < 1000 && d == nil; i++ {
		if c := descriptor(fmt.Sprintf("user=d%d", i)); rc.owner(0, "edge", c) != rc.c.Node(0).ID() {
			d = c
		}
	}
	require.NotNil(t, d, "no descriptor owned away from node 0")
	const hour = time.Hour
	for i, cl := range rc.clients {
		before := time.Now()
		resp, err := cl.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge",
			Descriptors: []*rlscommon.RateLimitDescriptor{d}})
		after := time.Now()
		require.NoError(t, err, "node %d", i)
		require.Nil(t, resp.GetDynamicMetadata(), "node %d: no owner was unreachable", i)
		got := resp.GetStatuses()[0].GetDurationUntilReset().AsDuration()
		end := before.Truncate(hour).Add(hour) // the counter's windows are epoch-aligned, as Truncate is
		if after.Truncate(hour) != before.Truncate(hour) {
			t.Logf("node %d: the call crossed an hour boundary; its duration (%v) may be either window's", i, got)
			continue
		}
		// The owner reads its clock in whole milliseconds: the rest of its
		// window can be up to 1 ms more than the exact rest.
		assert.LessOrEqual(t, got, end.Sub(before)+time.Millisecond, "node %d: at most the rest of the hour when asked", i)
		assert.GreaterOrEqual(t, got, end.Sub(after)-time.Millisecond, "node %d: at least the rest of the hour when answered", i)
	}
}

// A node dies: every call to the survivors is still answered, flagged
// degraded while the failure is being detected (the fallback decides),
// and not once the ring has moved the key to a live owner.
func TestClusterNodeKillKeepsAnswering(t *testing.T) {
	rc := startRLSCluster(t, 3)
	victim := rc.c.Node(2).ID()
	var d *rlscommon.RateLimitDescriptor
	for i := 0; i < 1000 && d == nil; i++ {
		if c := descriptor(fmt.Sprintf("client=c%d", i)); rc.owner(0, "edge", c) == victim {
			d = c
		}
	}
	require.NotNil(t, d)
	req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{d}, HitsAddend: 0}
	resp, err := rc.clients[0].ShouldRateLimit(context.Background(), req)
	require.NoError(t, err)
	require.Nil(t, resp.GetDynamicMetadata())

	rc.c.Kill(2)
	degraded, total := 0, 0
	deadline := time.Now().Add(20 * time.Second)
	for {
		healed := true
		for _, cl := range rc.clients[:2] {
			resp, err := cl.ShouldRateLimit(context.Background(), req)
			require.NoError(t, err, "a survivor failed to answer")
			total++
			require.Len(t, resp.GetStatuses(), 1)
			if resp.GetDynamicMetadata().GetFields()[envoyrls.DegradedKey].GetBoolValue() {
				degraded++
				healed = false
			}
		}
		if healed && rc.owner(0, "edge", d) != victim && rc.owner(1, "edge", d) != victim {
			break
		}
		require.True(t, time.Now().Before(deadline), "still degraded 20s after the kill")
		time.Sleep(10 * time.Millisecond) // pacing the load, not waiting for an outcome
	}
	t.Logf("%d answers after the kill, %d degraded while the failure was detected, none failed", total, degraded)
	assert.Positive(t, degraded, "the first answers after the kill came from the fallback")
	assert.Positive(t, degradedMetric(t, rc.c.Node(0))+degradedMetric(t, rc.c.Node(1)), "and were counted")
}

var degradedLine = regexp.MustCompile(`(?m)^peerlimit_envoy_rls_degraded_total\{domain="edge"\} (\d+)$`)

func degradedMetric(t *testing.T, n *node.Node) int {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := degradedLine.FindSubmatch(raw)
	if m == nil {
		return 0
	}
	v, _ := strconv.Atoi(string(m[1]))
	return v
}

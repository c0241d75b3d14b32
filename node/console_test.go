package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/console"
	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	return resp.StatusCode
}

// The console's questions, asked of a node that neither received the
// checks nor owns the key: the cluster's top keys merge every member's
// summary, and an inspection reads the owner's state, consuming nothing.
func TestConsoleTopAndInspectAcrossTheCluster(t *testing.T) {
	c := testcluster.New(t, 3, nil)
	ingress, asked := c.Node(0), c.Node(1)
	key := keyOwnedBy(t, ingress, "node-2", "tenant")
	ctx := context.Background()
	for i := range 7 { // 5 allowed, 2 denied, each forwarded to node-2
		resp, err := apiClient(t, ingress).Check(ctx, &pb.CheckRequest{Key: key, Limit: 5, WindowMs: hourish.Milliseconds(),
			Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG})
		require.NoError(t, err)
		require.Equal(t, i < 5, resp.Allowed)
	}
	for i := range 3 { // a few lighter keys, to be listed below it
		_, err := apiClient(t, ingress).Check(ctx, &pb.CheckRequest{Key: fmt.Sprintf("light:%d", i), Limit: 5, WindowMs: 60_000})
		require.NoError(t, err)
	}

	top, err := apiClient(t, asked).Top(ctx, &pb.TopRequest{N: 2})
	require.NoError(t, err)
	assert.EqualValues(t, 3, top.MembersAsked)
	assert.EqualValues(t, 3, top.MembersAnswered)
	require.Len(t, top.Checks, 2)
	assert.Equal(t, &pb.HotKey{Key: key, Count: 7}, top.Checks[0])
	require.Len(t, top.Denials, 1)
	assert.Equal(t, &pb.HotKey{Key: key, Count: 2}, top.Denials[0])

	var httpTop httpapi.Top
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+asked.HTTPAddr()+"/v1/top?n=1", &httpTop))
	assert.Equal(t, []httpapi.HotKey{{Key: key, Count: 7}}, httpTop.Checks)

	got, err := apiClient(t, asked).Inspect(ctx, &pb.InspectRequest{Key: key, Limit: 5})
	require.NoError(t, err)
	assert.Equal(t, "node-2", got.Owner)
	assert.NotEmpty(t, got.Replica, "replication is on by default: the heir holds a replica")
	assert.NotEqual(t, "node-2", got.Replica)
	require.Len(t, got.Limits, 1)
	v := got.Limits[0]
	assert.Equal(t, pb.Algorithm_SLIDING_WINDOW_LOG, v.Algorithm)
	assert.EqualValues(t, 5, v.Count)
	assert.Len(t, v.EntriesUnixMs, 5)
	assert.Greater(t, v.NextAllowMs, int64(3_500_000), "full for the hour")

	var hi httpapi.Inspect
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+asked.HTTPAddr()+"/v1/inspect?key="+url.QueryEscape(key), &hi))
	require.Len(t, hi.Limits, 1)
	assert.EqualValues(t, 5, hi.Limits[0].Count, "inspecting consumed nothing")
	assert.Nil(t, hi.Limits[0].NextAllowMS, "no limit given")

	var bad struct{ Error httpapi.Error }
	assert.Equal(t, http.StatusBadRequest, getJSON(t, "http://"+asked.HTTPAddr()+"/v1/inspect?key=", &bad))
	assert.Equal(t, "key", bad.Error.Field)
	assert.Equal(t, http.StatusBadRequest, getJSON(t, "http://"+asked.HTTPAddr()+"/v1/top?n=1000", &bad))
	assert.Equal(t, "n", bad.Error.Field)
	_, err = apiClient(t, asked).Inspect(ctx, &pb.InspectRequest{Key: key, Limit: 2, Hits: new(int64(3))})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}

// /v1/cluster lists every member with its samples, and keeps listing a
// killed one, as failed, with no samples and the reason.
func TestConsoleClusterViewShowsADeadMember(t *testing.T) {
	c := testcluster.New(t, 3, nil)
	asked := c.Node(0)
	var view httpapi.Cluster
	c.Eventually(10*time.Second, func() (bool, string) {
		view = httpapi.Cluster{}
		getJSON(t, "http://"+asked.HTTPAddr()+"/v1/cluster", &view)
		for _, m := range view.Members {
			if len(m.Samples) == 0 {
				return false, fmt.Sprintf("no samples from %s yet (%s)", m.ID, m.Error)
			}
		}
		return len(view.Members) == 3, fmt.Sprintf("%d members", len(view.Members))
	})
	assert.Equal(t, "node-0", view.Self)
	assert.EqualValues(t, 3, view.Top.MembersAnswered)

	c.Kill(2)
	c.Eventually(15*time.Second, func() (bool, string) {
		view = httpapi.Cluster{}
		getJSON(t, "http://"+asked.HTTPAddr()+"/v1/cluster", &view)
		for _, m := range view.Members {
			if m.ID == "node-2" {
				return m.State != "alive" && m.Error != "" && len(m.Samples) == 0, fmt.Sprintf("node-2: %s %q", m.State, m.Error)
			}
		}
		return false, "node-2 not listed"
	})
}

// Every series the console's sampler reads is registered by a node, with
// the label values it selects: a metric renamed in its own package fails
// here instead of blanking a chart of the page in silence.
func TestConsoleReadsRegisteredSeries(t *testing.T) {
	c := testcluster.New(t, 1, nil)
	families, err := metrictest.Scrape("http://" + c.Node(0).HTTPAddr() + "/metrics").Gather()
	require.NoError(t, err)
	labels := map[string]map[string]map[string]bool{} // name → label → values
	for _, mf := range families {
		byLabel := map[string]map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if byLabel[l.GetName()] == nil {
					byLabel[l.GetName()] = map[string]bool{}
				}
				byLabel[l.GetName()][l.GetValue()] = true
			}
		}
		labels[mf.GetName()] = byLabel
	}
	for _, s := range console.Reads {
		byLabel, ok := labels[s.Name]
		if !assert.True(t, ok, "the console reads %s, which no node registers", s.Name) {
			continue
		}
		for _, v := range s.Values {
			assert.True(t, byLabel[s.Label][v], "the console reads %s{%s=%q}, which a node does not export", s.Name, s.Label, v)
		}
	}
}

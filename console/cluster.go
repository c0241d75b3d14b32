package console

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/topk"
)

// Cluster is the console's view of the whole cluster: every member's
// report (its sampled rates and hot keys), asked of all at once, and the
// cluster's hot keys, merged from them. Safe for concurrent use.
type Cluster struct {
	self    string
	members Members
	peers   peer.Peers
	local   Reporter
	now     func() time.Time
}

// Members lists the members to ask (route.Cluster is one). Safe for
// concurrent use.
type Members interface {
	Members() []peer.Route
}

// Reporter answers this node's own report (route.Service, through
// peer.Handler's HandleReport).
type Reporter interface {
	HandleReport(ctx context.Context, origin string, req peer.ReportRequest) peer.Report
}

// NewCluster returns the console's view of the cluster seen from self,
// whose clock is now: members are asked through peers, self through
// local.
func NewCluster(self string, members Members, peers peer.Peers, local Reporter, now func() time.Time) *Cluster {
	return &Cluster{self: self, members: members, peers: peers, local: local, now: now}
}

// MemberReport is one member's report, or why it could not be had.
type MemberReport struct {
	Member peer.Route
	Report peer.Report
	Err    error
}

// Reports asks every member (this node answers itself) for its report,
// all at once, and returns one per member in the order of Members. A
// member that does not answer within ctx has Err set.
func (c *Cluster) Reports(ctx context.Context, req peer.ReportRequest) []MemberReport {
	members := c.members.Members()
	out := make([]MemberReport, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		out[i].Member = m
		if m.ID == c.self {
			out[i].Report = c.local.HandleReport(ctx, c.self, req)
			continue
		}
		wg.Go(func() { out[i].Report, out[i].Err = c.peers.Report(ctx, m, req) })
	}
	wg.Wait()
	return out
}

// TopKeys is the cluster's hot keys: every answering member's lists,
// merged.
type TopKeys struct {
	Since           time.Time
	Checks, Denials []topk.Entry
	MembersAsked    int
	MembersAnswered int
}

// MergeTop merges the hot keys of the members that answered into the n
// heaviest. A key is decided by its owner only, but for the faults that
// let another member decide it meanwhile (fallback, heir, gossip not yet
// converged), its counts add up across members; a member that did not
// list the key among its top n adds nothing for it, so such a key can be
// under-counted by at most that member's n-th count.
func MergeTop(reports []MemberReport, n int) TopKeys {
	out := TopKeys{MembersAsked: len(reports)}
	var checks, denials [][]topk.Entry
	for _, r := range reports {
		if r.Err != nil {
			continue
		}
		out.MembersAnswered++
		checks = append(checks, r.Report.HotKeys.Checks)
		denials = append(denials, r.Report.HotKeys.Denials)
		if out.Since.IsZero() || r.Report.HotKeys.Since.Before(out.Since) {
			out.Since = r.Report.HotKeys.Since
		}
	}
	out.Checks = topk.Top(topk.Merge(checks, make([]uint64, len(checks))), n)
	out.Denials = topk.Top(topk.Merge(denials, make([]uint64, len(denials))), n)
	return out
}

// Top returns the cluster's n hottest keys (1 ≤ n ≤ peer.MaxTop).
func (c *Cluster) Top(ctx context.Context, n int) (TopKeys, error) {
	if n < 1 || n > peer.MaxTop {
		return TopKeys{}, &limiter.ArgumentError{Field: "n", Reason: fmt.Sprintf("must be in [1, %d], got %d", peer.MaxTop, n)}
	}
	return MergeTop(c.Reports(ctx, peer.ReportRequest{Since: c.now(), Top: n}), n), nil
}

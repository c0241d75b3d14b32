package route

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/topk"
)

// This file is what the operator's console asks of the request path:
// inspecting a key on its owner, and every member's report (sampled rates
// and hot keys), merged into the cluster's top keys.

// InspectRequest asks for a key's state. Limit and Hits are optional
// (0: no next-allow time); Policy, if set, gives the limit and also
// selects its window and algorithm.
type InspectRequest struct {
	Key    string
	Limit  int64
	Hits   *int64 // nil: 1 with a limit
	Policy string
}

// InspectResult is a key's state on its owner.
type InspectResult struct {
	Key       string
	Owner     string
	Replica   string // "" when no member holds a replica
	Partition int
	// Limit and Hits are what NextAllow was computed for; Limit 0: none.
	Limit, Hits int64
	Limits      []limiter.KeyView
	// Leases are the budget leases the owner has lent on the key.
	Leases []peer.LeaseInfo
}

// Inspect reads req's key on its owner, here or through Peers, consuming
// nothing; it fails with ErrOwnerUnreachable when the owner cannot be
// asked, never with a guess.
func (s *Service) Inspect(ctx context.Context, req InspectRequest) (InspectResult, error) {
	q, filter, err := s.resolveInspect(req)
	if err != nil {
		return InspectResult{}, err
	}
	owner, local := s.owner(q.Key)
	var ov peer.OwnerView
	if local {
		ov, err = s.HandleInspect(ctx, s.deps.NodeID, q)
	} else {
		ov, err = s.deps.Peers.Inspect(ctx, owner, q)
		if err != nil && peer.CodeOf(err) != peer.InvalidArgument {
			err = fmt.Errorf("inspect %q: owner %s (%s): %w: %w", q.Key, owner.ID, owner.Addr, ErrOwnerUnreachable, err)
		}
	}
	if err != nil {
		return InspectResult{}, err
	}
	res := InspectResult{Key: q.Key, Owner: owner.ID, Partition: s.store.PartitionOf(q.Key), Limit: q.Limit, Hits: q.Hits,
		Limits: filterViews(ov.Limits, filter), Leases: ov.Leases}
	if local {
		res.Owner = s.deps.NodeID
	}
	if h, ok := s.heirOf(q.Key); ok {
		res.Replica = h.ID
	}
	return res, nil
}

// resolveInspect turns req into the owner's question and, for a policy,
// the one limit to show.
func (s *Service) resolveInspect(req InspectRequest) (peer.InspectQuery, *limiter.Request, error) {
	q := peer.InspectQuery{Key: req.Key, Limit: req.Limit}
	if req.Policy != "" {
		given := ""
		if req.Limit != 0 {
			given = "limit"
		}
		r, err := s.PolicyRequest(req.Policy, req.Key, req.Hits, given)
		if err != nil {
			return q, nil, err
		}
		q.Limit, q.Hits = r.Limit, r.Hits
		return q, &r, s.store.ValidateInspect(q.Key, q.Limit, q.Hits)
	}
	if req.Limit > 0 {
		q.Hits = 1
	}
	if req.Hits != nil {
		q.Hits = *req.Hits
	}
	return q, nil, s.store.ValidateInspect(q.Key, q.Limit, q.Hits)
}

// filterViews keeps the view of the policy's window and algorithm, or
// every view without a policy.
func filterViews(views []limiter.KeyView, policy *limiter.Request) []limiter.KeyView {
	if policy == nil {
		return views
	}
	var out []limiter.KeyView
	for _, v := range views {
		if v.Algorithm == policy.Algorithm && v.Window == policy.Window {
			out = append(out, v)
		}
	}
	return out
}

// HandleInspect implements Handler: read the key here, whatever this
// node's ring says.
func (s *Service) HandleInspect(_ context.Context, _ string, q peer.InspectQuery) (peer.OwnerView, error) {
	now := s.deps.Now()
	views, err := s.store.Inspect(now, q.Key, q.Limit, q.Hits)
	if err != nil {
		return peer.OwnerView{}, err
	}
	return peer.OwnerView{Limits: views, Leases: s.deps.Leases.On(now, q.Key)}, nil
}

// HandleReport implements Handler: this node's samples (Deps.Samples)
// and hot keys.
func (s *Service) HandleReport(_ context.Context, _ string, req peer.ReportRequest) peer.Report {
	var r peer.Report
	if s.deps.Samples != nil {
		r.Samples = s.deps.Samples.Since(req.Since)
	}
	r.HotKeys = s.store.HotKeys(s.deps.Now(), min(req.Top, MaxTop))
	return r
}

// MaxTop bounds the hot-key lists a report or Top returns.
const MaxTop = 100

// MemberReport is one member's report, or why it could not be had.
type MemberReport struct {
	Member peer.Route
	Report peer.Report
	Err    error
}

// Reports asks every member of the ring (this node answers itself)
// for its report, all at once, and returns one per member in the order of
// the ring. A member that does not answer within ctx has Err set.
func (s *Service) Reports(ctx context.Context, req peer.ReportRequest) []MemberReport {
	members := s.members()
	out := make([]MemberReport, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		out[i].Member = m
		if m.ID == s.deps.NodeID {
			out[i].Report = s.HandleReport(ctx, s.deps.NodeID, req)
			continue
		}
		wg.Go(func() { out[i].Report, out[i].Err = s.deps.Peers.Report(ctx, m, req) })
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

// Top returns the cluster's n hottest keys (1 ≤ n ≤ MaxTop).
func (s *Service) Top(ctx context.Context, n int) (TopKeys, error) {
	if n < 1 || n > MaxTop {
		return TopKeys{}, &limiter.ArgumentError{Field: "n", Reason: fmt.Sprintf("must be in [1, %d], got %d", MaxTop, n)}
	}
	return MergeTop(s.Reports(ctx, peer.ReportRequest{Since: s.deps.Now(), Top: n}), n), nil
}

package route

import (
	"context"
	"fmt"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// This file is what the operator's console asks of the request path:
// inspecting a key on its owner (Queries), and this member's report (its
// sampled rates and hot keys; package console merges every member's).

// Queries answers the console's questions about keys, consuming nothing.
// Safe for concurrent use.
type Queries struct{ *core }

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
	// Reservations are the reservations open on the key.
	Reservations []limiter.OpenReservation
}

// Inspect reads req's key on its owner, here or through Peers, consuming
// nothing; it fails with peer.ErrOwnerUnreachable when the owner cannot be
// asked, never with a guess.
func (s *Queries) Inspect(ctx context.Context, req InspectRequest) (InspectResult, error) {
	q, filter, err := s.resolveInspect(req)
	if err != nil {
		return InspectResult{}, err
	}
	owner, local := s.owner(q.Key)
	var ov peer.OwnerView
	if local {
		ov, err = s.inspectHere(q)
	} else {
		ov, err = s.deps.Peers.Inspect(ctx, owner, q)
		if err != nil && peer.CodeOf(err) != peer.InvalidArgument {
			err = fmt.Errorf("inspect %q: owner %s (%s): %w: %w", limiter.Echo(q.Key), owner.ID, owner.Addr, peer.ErrOwnerUnreachable, err)
		}
	}
	if err != nil {
		return InspectResult{}, err
	}
	res := InspectResult{Key: q.Key, Owner: owner.ID, Partition: s.store.Transfer().PartitionOf(q.Key), Limit: q.Limit, Hits: q.Hits,
		Limits: filterViews(ov.Limits, filter), Leases: ov.Leases, Reservations: ov.Reservations}
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
func (s *Queries) resolveInspect(req InspectRequest) (peer.InspectQuery, *limiter.Request, error) {
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
		return q, &r, s.store.Admin().ValidateInspect(q.Key, q.Limit, q.Hits)
	}
	if req.Limit > 0 {
		q.Hits = 1
	}
	if req.Hits != nil {
		q.Hits = *req.Hits
	}
	return q, nil, s.store.Admin().ValidateInspect(q.Key, q.Limit, q.Hits)
}

// filterViews keeps the view of the policy's window and algorithm, or
// every view without a policy.
func filterViews(views []limiter.KeyView, policy *limiter.Request) []limiter.KeyView {
	if policy == nil {
		return views
	}
	var out []limiter.KeyView
	for _, v := range views {
		if v.Algorithm == policy.Algorithm && v.Window == policy.Window && v.Calendar == policy.Calendar {
			out = append(out, v)
		}
	}
	return out
}

// HandleInspect implements Handler: read the key here, whatever this
// node's ring says.
func (s *Handler) HandleInspect(_ context.Context, _ string, q peer.InspectQuery) (peer.OwnerView, error) {
	return s.inspectHere(q)
}

// inspectHere reads q's key on this node's store, with the leases lent
// on it and the reservations open on it.
func (c *core) inspectHere(q peer.InspectQuery) (peer.OwnerView, error) {
	now := c.deps.Now()
	views, err := c.store.Admin().Inspect(now, q.Key, q.Limit, q.Hits)
	if err != nil {
		return peer.OwnerView{}, err
	}
	return peer.OwnerView{Limits: views, Leases: c.deps.Leases.On(now, q.Key),
		Reservations: c.store.Reservations().Open(q.Key, now, peer.MaxReservationsShown)}, nil
}

// HandleReport implements Handler: this node's samples (Deps.Samples)
// and hot keys.
func (s *Handler) HandleReport(_ context.Context, _ string, req peer.ReportRequest) peer.Report {
	r := peer.Report{Samples: s.deps.Samples.Since(req.Since)}
	r.HotKeys = s.store.Admin().HotKeys(s.deps.Now(), min(req.Top, peer.MaxTop))
	return r
}

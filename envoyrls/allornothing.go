package envoyrls

import (
	"context"
	"sync"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// A domain with all_or_nothing (Domain.AllOrNothing) counts the checks of
// a request that could refuse it on their own, those planned with all
// (hits ≥ 1, neither shadow mode nor quota mode, not a refund or a
// charge), all or nothing: they go to route.Service.CheckAll, which holds
// each on its owner and keeps them only if every one fits; and if the
// answer is OVER_LIMIT all the same (another descriptor is: a peek with
// nothing left, a request for more than its limit, requests_per_unit 0, a
// charge that went over, every quota-mode one), the checks it admitted
// are refunded (undoRefused). Peeks, refunds, charges, unlimited,
// shadow-mode and quota-mode descriptors are decided as in any domain.

// send decides reqs, the checks of plans: those planned all or nothing
// (two or more; one alone is all or nothing by itself) in one CheckAll,
// while the others go in one CheckBatch at the same time. The results
// are in reqs' order.
func (s *Server) send(ctx context.Context, reqs []limiter.Request, plans []plan) ([]peer.Result, error) {
	var group []int // indexes in reqs
	for _, p := range plans {
		if p.all && p.check >= 0 && reqs[p.check].Hits > 0 {
			group = append(group, p.check)
		}
	}
	if len(group) < 2 {
		return s.d.Checker.CheckBatch(ctx, reqs)
	}
	inGroup := make([]bool, len(reqs))
	all := make([]limiter.Request, len(group))
	for i, j := range group {
		inGroup[j], all[i] = true, reqs[j]
	}
	var rest []int
	others := make([]limiter.Request, 0, len(reqs)-len(group))
	for j, r := range reqs {
		if !inGroup[j] {
			rest, others = append(rest, j), append(others, r)
		}
	}
	var restRes []peer.Result
	var restErr error
	var wg sync.WaitGroup
	if len(others) > 0 {
		wg.Go(func() { restRes, restErr = s.d.Checker.CheckBatch(ctx, others) })
	}
	allRes, err := s.d.Checker.CheckAll(ctx, all)
	wg.Wait()
	if err == nil {
		err = restErr
	}
	if err != nil {
		return nil, err
	}
	results := make([]peer.Result, len(reqs))
	for i, j := range group {
		results[j] = allRes[i]
	}
	for i, j := range rest {
		results[j] = restRes[i]
	}
	return results, nil
}

// undoRefused refunds the all-or-nothing checks that were admitted when
// the answer is OVER_LIMIT all the same (refused), and answers them as
// refused: a refused request counts none of them. Best effort, as
// CheckAll's release: a refund that fails leaves its hits counted.
// Global shadow mode changes nothing here: it turns the answer OK, but
// counting stays what enforcing would count.
func (s *Server) undoRefused(ctx context.Context, plans []plan, reqs []limiter.Request, results []peer.Result) {
	var undo []limiter.Request
	for _, p := range plans {
		if p.all && p.check >= 0 && reqs[p.check].Hits > 0 && results[p.check].Decision.Allowed {
			r := reqs[p.check]
			r.Op = limiter.OpRefund
			undo = append(undo, r)
		}
	}
	if len(undo) == 0 || !s.refused(plans, results) {
		return
	}
	for _, p := range plans {
		if p.all && p.check >= 0 && reqs[p.check].Hits > 0 {
			d := &results[p.check].Decision
			d.Allowed, d.Remaining = false, min(d.Remaining+reqs[p.check].Hits, d.Limit)
		}
	}
	_, _ = s.d.Checker.CheckBatch(context.WithoutCancel(ctx), undo)
}

// refused reports whether the answer for plans, decided by results, is
// OVER_LIMIT (before global shadow mode), as overallCode decides it.
func (s *Server) refused(plans []plan, results []peer.Result) bool {
	failed, quota, quotaFailed := false, 0, 0
	for i := range plans {
		p := &plans[i]
		if p.rule == nil || p.rule.Unlimited {
			continue
		}
		p.decide(results)
		over := p.over() && !p.rule.ShadowMode
		switch {
		case s.cfg.QuotaMode || p.rule.QuotaMode:
			quota++
			if over {
				quotaFailed++
			}
		case over:
			failed = true
		}
	}
	return failed || (quota > 0 && quotaFailed == quota)
}

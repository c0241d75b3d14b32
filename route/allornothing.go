package route

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// CheckAll answers reqs all or nothing: every check is admitted and
// counted, or none counts. Each limit is first held (limiter.OpHold, for
// Config.HoldTTL) on its owner, all owners at once as CheckBatch sends
// them; if every hold was admitted, each is settled at its hits, which
// keeps them counted where they were; otherwise the admitted holds are
// released. Results are in order: when the batch is admitted, each
// check's decision; when it is not, every result is denied, and the
// checks that denied it are the ones with a retry after.
//
// What a failure in between leaves (docs/limiter.md): a hold whose
// release is lost (this node dies, or its owner is cut off) gives its
// hits back when it expires, after HoldTTL; a commit that is lost the
// same way gives the admitted request's hits back after HoldTTL too,
// which under-counts it on that limit. Neither ever counts a refused
// request past HoldTTL.
//
// The error is for the batch as a whole: too large, or an item that is
// not a check of at least one hit, or invalid (an *limiter.ArgumentError
// whose field names the item, checks[i].field).
func (s *Ingress) CheckAll(ctx context.Context, reqs []limiter.Request) ([]peer.Result, error) {
	if err := s.BatchTooLarge("checks", len(reqs)); err != nil {
		return nil, err
	}
	holds := make([]limiter.Request, len(reqs))
	for i, r := range reqs {
		if err := s.holdable(r); err != nil {
			return nil, ItemError(i, err)
		}
		holds[i] = r
		holds[i].Op, holds[i].TTL = limiter.OpHold, s.cfg.HoldTTL
	}
	held, err := s.CheckBatch(ctx, holds)
	if err != nil {
		return nil, err
	}
	admitted := true
	for _, h := range held {
		admitted = admitted && h.Err == nil && h.Decision.Allowed && h.Decision.Adjust != nil
	}
	closing := make([]limiter.Request, 0, len(reqs))
	for i, h := range held {
		if h.Err != nil || h.Decision.Adjust == nil || h.Decision.Adjust.Reservation == "" {
			continue
		}
		c := reqs[i]
		c.Op, c.Reservation, c.TTL = limiter.OpSettle, h.Decision.Adjust.Reservation, 0 // at its hits: kept where counted
		if !admitted {
			c.Op, c.Hits = limiter.OpRelease, 0
		}
		closing = append(closing, c)
	}
	if len(closing) > 0 {
		s.closeHolds(ctx, closing, admitted)
	}
	s.metrics.allOrNothing(admitted)
	return answerAll(reqs, held, admitted), nil
}

// closeHolds commits (admitted) or releases the holds closing names.
// Best effort: a close that fails leaves its hold to expire, which
// releases it, so a failed commit under-counts its request on that limit
// after HoldTTL; it is logged, with the first failure's reason.
func (s *Ingress) closeHolds(ctx context.Context, closing []limiter.Request, admitted bool) {
	results, err := s.CheckBatch(context.WithoutCancel(ctx), closing)
	failed := len(closing)
	if err == nil {
		failed = 0
		for _, r := range results {
			if r.Err != nil {
				failed++
				err = cmp.Or(err, r.Err)
			}
		}
	}
	if failed > 0 {
		s.log.Warn("an all-or-nothing batch could not close some of its holds; they expire after the hold TTL, released",
			"holds", len(closing), "failed", failed, "commit", admitted, "hold_ttl", s.cfg.HoldTTL, "err", err)
	}
}

// holdable refuses what an all-or-nothing batch cannot hold: anything but
// a check of at least one hit, or a request the store would refuse.
func (s *Ingress) holdable(r limiter.Request) error {
	switch {
	case r.Op != limiter.OpCheck:
		return &limiter.ArgumentError{Field: "op", Reason: "must be CHECK in an all-or-nothing batch, got " + r.Op.String()}
	case r.Hits < 1:
		return &limiter.ArgumentError{Field: "hits", Reason: fmt.Sprintf("must be at least 1 in an all-or-nothing batch, got %d (a peek counts nothing)", r.Hits)}
	}
	return s.store.Validate(r)
}

// ItemError names item i in err's field: checks[i].field.
func ItemError(i int, err error) error {
	var ae *limiter.ArgumentError
	if errors.As(err, &ae) {
		return &limiter.ArgumentError{Field: fmt.Sprintf("checks[%d].%s", i, ae.Field), Reason: ae.Reason}
	}
	return fmt.Errorf("checks[%d]: %w", i, err)
}

// answerAll turns the holds' answers into the batch's: as they were, with
// the tokens dropped, when admitted; else all denied.
func answerAll(reqs []limiter.Request, held []peer.Result, admitted bool) []peer.Result {
	out := make([]peer.Result, len(held))
	for i, h := range held {
		out[i] = h
		if h.Err != nil {
			continue
		}
		out[i].Decision.Adjust = nil
		if !admitted && h.Decision.Allowed {
			// Held, then released: refused for another limit, counting nothing.
			out[i].Decision.Allowed = false
			room := h.Decision.Limit
			if reqs[i].Algorithm == limiter.GCRA {
				room = reqs[i].BurstOrLimit() // a bucket holds its burst, which may pass its limit
			}
			out[i].Decision.Remaining = min(h.Decision.Remaining+reqs[i].Hits, room)
		}
	}
	return out
}

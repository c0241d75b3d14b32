package route

import (
	"fmt"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/policy"
)

// PolicyLookup resolves a policy name; *policy.Registry is one.
// Implementations must be safe for concurrent use and fast: every request
// naming a policy calls Lookup.
type PolicyLookup interface {
	Lookup(name string) (policy.Policy, bool)
}

// Policy returns the policy called name. An unknown name is an
// *limiter.ArgumentError for the field "policy": like an unknown algorithm,
// it is a request this node cannot serve as written, so INVALID_ARGUMENT
// (HTTP 400) rather than NOT_FOUND, and clients treat it as their mistake
// instead of a missing resource worth retrying elsewhere.
func (s *core) Policy(name string) (policy.Policy, error) {
	if _, none := s.deps.Policies.(noPolicies); none {
		return policy.Policy{}, &limiter.ArgumentError{Field: "policy",
			Reason: fmt.Sprintf("unknown policy %q: this node has no policies (see --policies)", limiter.Echo(name))}
	}
	p, ok := s.deps.Policies.Lookup(name)
	if !ok {
		return policy.Policy{}, &limiter.ArgumentError{Field: "policy",
			Reason: fmt.Sprintf("unknown policy %q", limiter.Echo(name))}
	}
	return p, nil
}

// PolicyRequest builds the request for key under the policy called name,
// consuming hits (nil means 1). given names a numeric field the caller also
// set ("" when none): a request gives either a policy or its numbers, and
// giving both is refused naming that field, since silently preferring
// either would hide a client's mistake.
//
// Policies are resolved here, on the node that received the request: a
// forwarded check carries the numbers, so owners never need the file.
func (s *core) PolicyRequest(name, key string, hits *int64, given string) (limiter.Request, error) {
	if given != "" {
		return limiter.Request{}, &limiter.ArgumentError{Field: given,
			Reason: fmt.Sprintf("must not be given with policy %q, which sets limit, window_ms, algorithm and burst", limiter.Echo(name))}
	}
	p, err := s.Policy(name)
	if err != nil {
		return limiter.Request{}, err
	}
	r := p.Request(key, 1)
	if hits != nil {
		r.Hits = *hits
	}
	return r, nil
}

// InlineField returns the first of a request's numeric fields that is set,
// or "": what a request naming a policy must leave out. The algorithm
// counts as set only when it is not the default (proto3 cannot tell an
// explicit SLIDING_WINDOW_COUNTER from none).
func InlineField(limit, windowMS int64, algorithmSet bool) string {
	switch {
	case limit != 0:
		return "limit"
	case windowMS != 0:
		return "window_ms"
	case algorithmSet:
		return "algorithm"
	}
	return ""
}

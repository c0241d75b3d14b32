// Package envoyrls serves Envoy's external rate limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, from every
// node of the cluster.
//
// Its configuration is the one envoyproxy/ratelimit users already write: a
// domain and a tree of descriptors, each with a key, an optional value and
// an optional rate_limit {unit, requests_per_unit, unit_multiplier}, plus a
// per-descriptor algorithm (the sliding window counter by default, the
// exact log for low limits):
//
//	domain: messaging
//	descriptors:
//	  - key: message_type
//	    value: marketing
//	    descriptors:
//	      - key: to_number
//	        algorithm: SLIDING_WINDOW_LOG
//	        rate_limit: {unit: day, requests_per_unit: 5}
//	  - key: to_number
//	    rate_limit: {unit: day, requests_per_unit: 100}
//
// A request's descriptor is matched level by level as envoyproxy/ratelimit
// does (Match); each matched descriptor becomes one limiter check keyed by
// the domain and the request's entries (Key), and the checks go through
// the node's request path, each to its key's owner, batched per owner.
// docs/envoy.md describes the format, the Envoy side and what differs from
// envoyproxy/ratelimit.
package envoyrls

import (
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/peerlimit/peerlimit/internal/ratelimitheader"
	"github.com/peerlimit/peerlimit/limiter"
)

// Unit is a rate limit's time unit, as the RLS API spells it.
type Unit = rlspb.RateLimitResponse_RateLimit_Unit

// UnitDuration is how long one unit lasts. Months and years are fixed
// lengths, as in envoyproxy/ratelimit: 30 and 365 days, so that a month's
// window slides like any other instead of resetting on the 1st.
func UnitDuration(u Unit) (time.Duration, bool) {
	switch u {
	case rlspb.RateLimitResponse_RateLimit_SECOND:
		return time.Second, true
	case rlspb.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute, true
	case rlspb.RateLimitResponse_RateLimit_HOUR:
		return time.Hour, true
	case rlspb.RateLimitResponse_RateLimit_DAY:
		return 24 * time.Hour, true
	case rlspb.RateLimitResponse_RateLimit_WEEK:
		return 7 * 24 * time.Hour, true
	case rlspb.RateLimitResponse_RateLimit_MONTH:
		return 30 * 24 * time.Hour, true
	case rlspb.RateLimitResponse_RateLimit_YEAR:
		return 365 * 24 * time.Hour, true
	}
	return 0, false
}

// Rule is the rate_limit of one configured descriptor. Immutable once
// loaded.
type Rule struct {
	Domain string
	// Path names the descriptor as envoyproxy/ratelimit's statistics do:
	// each level's key, "_value" when it has one, joined by dots
	// ("message_type_marketing.to_number"). It labels the metrics.
	Path string
	File string
	Line int
	// Name and Replaces are rate_limit.name and rate_limit.replaces: a
	// matched rule replaces the matched rules of the same request whose
	// Name it lists.
	Name     string
	Replaces []string
	// Unlimited rules are answered OK at once, with limit_remaining the
	// largest uint32, and never counted.
	Unlimited bool
	// RequestsPerUnit per Window. 0 refuses every request.
	RequestsPerUnit uint32
	Unit            Unit
	UnitMultiplier  uint32 // ≥ 1
	Window          time.Duration
	Algorithm       limiter.Algorithm
	// ShadowMode counts and reports the rule as usual, but its descriptor
	// is always answered OK.
	ShadowMode bool

	index   int                                // in Config.rules, for the metrics
	current *rlspb.RateLimitResponse_RateLimit // the answer's current_limit, shared
	header  string                             // the policy name, a Structured Field String
	policy  string                             // the RateLimit-Policy value
}

// finish computes what every answer of the rule shares.
func (r *Rule) finish(index int) {
	r.index = index
	if r.Unlimited {
		return
	}
	r.current = &rlspb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit}
	if r.UnitMultiplier != 1 {
		r.current.UnitMultiplier = wrapperspb.UInt32(r.UnitMultiplier)
	}
	name := r.Name
	if name == "" {
		name = r.Path
	}
	r.header, _ = ratelimitheader.String(ratelimitheader.Sanitize(name))
	r.policy = ratelimitheader.Policy(r.header, int64(r.RequestsPerUnit), r.Window)
}

// Domain is one domain's descriptor tree.
type Domain struct {
	Name string
	File string
	Line int
	root level
	// index in Config.domains, for the metrics.
	index int
}

// level is the descriptors at one depth under one parent.
type level struct {
	keys map[string]*keyNodes
}

// keyNodes are the descriptors of one key at one level: by exact value,
// by value prefix (a value ending in "*", longest prefix first), and the
// one without a value, which matches any.
type keyNodes struct {
	exact    map[string]*node
	prefixes []*node
	any      *node
}

type node struct {
	value    string // as written; "" for any
	prefix   string // value without its "*", for prefix nodes
	line     int
	rule     *Rule  // nil: a placeholder for nested descriptors
	children *level // nil: a leaf
}

// Config is every domain of a configuration. Immutable once loaded, and
// so safe for concurrent use.
type Config struct {
	// Source is the file or directory it was loaded from.
	Source string
	// Digest is "sha256:" and the hex SHA-256 of the files' names and
	// bytes, in order: nodes reporting the same digest answer alike.
	Digest  string
	byName  map[string]*Domain
	domains []*Domain
	rules   []*Rule
}

// Domain returns the domain called name, or nil.
func (c *Config) Domain(name string) *Domain { return c.byName[name] }

// Domains returns the domains in the order they were loaded.
func (c *Config) Domains() []*Domain { return c.domains }

// Rules returns every rule, in the order they were loaded.
func (c *Config) Rules() []*Rule { return c.rules }

// Entry is one key/value pair of a request's descriptor.
type Entry interface {
	GetKey() string
	GetValue() string
}

// Match returns the rule a request descriptor's entries select, or nil
// when none does. As in envoyproxy/ratelimit, the entries are matched
// level by level from the domain's top: at each level an entry selects
// the descriptor with its key and exactly its value, else the one with
// its key and the longest matching value prefix ("value*"), else the one
// with its key and no value. The first entry that selects nothing, or a
// descriptor without nested ones, ends the walk. The rule applies only if
// the walk reached the last entry and that descriptor has a rate_limit:
// a request with more (or fewer) entries than the configured depth
// matches nothing. No backtracking: an exact value without nested
// descriptors hides a wildcard sibling that has them.
//
// Match takes no lock and allocates nothing.
func Match[E Entry](d *Domain, entries []E) *Rule {
	if d == nil || len(entries) == 0 {
		return nil
	}
	lvl := &d.root
	for i, e := range entries {
		kn := lvl.keys[e.GetKey()]
		if kn == nil {
			return nil
		}
		v := e.GetValue()
		n := kn.exact[v]
		if n == nil {
			for _, p := range kn.prefixes {
				if strings.HasPrefix(v, p.prefix) {
					n = p
					break
				}
			}
		}
		if n == nil {
			n = kn.any
		}
		if n == nil {
			return nil
		}
		if i == len(entries)-1 {
			return n.rule
		}
		if n.children == nil {
			return nil
		}
		lvl = n.children
	}
	return nil
}

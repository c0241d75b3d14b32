// Package envoyrls serves Envoy's external rate limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, from every
// node of the cluster.
//
// Its configuration is the one envoyproxy/ratelimit users already write,
// every field of it with upstream's meaning: a domain and a tree of
// descriptors, each with a key, an optional value (wildcards included)
// and an optional rate_limit {unit, requests_per_unit}, and upstream's
// flags beside it (shadow_mode, quota_mode, metadata, detailed_metric,
// value_to_metric, share_threshold). peerlimit adds unit_multiplier, a
// per-descriptor algorithm (the sliding window counter by default, the
// exact log for low limits), charge_over_limit (usage reported after the
// fact counted past the limit, as debt) on a descriptor or a domain, and
// all_or_nothing on a domain (a request's checks counted all or none):
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
// A request's descriptor is matched level by level exactly as
// envoyproxy/ratelimit does (Match); each matched descriptor becomes one
// limiter check keyed by the domain and the request's entries (Key), and
// the checks go through the node's request path, each to its key's owner,
// batched per owner. The answer follows upstream's rules (answer.go), and
// is counted in upstream's statistics under their Prometheus names
// (stats.go). docs/envoy.md describes the format, the Envoy side and what
// differs from envoyproxy/ratelimit; compat_test.go checks it.
package envoyrls

import (
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
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

// Rule is the rate_limit of one configured descriptor, with the flags
// that go with it. Immutable once loaded.
type Rule struct {
	Domain string
	// Path names the descriptor as envoyproxy/ratelimit's statistics do:
	// each level's composite key (its key, or key_value when it has a
	// value), joined by dots ("message_type_marketing.to_number"). It
	// labels the metrics.
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
	UnitMultiplier  uint32        // ≥ 1
	Window          time.Duration // 0 with a Calendar
	Algorithm       limiter.Algorithm
	// Calendar (calendar: true beside unit, with time_zone, a peerlimit
	// extension) makes Unit a calendar unit: a day, a week, a month, a year
	// (an hour, a minute) that begins at its boundary in the zone, the
	// count starting again from 0 there, instead of upstream's fixed
	// windows (a month of 30 days). Zero: upstream's meaning.
	Calendar limiter.Calendar
	// Burst (burst beside unit, with algorithm: GCRA beside rate_limit, a
	// peerlimit extension) is a GCRA rule's bucket size: the most hits
	// admitted at once, while requests_per_unit per window is the rate it
	// refills at. Zero: requests_per_unit.
	Burst int64
	// ShadowMode counts and reports the rule as usual, but its descriptor
	// is always answered OK.
	ShadowMode bool
	// QuotaMode: the descriptor being over its limit fails the request
	// only when every quota-mode descriptor of the request is over.
	QuotaMode bool
	// ChargeOverLimit counts a descriptor's hits (hits_addend ≥ 1) even
	// past the limit, as debt (limiter.OpCharge): the descriptor's own
	// charge_over_limit, else its domain's (a peerlimit extension). A
	// charge that goes over is answered OVER_LIMIT; a peek stays a peek.
	ChargeOverLimit bool
	// DetailedMetric puts the request's values into the rule's statistics
	// key (upstream's detailed_metric).
	DetailedMetric bool
	// Metadata is merged into the answer's dynamic metadata when the
	// descriptor passes (Config.ResponseMetadata). Nil: none.
	Metadata *structpb.Struct

	index int     // in Config.rules, for the metrics
	nodes []*node // the descriptors from the domain's top down to the rule's own
	// perValueStats: the statistics key depends on the request's values
	// (detailed_metric, or value_to_metric on some level of the path).
	perValueStats bool
	// shares: some level of the path has share_threshold.
	shares  bool
	current *rlspb.RateLimitResponse_RateLimit // the answer's current_limit, shared
	header  string                             // the policy name, a Structured Field String
	policy  string                             // the RateLimit-Policy value
}

// capacity is the most hits one check of r can ever be allowed: a GCRA
// rule's burst when it gives one, else requests_per_unit.
func (r *Rule) capacity() int64 {
	if r.Burst != 0 {
		return r.Burst // only a GCRA rule keeps one (checkBurst)
	}
	return int64(r.RequestsPerUnit)
}

// span is the longest the rule's window lasts: its Window, or its
// calendar unit's longest period. Answers cap times at it.
func (r *Rule) span() time.Duration {
	if r.Calendar != 0 {
		return r.Calendar.Unit().Longest()
	}
	return r.Window
}

// calendarUnits are the RLS units that calendar: true makes calendar
// units. SECOND has none: a calendar second is UTC's, the same window.
var calendarUnits = map[Unit]limiter.CalendarUnit{
	rlspb.RateLimitResponse_RateLimit_MINUTE: limiter.CalendarMinute,
	rlspb.RateLimitResponse_RateLimit_HOUR:   limiter.CalendarHour,
	rlspb.RateLimitResponse_RateLimit_DAY:    limiter.CalendarDay,
	rlspb.RateLimitResponse_RateLimit_WEEK:   limiter.CalendarWeek,
	rlspb.RateLimitResponse_RateLimit_MONTH:  limiter.CalendarMonth,
	rlspb.RateLimitResponse_RateLimit_YEAR:   limiter.CalendarYear,
}

// finish computes what every answer of the rule shares.
func (r *Rule) finish(index int) {
	r.index = index
	r.perValueStats = r.DetailedMetric
	for _, n := range r.nodes {
		r.perValueStats = r.perValueStats || n.valueToMetric
		r.shares = r.shares || n.share
	}
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

// Domain is one domain's descriptor tree, with its settings.
type Domain struct {
	Name string
	File string
	Line int
	// AllOrNothing (all_or_nothing, a peerlimit extension) counts the
	// checks of a request that could refuse it on their own (hits ≥ 1,
	// neither shadow mode nor quota mode, not charged) all or nothing:
	// every one of them, or none (route.Service.CheckAll), and none when
	// the answer is OVER_LIMIT.
	AllOrNothing bool
	// ChargeOverLimit (charge_over_limit, a peerlimit extension) is the
	// default of the domain's rules' ChargeOverLimit, and applies to a
	// request's own limit.
	ChargeOverLimit bool
	root            *level
	// index in Config.domains, for the metrics.
	index int
}

// level is the descriptors at one depth under one parent, held as
// envoyproxy/ratelimit holds them: by composite key (the key, or
// key_value when the descriptor has a value), and the ones whose
// composite key holds a '*' also in a list, in the order they were read.
type level struct {
	nodes     map[string]*node
	wildcards []*node
}

func newLevel() *level { return &level{nodes: map[string]*node{}} }

type node struct {
	key   string // as written
	value string // as written; "" for none
	// composite is key, or key_value: what a request entry's key_value is
	// looked up by and what the statistics key is made of.
	composite string
	// glob is composite as a pattern, when it holds a '*'; nil otherwise.
	glob *glob
	file string
	line int
	rule *Rule // nil: a placeholder for nested descriptors
	// children is nil for a leaf.
	children *level
	// valueToMetric puts the request's value into the statistics key when
	// this level matched through a wildcard or as the key's default.
	valueToMetric bool
	// share: the values this wildcard matches share one counter (and one
	// statistics key): share_threshold.
	share bool
}

// RuleSet is every domain of a configuration. Immutable once loaded, and
// so safe for concurrent use.
type RuleSet struct {
	// Source is the file or directory it was loaded from.
	Source string
	// Digest is "sha256:" and the hex SHA-256 of the files' names (base
	// names: the same files mounted at another path digest alike) and
	// bytes, in order: nodes reporting the same digest answer alike.
	Digest  string
	byName  map[string]*Domain
	domains []*Domain
	rules   []*Rule
}

// Domain returns the domain called name, or nil.
func (c *RuleSet) Domain(name string) *Domain { return c.byName[name] }

// Domains returns the domains in the order they were loaded.
func (c *RuleSet) Domains() []*Domain { return c.domains }

// Rules returns every rule, in the order they were loaded.
func (c *RuleSet) Rules() []*Rule { return c.rules }

package envoyrls

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/peerlimit/peerlimit/limiter"
)

// levelFlags reads the flags that act on the descriptor's level, rate
// limit or not: value_to_metric and share_threshold.
func (f *descriptorFields) levelFlags(rd *reader, where string) {
	n := f.n
	if v := f.flags["value_to_metric"]; v != nil {
		n.valueToMetric, _ = rd.boolean(v, where, "value_to_metric")
	}
	if v := f.flags["share_threshold"]; v != nil {
		n.share, _ = rd.boolean(v, where, "share_threshold")
		if n.share && n.glob == nil {
			rd.fail(v.Line, where, "share_threshold needs a wildcard ('*') in the key or value, and %q has none: it makes the values the wildcard matches share one limit", n.composite)
		}
	}
}

// descriptorRule gives the placed descriptor its rule: its rate_limit,
// with the fields given beside it that act on it (algorithm, metadata,
// shadow_mode, quota_mode, detailed_metric), and asks the node whether it
// can serve the rule.
func (p *parser) descriptorRule(d *Domain, f *descriptorFields, where, path string, s scope) {
	n := f.n
	if f.rl != nil {
		if n.rule = readRateLimit(p.rd, d, f.rl, where, path); n.rule != nil {
			p.cfg.rules = append(p.cfg.rules, n.rule)
			n.rule.nodes = append(slices.Clip(s.nodes), n)
		}
	}
	if f.algo != nil {
		f.setAlgorithm(p.rd, where)
	}
	f.checkBurst(p.rd, where)
	f.ruleFlag(p.rd, where, "shadow_mode", func(r *Rule) { r.ShadowMode = true })
	f.ruleFlag(p.rd, where, "quota_mode", func(r *Rule) { r.QuotaMode = true })
	f.ruleFlag(p.rd, where, "detailed_metric", func(r *Rule) { r.DetailedMetric = true })
	f.chargeOverLimit(p.rd, d, where)
	if f.metadata != nil {
		f.setMetadata(p.rd, p.md.read(f.metadata, where), where)
	}
	if n.rule != nil && !n.rule.Unlimited && p.opts.Check != nil {
		p.checkRule(n.rule, f.rl, f.algo, where)
	}
}

// setAlgorithm applies the descriptor's algorithm to its rule. A
// rate_limit that failed to read has no rule and is not reported again.
func (f *descriptorFields) setAlgorithm(rd *reader, where string) {
	a, ok := rd.algorithm(f.algo, where)
	r := f.n.rule
	switch {
	case !ok:
	case r == nil && f.rl == nil:
		rd.fail(f.algo.Line, where, "algorithm needs a rate_limit on the same descriptor")
	case r != nil && r.Unlimited:
		rd.fail(f.algo.Line, where, "algorithm has no use with unlimited: true")
	case a == limiter.Concurrency:
		rd.fail(f.algo.Line, where, "algorithm CONCURRENCY is not served over Envoy's rate limit service: a slot is freed by RELEASE with its token, "+
			"and Envoy sends no token back (apply_on_stream_done asks again with the same descriptors, which would take another slot, and "+
			"hits_addend cannot be negative, envoyproxy/envoy#41219); limit concurrency through peerlimit's own API (ACQUIRE and RELEASE)")
	case r != nil && r.Calendar != 0 && a == limiter.SlidingWindowLog:
		rd.fail(f.algo.Line, where, "a calendar rate_limit is counted by SLIDING_WINDOW_COUNTER only: a log would hold every hit of the %s", strings.ToLower(r.Unit.String()))
	case r != nil && r.Calendar != 0 && a != limiter.SlidingWindowCounter:
		rd.fail(f.algo.Line, where, "a calendar rate_limit is counted by SLIDING_WINDOW_COUNTER only, not %s, which has no calendar periods", a)
	case r != nil:
		r.Algorithm = a
	}
}

// checkBurst refuses a rate_limit's burst (read by readRateLimit) on a
// rule that is not GCRA: it would act on nothing. An algorithm refused
// has been reported already, and is not reported again as burst's.
func (f *descriptorFields) checkBurst(rd *reader, where string) {
	r := f.n.rule
	if r == nil || r.Burst == 0 || r.Algorithm == limiter.GCRA {
		return
	}
	if f.algo == nil || f.algo.Value == r.Algorithm.String() {
		rd.fail(fieldLine(f.rl, "burst", f.rl.Line), where, "burst is only for algorithm: GCRA (beside rate_limit), not %s", r.Algorithm)
	}
	r.Burst = 0
}

// ruleFlag applies the descriptor's flag called name, when true, to its
// rule with set. A true flag that would act on nothing is refused: on a
// descriptor without a rate_limit (upstream ignores it there: it does not
// reach nested descriptors) or with an unlimited one. A rate_limit that
// failed to read has no rule and is not reported again.
func (f *descriptorFields) ruleFlag(rd *reader, where, name string, set func(*Rule)) {
	v := f.flags[name]
	if v == nil {
		return
	}
	on, ok := rd.boolean(v, where, name)
	r := f.n.rule
	switch {
	case !ok || !on:
	case r == nil && f.rl == nil:
		rd.fail(v.Line, where, "%s applies to this descriptor's own rate_limit, and it has none (it does not reach nested descriptors)", name)
	case r != nil && r.Unlimited:
		rd.fail(v.Line, where, "%s has no use with unlimited: true", name)
	case r != nil:
		set(r)
	}
}

// chargeOverLimit sets the rule's ChargeOverLimit: the descriptor's own
// charge_over_limit, true or false, else its domain's. Either value is
// refused on a descriptor without a rate_limit, or with an unlimited one:
// it would act on nothing (it does not reach nested descriptors).
func (f *descriptorFields) chargeOverLimit(rd *reader, d *Domain, where string) {
	r := f.n.rule
	if r != nil && !r.Unlimited {
		r.ChargeOverLimit = d.ChargeOverLimit
	}
	v := f.flags["charge_over_limit"]
	if v == nil {
		return
	}
	on, ok := rd.boolean(v, where, "charge_over_limit")
	switch {
	case !ok:
	case r == nil && f.rl == nil:
		rd.fail(v.Line, where, "charge_over_limit applies to this descriptor's own rate_limit, and it has none (it does not reach nested descriptors; to charge a whole domain, give it beside domain)")
	case r != nil && r.Unlimited:
		rd.fail(v.Line, where, "charge_over_limit has no use with unlimited: true")
	case r != nil:
		r.ChargeOverLimit = on
	}
}

// setMetadata gives the descriptor's metadata, md as read (nil when
// there is none or it failed to read), to its rule.
func (f *descriptorFields) setMetadata(rd *reader, md *structpb.Struct, where string) {
	r := f.n.rule
	switch {
	case md == nil:
	case r == nil && f.rl == nil:
		rd.fail(f.metadata.Line, where, "metadata is answered with this descriptor's own rate_limit, and it has none (it does not reach nested descriptors)")
	case r != nil && r.Unlimited:
		rd.fail(f.metadata.Line, where, "metadata has no use with unlimited: true (upstream never answers it)")
	case r != nil:
		r.Metadata = md
	}
}

// readRateLimit reads a rate_limit block into a rule, or nil when the
// block has a problem, reported to rd.
func readRateLimit(rd *reader, d *Domain, m *yaml.Node, where, path string) *Rule {
	if m.Kind != yaml.MappingNode {
		rd.fail(m.Line, where, "rate_limit must be a mapping, e.g. {unit: minute, requests_per_unit: 100}")
		return nil
	}
	errs := len(rd.errs)
	b := &rateLimitBlock{rd: rd, m: m, where: where,
		r: &Rule{Domain: d.Name, Path: path, File: rd.file, Line: m.Line, UnitMultiplier: 1}}
	rd.fields(m, where, b.field)
	b.check()
	if len(rd.errs) > errs {
		return nil
	}
	if !b.r.Unlimited && !b.setWindow() {
		return nil
	}
	return b.r
}

// rateLimitBlock is a rate_limit block being read: the rule so far, and
// what the checks after its fields need; its problems go to rd.
type rateLimitBlock struct {
	rd       *reader
	m        *yaml.Node
	where    string
	r        *Rule
	unitLine int
	haveRPU  bool
	// calendar and zone are calendar and time_zone, read: made into the
	// rule's Calendar with its unit (setWindow).
	calendar bool
	zone     string
	// replacesLines are the lines of r.Replaces' names.
	replacesLines []int
}

// field reads one field of the block into its rule.
func (b *rateLimitBlock) field(name string, k, v *yaml.Node) {
	rd, r, where := b.rd, b.r, b.where
	switch name {
	case "unit":
		b.unitLine = k.Line
		if u, ok := rd.unit(v, where); ok {
			r.Unit = u
		}
	case "requests_per_unit":
		n, ok := rd.uint32(v, where, name)
		if !ok {
			return
		}
		r.RequestsPerUnit, b.haveRPU = n, true
	case "unit_multiplier":
		n, ok := rd.uint32(v, where, name)
		if !ok {
			return
		}
		if n == 0 {
			rd.fail(v.Line, where, "unit_multiplier must be at least 1")
			return
		}
		r.UnitMultiplier = n
	case "unlimited":
		r.Unlimited, _ = rd.boolean(v, where, name)
	case "name":
		if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" || v.Value == "" {
			rd.fail(v.Line, where, "name must be a non-empty string")
			return
		}
		r.Name = v.Value
	case "replaces":
		r.Replaces, b.replacesLines = b.replaces(v)
	case "calendar":
		b.calendar, _ = rd.boolean(v, where, name)
	case "time_zone":
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" || v.Value == "" {
			rd.fail(v.Line, where, "time_zone must be an IANA time zone name, e.g. Europe/Paris")
			return
		}
		b.zone = v.Value
	case "burst":
		n, ok := rd.uint32(v, where, name)
		if !ok {
			return
		}
		if n == 0 {
			rd.fail(v.Line, where, "burst must be at least 1 (absent: requests_per_unit)")
			return
		}
		r.Burst = int64(n)
	default:
		rd.fail(k.Line, where, "unknown field %q in rate_limit; want unit, requests_per_unit, unit_multiplier, unlimited, name, replaces, calendar, time_zone, burst", name)
	}
}

// check checks the block's fields together, once all are read.
func (b *rateLimitBlock) check() {
	rd, m, r, where := b.rd, b.m, b.r, b.where
	for i, name := range r.Replaces {
		if name == r.Name {
			rd.fail(b.replacesLines[i], where, "rate_limit replaces itself (%q)", name)
		}
	}
	b.checkCalendar()
	if r.Unlimited {
		for _, f := range []string{"unit", "requests_per_unit", "unit_multiplier", "burst"} {
			if hasField(m, f) {
				rd.fail(fieldLine(m, f, m.Line), where, "%s has no use with unlimited: true", f)
			}
		}
	} else {
		if b.unitLine == 0 && !hasField(m, "unit") {
			rd.fail(m.Line, where, "unit is missing (second, minute, hour, day, week, month or year)")
		}
		if !b.haveRPU && !hasField(m, "requests_per_unit") {
			rd.fail(m.Line, where, "requests_per_unit is missing (0 refuses every request)")
		}
	}
}

// checkCalendar refuses what calendar: true and time_zone cannot go
// with: no calendar (a zone alone), unlimited, a unit of seconds, a
// unit_multiplier (a calendar limit counts one period: a month, not two).
func (b *rateLimitBlock) checkCalendar() {
	rd, m, r, where := b.rd, b.m, b.r, b.where
	switch {
	case !b.calendar && hasField(m, "time_zone"):
		rd.fail(fieldLine(m, "time_zone", m.Line), where, "time_zone is only for calendar: true")
	case !b.calendar:
	case r.Unlimited:
		rd.fail(fieldLine(m, "calendar", m.Line), where, "calendar has no use with unlimited: true")
	case r.Unit == rlspb.RateLimitResponse_RateLimit_SECOND:
		rd.fail(fieldLine(m, "calendar", m.Line), where, "calendar: true needs a unit of minute, hour, day, week, month or year; a second is the same window either way")
	case r.UnitMultiplier != 1:
		rd.fail(fieldLine(m, "unit_multiplier", m.Line), where, "unit_multiplier must be 1 (or absent) with calendar: true: a calendar limit counts one %s at a time", strings.ToLower(r.Unit.String()))
	}
}

// setWindow sets the rule's window, unit_multiplier units, or its
// calendar, and reports whether it could: a window fits in a
// time.Duration, a calendar's zone is known.
func (b *rateLimitBlock) setWindow() bool {
	rd, r := b.rd, b.r
	if b.calendar {
		c, err := limiter.NewCalendar(calendarUnits[r.Unit], b.zone)
		if err != nil {
			var ae *limiter.ArgumentError
			what := err.Error()
			if errors.As(err, &ae) {
				what = ae.Field + " " + ae.Reason
			}
			rd.fail(fieldLine(b.m, "time_zone", b.m.Line), b.where, "%s", what)
			return false
		}
		r.Calendar = c
		return true
	}
	unit, _ := UnitDuration(r.Unit)
	if int64(r.UnitMultiplier) > math.MaxInt64/int64(unit) {
		rd.fail(b.unitLine, b.where, "a window of %d %ss is too long", r.UnitMultiplier, strings.ToLower(r.Unit.String()))
		return false
	}
	r.Window = unit * time.Duration(r.UnitMultiplier)
	return true
}

// checkRule asks the node whether it can serve the rule, and names the
// line of the field it refuses.
func (p *parser) checkRule(r *Rule, rl, algo *yaml.Node, where string) {
	err := p.opts.Check(limiter.Request{Key: "envoy", Limit: int64(max(r.RequestsPerUnit, 1)), Window: r.Window, Algorithm: r.Algorithm,
		Calendar: r.Calendar, Burst: r.Burst, Hits: 1})
	if err == nil {
		return
	}
	line, what := rl.Line, err.Error()
	var ae *limiter.ArgumentError
	if errors.As(err, &ae) {
		what = ae.Reason
		switch ae.Field {
		case "limit":
			line, what = fieldLine(rl, "requests_per_unit", rl.Line), "requests_per_unit "+what
		case "window_ms":
			line, what = fieldLine(rl, "unit", rl.Line), fmt.Sprintf("the window (%s) in milliseconds %s", r.Window, what)
		case "burst":
			line, what = fieldLine(rl, "burst", rl.Line), "burst "+what
		case "algorithm":
			if algo != nil {
				line = algo.Line
			}
			what = "algorithm " + what
		}
	}
	p.rd.fail(line, where, "beyond this node's limits: %s", what)
}

// replaces reads rate_limit.replaces: the names, and the line of each.
func (b *rateLimitBlock) replaces(v *yaml.Node) (names []string, lines []int) {
	rd, where := b.rd, b.where
	if v.Kind != yaml.SequenceNode {
		rd.fail(v.Line, where, "replaces must be a list of {name: ...}")
		return nil, nil
	}
	for _, item := range v.Content {
		item = deref(item)
		if item.Kind != yaml.MappingNode {
			rd.fail(item.Line, where, "replaces must be a list of {name: ...}")
			continue
		}
		if name := b.replacesName(item); name != "" {
			names, lines = append(names, name), append(lines, item.Line)
		}
	}
	return names, lines
}

// replacesName reads one item of replaces, {name: ...}; "" when it has
// none that is usable, reported.
func (b *rateLimitBlock) replacesName(item *yaml.Node) string {
	rd, where := b.rd, b.where
	var name string
	rd.fields(item, where, func(f string, k, fv *yaml.Node) {
		if f != "name" {
			rd.fail(k.Line, where, "unknown field %q in replaces; want name", f)
			return
		}
		if fv.Kind != yaml.ScalarNode || fv.ShortTag() == "!!null" || fv.Value == "" {
			rd.fail(fv.Line, where, "replaces: name must be a non-empty string")
			return
		}
		name = fv.Value
	})
	if name == "" && !hasField(item, "name") {
		rd.fail(item.Line, where, "replaces: name is missing")
	}
	return name
}

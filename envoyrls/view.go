package envoyrls

import (
	"time"

	"github.com/peerlimit/peerlimit/envoyrls/rlconfig"
)

// View returns the rules as /rlconfig shows them, put in force at
// loadedAt (zero: never, a control plane's placeholder). A nil RuleSet
// (no Envoy rate limit service) has no view: nil.
func (c *RuleSet) View(loadedAt time.Time) *rlconfig.View {
	if c == nil {
		return nil
	}
	out := &rlconfig.View{Source: c.Source, Digest: c.Digest, Domains: []string{}, Rules: []rlconfig.Rule{}}
	if !loadedAt.IsZero() {
		out.LoadedAtMS = loadedAt.UnixMilli()
	}
	for _, d := range c.domains {
		out.Domains = append(out.Domains, d.Name)
		if d.AllOrNothing {
			out.AllOrNothingDomains = append(out.AllOrNothingDomains, d.Name)
		}
	}
	for _, r := range c.rules {
		rule := rlconfig.Rule{Key: r.Domain + "." + r.Path, Domain: r.Domain, Path: r.Path,
			Name: r.Name, Replaces: r.Replaces, Unit: r.Unit.String(), UnitMultiplier: r.UnitMultiplier,
			RequestsPerUnit: r.RequestsPerUnit, WindowMS: r.Window.Milliseconds(), Algorithm: r.Algorithm.String(), Burst: r.Burst,
			Unlimited: r.Unlimited, ShadowMode: r.ShadowMode, QuotaMode: r.QuotaMode, ChargeOverLimit: r.ChargeOverLimit,
			DetailedMetric: r.DetailedMetric, File: r.File, Line: r.Line}
		if r.Calendar != 0 {
			rule.Calendar, rule.TimeZone = true, r.Calendar.Zone()
		}
		out.Rules = append(out.Rules, rule)
	}
	return out
}

// Viewer adapts a source of the rules in force and the time they were
// put in force (nil rules: no service) to what httpapi serves
// (httpapi.Deps.EnvoyRLS, httpapi.RLConfigHandler), which takes views,
// not RuleSets, so as not to link gRPC through this package.
func Viewer(rules func() (*RuleSet, time.Time)) func() *rlconfig.View {
	return func() *rlconfig.View {
		rs, loadedAt := rules()
		return rs.View(loadedAt)
	}
}

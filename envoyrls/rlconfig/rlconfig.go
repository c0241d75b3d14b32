// Package rlconfig is the view of the Envoy rate limit service's rules in
// force that envoyproxy/ratelimit's /rlconfig debug page shows: as JSON
// (View, the answer of GET /v1/envoy-rls/config) and as upstream's text
// lines (View.WriteText). docs/envoy.md describes both.
//
// It holds values only and imports nothing but the standard library, so
// that httpapi can serve the view without linking gRPC: package envoyrls,
// which builds a View from its rules (RuleSet.View), serves Envoy's gRPC
// API and so imports gRPC.
package rlconfig

import (
	"fmt"
	"io"
	"time"
)

// View is the rules a node has in force. Digest is the configuration's
// SHA-256 (nodes showing the same one answer alike); LoadedAtMS is when
// this node put it in force, by its clock; 0 for a control plane's
// placeholder before its first configuration.
type View struct {
	Source     string   `json:"source"`
	Digest     string   `json:"digest"`
	LoadedAtMS int64    `json:"loaded_at_ms"`
	Domains    []string `json:"domains"`
	// AllOrNothingDomains are the domains with all_or_nothing (our
	// extension): a request's checks count on every limit or on none.
	AllOrNothingDomains []string `json:"all_or_nothing_domains,omitempty"`
	Rules               []Rule   `json:"rules"`
}

// Rule is one configured rate_limit. Key is upstream's full key, the
// domain and the descriptor path (Path: each level's key, or key_value,
// joined by dots), as its /rlconfig and statistics name it. Unit is the
// RLS API's name (SECOND … YEAR; UNKNOWN for an unlimited rule), WindowMS
// the unit times UnitMultiplier.
type Rule struct {
	Key             string   `json:"key"`
	Domain          string   `json:"domain"`
	Path            string   `json:"path"`
	Name            string   `json:"name,omitempty"`
	Replaces        []string `json:"replaces,omitempty"`
	Unit            string   `json:"unit"`
	UnitMultiplier  uint32   `json:"unit_multiplier"`
	RequestsPerUnit uint32   `json:"requests_per_unit"`
	WindowMS        int64    `json:"window_ms"`
	Algorithm       string   `json:"algorithm"`
	Unlimited       bool     `json:"unlimited"`
	ShadowMode      bool     `json:"shadow_mode"`
	QuotaMode       bool     `json:"quota_mode"`
	// ChargeOverLimit: hits are charged even past the limit, as debt
	// (charge_over_limit, our extension: the rule's, else its domain's).
	ChargeOverLimit bool `json:"charge_over_limit,omitempty"`
	// Calendar: unit is a calendar unit in TimeZone (calendar: true and
	// time_zone, our extension); window_ms is then 0.
	Calendar bool   `json:"calendar,omitempty"`
	TimeZone string `json:"time_zone,omitempty"`
	// Burst: a GCRA rule's bucket size (burst, our extension); absent:
	// requests_per_unit.
	Burst          int64  `json:"burst,omitempty"`
	DetailedMetric bool   `json:"detailed_metric"`
	File           string `json:"file"`
	Line           int    `json:"line"`
}

// WriteText writes v as upstream's /rlconfig does, one line per rule, in
// the order loaded:
//
//	messaging.message_type_marketing.to_number: unit=DAY requests_per_unit=5, shadow_mode: false
//
// and after upstream's fields, always in this order, peerlimit's own:
// quota_mode, unit_multiplier, algorithm, and unlimited, for a calendar
// rule its zone (", calendar: Europe/Paris"), and for a GCRA rule with a
// burst the burst (", burst: 50"). Comment lines
// (#) first say where the rules come from, their digest and when they
// were put in force.
func (v *View) WriteText(w io.Writer) error {
	loadedAt := "never (no configuration yet)"
	if v.LoadedAtMS != 0 {
		loadedAt = time.UnixMilli(v.LoadedAtMS).UTC().Format(time.RFC3339Nano)
	}
	if _, err := fmt.Fprintf(w, "# source: %s\n# digest: %s\n# loaded_at: %s\n", v.Source, v.Digest, loadedAt); err != nil {
		return err
	}
	for _, r := range v.Rules {
		calendar := ""
		if r.Calendar {
			calendar = ", calendar: " + r.TimeZone
		}
		if r.Burst != 0 {
			calendar += fmt.Sprintf(", burst: %d", r.Burst)
		}
		_, err := fmt.Fprintf(w, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t, unit_multiplier: %d, algorithm: %s, unlimited: %t%s\n",
			r.Key, r.Unit, r.RequestsPerUnit, r.ShadowMode, r.QuotaMode, r.UnitMultiplier, r.Algorithm, r.Unlimited, calendar)
		if err != nil {
			return err
		}
	}
	return nil
}

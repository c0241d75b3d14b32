package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/limiter"
)

// GET /v1/envoy-rls/config is envoyproxy/ratelimit's /rlconfig debug
// page: the Envoy rate limit service's rules this node has in force, as
// JSON (EnvoyRLSConfig), or with ?format=text one line per rule in
// upstream's shape, so that the two can be compared and diffed between
// nodes. docs/envoy.md describes both.

// EnvoyRLSConfig is the answer of GET /v1/envoy-rls/config. Digest is
// the configuration's SHA-256 (nodes showing the same one answer alike);
// LoadedAtMS is when this node put it in force, by its clock; 0 for a
// control plane's placeholder before its first configuration.
type EnvoyRLSConfig struct {
	Source     string   `json:"source"`
	Digest     string   `json:"digest"`
	LoadedAtMS int64    `json:"loaded_at_ms"`
	Domains    []string `json:"domains"`
	// AllOrNothingDomains are the domains with all_or_nothing (our
	// extension): a request's checks count on every limit or on none.
	AllOrNothingDomains []string       `json:"all_or_nothing_domains,omitempty"`
	Rules               []EnvoyRLSRule `json:"rules"`
}

// EnvoyRLSRule is one configured rate_limit. Key is upstream's full key,
// the domain and the descriptor path (Path: each level's key, or
// key_value, joined by dots), as its /rlconfig and statistics name it.
// Unit is the RLS API's name (SECOND … YEAR; UNKNOWN for an unlimited
// rule), WindowMS the unit times UnitMultiplier.
type EnvoyRLSRule struct {
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
	Calendar       bool   `json:"calendar,omitempty"`
	TimeZone       string `json:"time_zone,omitempty"`
	DetailedMetric bool   `json:"detailed_metric"`
	File           string `json:"file"`
	Line           int    `json:"line"`
}

func (h *handler) envoyRLSConfig(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if format != "" && format != "json" && format != "text" {
		writeError(w, &limiter.ArgumentError{Field: "format", Reason: `must be "json" or "text", got ` + strconv.Quote(format)})
		return
	}
	rules, loadedAt := h.deps.EnvoyRLS()
	if rules == nil {
		writeNoEnvoyRLS(w)
		return
	}
	cfg := envoyRLSConfigJSON(rules, loadedAt)
	if format == "text" {
		serveEnvoyRLSText(w, cfg)
		return
	}
	writeJSON(w, http.StatusOK, cfg)
}

// RLConfigHandler serves envoyproxy/ratelimit's debug page, GET /rlconfig
// on its debug port, from rules (nil: no Envoy rate limit service): the
// text of GET /v1/envoy-rls/config?format=text. The ratelimit mode serves
// it on DEBUG_HOST:DEBUG_PORT, without authentication, as upstream does:
// it shows the limits, which Envoy's callers see in every answer anyway.
func RLConfigHandler(rules func() (*envoyrls.RuleSet, time.Time)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		rs, loadedAt := rules()
		if rs == nil {
			writeNoEnvoyRLS(w)
			return
		}
		serveEnvoyRLSText(w, envoyRLSConfigJSON(rs, loadedAt))
	})
}

func writeNoEnvoyRLS(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, errorBody{Error{Code: "NOT_FOUND",
		Message: "this node serves no Envoy rate limit service: it was started without its configuration"}})
}

func serveEnvoyRLSText(w http.ResponseWriter, cfg EnvoyRLSConfig) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_ = writeEnvoyRLSText(w, cfg) // the client may be gone; nothing to do
}

// envoyRLSConfigJSON converts the rules in force, put in force at
// loadedAt (zero: never, a placeholder).
func envoyRLSConfigJSON(rs *envoyrls.RuleSet, loadedAt time.Time) EnvoyRLSConfig {
	out := EnvoyRLSConfig{Source: rs.Source, Digest: rs.Digest, Domains: []string{}, Rules: []EnvoyRLSRule{}}
	if !loadedAt.IsZero() {
		out.LoadedAtMS = loadedAt.UnixMilli()
	}
	for _, d := range rs.Domains() {
		out.Domains = append(out.Domains, d.Name)
		if d.AllOrNothing {
			out.AllOrNothingDomains = append(out.AllOrNothingDomains, d.Name)
		}
	}
	for _, r := range rs.Rules() {
		rule := EnvoyRLSRule{Key: r.Domain + "." + r.Path, Domain: r.Domain, Path: r.Path,
			Name: r.Name, Replaces: r.Replaces, Unit: r.Unit.String(), UnitMultiplier: r.UnitMultiplier,
			RequestsPerUnit: r.RequestsPerUnit, WindowMS: r.Window.Milliseconds(), Algorithm: r.Algorithm.String(),
			Unlimited: r.Unlimited, ShadowMode: r.ShadowMode, QuotaMode: r.QuotaMode, ChargeOverLimit: r.ChargeOverLimit,
			DetailedMetric: r.DetailedMetric, File: r.File, Line: r.Line}
		if r.Calendar != 0 {
			rule.Calendar, rule.TimeZone = true, r.Calendar.Zone()
		}
		out.Rules = append(out.Rules, rule)
	}
	return out
}

// writeEnvoyRLSText writes cfg as upstream's /rlconfig does, one line per
// rule, in the order loaded:
//
//	messaging.message_type_marketing.to_number: unit=DAY requests_per_unit=5, shadow_mode: false
//
// and after upstream's fields, always in this order, peerlimit's own:
// quota_mode, unit_multiplier, algorithm, and unlimited, and for a
// calendar rule its zone (", calendar: Europe/Paris"). Comment lines
// (#) first say where the rules come from, their digest and when they
// were put in force.
func writeEnvoyRLSText(w io.Writer, cfg EnvoyRLSConfig) error {
	loadedAt := "never (no configuration yet)"
	if cfg.LoadedAtMS != 0 {
		loadedAt = time.UnixMilli(cfg.LoadedAtMS).UTC().Format(time.RFC3339Nano)
	}
	if _, err := fmt.Fprintf(w, "# source: %s\n# digest: %s\n# loaded_at: %s\n", cfg.Source, cfg.Digest, loadedAt); err != nil {
		return err
	}
	for _, r := range cfg.Rules {
		calendar := ""
		if r.Calendar {
			calendar = ", calendar: " + r.TimeZone
		}
		_, err := fmt.Fprintf(w, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t, unit_multiplier: %d, algorithm: %s, unlimited: %t%s\n",
			r.Key, r.Unit, r.RequestsPerUnit, r.ShadowMode, r.QuotaMode, r.UnitMultiplier, r.Algorithm, r.Unlimited, calendar)
		if err != nil {
			return err
		}
	}
	return nil
}

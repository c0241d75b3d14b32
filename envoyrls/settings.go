package envoyrls

import (
	"errors"

	"github.com/peerlimit/peerlimit/internal/field"
)

// Config are how a node answers, beside what its configuration files
// say: the --envoy-rls-* flags. Each of envoyproxy/ratelimit's settings
// that changes an answer has one here, named after it.
type Config struct {
	// Headers adds the IETF RateLimit-Policy and RateLimit fields of the
	// most restrictive descriptor to every answer's
	// response_headers_to_add, and Retry-After to OVER_LIMIT answers.
	Headers bool
	// MergeDomains lets several files define one domain (LoadOptions);
	// upstream's MERGE_DOMAIN_CONFIG.
	MergeDomains bool
	// ResponseMetadata answers every call with dynamic metadata, laid out
	// as upstream's RESPONSE_DYNAMIC_METADATA: the domain, each
	// descriptor's entries and hits, and the merged metadata of the
	// descriptors that passed.
	ResponseMetadata bool
	// ShadowMode answers every call OK, whatever its descriptors are;
	// their statuses still say OVER_LIMIT (upstream's SHADOW_MODE): a
	// way to run peerlimit beside the limiter in force before trusting
	// it.
	ShadowMode bool
	// QuotaMode makes every descriptor not unlimited a quota-mode one
	// (upstream's QUOTA_MODE): a call fails only when all are over.
	QuotaMode bool
	// NearLimitRatio: a hit counts in ratelimit_service_rate_limit_near_limit
	// when it lands above floor(requests_per_unit × NearLimitRatio), and
	// at or under the limit (upstream's NEAR_LIMIT_RATIO). In (0, 1].
	NearLimitRatio float64
	// MaxStatsKeys bounds the statistics keys that come from request
	// values (detailed_metric, value_to_metric, a request's own limit)
	// the node keeps series for, over its life, since every one is a
	// Prometheus series that stays. Past it, such a descriptor is
	// counted under its rule's configured key, and
	// peerlimit_envoy_rls_stats_keys_overflow_total says how often.
	MaxStatsKeys int
	// ResponseTimeMilliseconds makes ratelimit_service_response_time_seconds
	// observe milliseconds, its buckets too, under the same name: upstream's
	// PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS, which drops its mapping's
	// scale: 0.001, and Envoy Gateway's mapping, which has none. Panels
	// made for either read the unit they were made for.
	ResponseTimeMilliseconds bool
}

// DefaultConfig are upstream's defaults: no headers, no merging, no
// metadata, no global modes, near the limit above 80 %, and room for
// 10 000 statistics keys from request values.
func DefaultConfig() Config {
	return Config{NearLimitRatio: 0.8, MaxStatsKeys: 10_000}
}

// Validate reports every setting out of range, each naming its field.
func (s Config) Validate() error {
	var errs []error
	if !(s.NearLimitRatio > 0 && s.NearLimitRatio <= 1) {
		errs = append(errs, field.Errorf("NearLimitRatio", "must be in (0, 1], got %v", s.NearLimitRatio))
	}
	if s.MaxStatsKeys < 0 {
		errs = append(errs, field.Errorf("MaxStatsKeys", "must be ≥ 0, got %d", s.MaxStatsKeys))
	}
	return errors.Join(errs...)
}

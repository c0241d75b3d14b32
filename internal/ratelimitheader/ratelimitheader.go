// Package ratelimitheader formats the IETF RateLimit header fields, draft
// "RateLimit header fields for HTTP" (draft-ietf-httpapi-ratelimit-headers-11,
// whose syntax is unchanged from -10), as the Go client's middleware and the
// Envoy rate limit service send them:
//
//	RateLimit-Policy: "default";q=100;w=60
//	RateLimit: "default";r=41;t=30
//
// Each field is a Structured Field List (RFC 9651) of one Item whose value
// is the policy name as a String. No partition key (pk) is sent: keys are
// often addresses or credentials.
package ratelimitheader

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Field names.
const (
	PolicyField = "RateLimit-Policy"
	Field       = "RateLimit"
	RetryAfter  = "Retry-After"
)

// String serializes s as a Structured Field String (RFC 9651, 3.3.3):
// printable ASCII, quoted, with '"' and '\' escaped.
func String(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("byte %#x at %d: a Structured Field String is printable ASCII", c, i)
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), nil
}

// Sanitize returns s with every byte a Structured Field String cannot hold
// replaced by '_', so that String(Sanitize(s)) never fails. For names taken
// from configuration, where a header is better than none.
func Sanitize(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] < 0x20 || b[j] > 0x7e {
					b[j] = '_'
				}
			}
			return string(b)
		}
	}
	return s
}

// Policy is the RateLimit-Policy value of the policy called name (already
// serialized by String): quota q units per window w. w is in seconds and
// omitted when the window is not a whole number of seconds: the draft has
// no sub-second windows, and w is optional.
func Policy(name string, quota int64, window time.Duration) string {
	p := name + ";q=" + strconv.FormatInt(quota, 10)
	if window > 0 && window%time.Second == 0 {
		p += ";w=" + strconv.FormatInt(int64(window/time.Second), 10)
	}
	return p
}

// Value is the RateLimit value: r units remain, and t seconds is the
// horizon (see T). remaining below zero is sent as 0.
func Value(name string, remaining, t int64) string {
	return name + ";r=" + strconv.FormatInt(max(remaining, 0), 10) + ";t=" + strconv.FormatInt(t, 10)
}

// T is the t parameter of a decision, in whole seconds rounded up:
//   - allowed: resetAfter (the time until the key's whole quota is back if
//     nothing else is spent), capped at the window. The draft's t is the
//     time until more quota is available (-10), or within which no more
//     than r can be used (-11). Both algorithms only give quota back as
//     time passes, so spending r within t ≤ w stays within the limit; the
//     cap matters for the sliding window counter, whose state lasts up to
//     two windows;
//   - denied: retryAfter, at least 1: the time after which the same
//     request would be allowed if no other traffic came. Send the same
//     value as Retry-After (the draft asks that Retry-After not end before
//     t).
func T(allowed bool, resetAfter, retryAfter, window time.Duration) int64 {
	if allowed {
		return min(CeilSeconds(resetAfter), max(CeilSeconds(window), 1))
	}
	return max(CeilSeconds(retryAfter), 1)
}

// CeilSeconds is d in whole seconds, rounded up; 0 for d ≤ 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1
}

// Package limiter implements the rate-limiting algorithms of peerlimit (two
// sliding windows and GCRA) and the sharded in-memory store that holds
// their state.
//
// Sliding window counter: time is cut into fixed windows aligned to the Unix
// epoch (window id = floor(t / W)). A key keeps the count of the current and
// of the previous window. At elapsed time e into the current window the
// estimated number of requests in the rolling window is
//
//	estimate = prev × (W − e)/W + curr
//
// and a request of n hits is allowed iff floor(estimate) + n ≤ limit. For
// n = 1 this is the seeds' "estimate < limit", because the limit is an
// integer. Memory per key is constant.
//
// Calendar windows (calendar.go): a counter may count per calendar period
// (a minute, an hour, a day, an ISO week, a month, a year) in a named time
// zone instead of per sliding window; its count starts again at each
// boundary. Its state is the counter's, the window id being the period's
// start, and its unit and zone are part of its identity.
//
// Sliding window log: a key keeps the timestamp of every allowed hit (never
// of a denied one). The window at time T is the half-open interval (T − W, T],
// as in the seed's Lua script (ZREMRANGEBYSCORE 0 (T−W) removes a timestamp
// exactly W old). A request of n hits is allowed iff count + n ≤ limit.
// Memory per key grows with the limit, 4 bytes per admitted hit, which is why
// the log's limit is capped (Config.MaxLogLimit).
//
// GCRA (gcra.go): a bucket of B hits (Request.Burst, or the limit) that
// drains at Limit per Window, kept as one theoretical arrival time TAT (Unix
// ns) per key. With T = Window/Limit rounded up to a whole ns and level =
// max(0, TAT − now), a request of n hits is allowed iff max(TAT, now) + n·T
// − now ≤ B·T, and then TAT = max(TAT, now) + n·T. It answers the level in
// hits before (ceil(level/T)), the hits that still fit after
// (floor((B·T − level)/T)), the exact retry time (the excess over B·T), the
// time until the bucket is empty (reset) and until one more hit fits
// (refill). Its buckets are kept apart from the windows' states (a map of
// their own), and their levels add across members in a handoff as counter
// counts do. docs/limiter.md, "GCRA", states every rule.
//
// The store never reads a clock: every call takes the time of the decision,
// so that the edge of the system (the node that receives a request) owns the
// clock and tests can drive time precisely. Time is kept in whole
// milliseconds, but GCRA's, in nanoseconds (an emission interval may be a
// microsecond).
package limiter

// Package limiter implements the two sliding-window rate-limiting algorithms
// of peerlimit and the sharded in-memory store that holds their state.
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
// The store never reads a clock: every call takes the time of the decision,
// so that the edge of the system (the node that receives a request) owns the
// clock and tests can drive time precisely. Time is kept in whole
// milliseconds.
package limiter

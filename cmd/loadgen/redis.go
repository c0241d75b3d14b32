package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// logScript is the sliding window log of seed 001 (slidingWindow.lua),
// exactly as the seed writes it: a sorted set per key, scored by the
// request's time in milliseconds; window in seconds. Its members are
// "<now>-<math.random()>": Redis 7 seeds Lua's generator once, but Redis
// before 7.0 reseeded it identically for every script call, so on those
// versions two hits of one key in the same millisecond got the same member
// and were counted once.
const logScript = `local key   = KEYS[1]                          -- e.g. rlaas:rate_limit:alice
local now   = tonumber(ARGV[1])                -- current time in milliseconds
local window = tonumber(ARGV[2]) * 1000        -- windowSize converted to ms
local limit = tonumber(ARGV[3])                -- max requests allowed

-- Step 1: Remove entries that have fallen outside the rolling window
redis.call("ZREMRANGEBYSCORE", key, 0, now - window)

-- Step 2: Count entries still inside the window
local count = redis.call("ZCARD", key)

if count < limit then
    -- Step 3a: Under limit — add this request and extend TTL
    local member = tostring(now) .. "-" .. math.random()
    redis.call("ZADD", key, now, member)
    redis.call("PEXPIRE", key, window * 2)
    return {1, count, window/1000}             -- allowed; ttl = windowSize in seconds
else
    -- Step 3b: At or over limit — extend TTL and deny
    redis.call("PEXPIRE", key, window * 2)
    return {0, count, window/1000}             -- denied; ttl = windowSize in seconds
end
`

// counterScript is the sliding window counter of seed 000 made atomic:
// the seed's GET, GET, INCR in one Lua script, as the seed recommends.
const counterScript = `-- Sliding window counter (seed 000), one check of one hit.
-- KEYS[1]: the previous fixed window's counter, "<key>:<window_id - 1>"
-- KEYS[2]: the current fixed window's counter,  "<key>:<window_id>"
--          where window_id = floor(now / window), computed by the caller
--          from the same now.
-- ARGV[1]: now, in milliseconds, from the CALLER's clock
-- ARGV[2]: the window, in seconds
-- ARGV[3]: the limit
-- Returns {allowed (1 or 0), floor(estimate) before this hit}.
local now    = tonumber(ARGV[1])
local window = tonumber(ARGV[2]) * 1000         -- in ms
local limit  = tonumber(ARGV[3])

-- How far into the current window we are, and so how much of the previous
-- window the rolling window (now - window, now] still covers.
local elapsed = now % window
local prev = tonumber(redis.call("GET", KEYS[1]) or "0")
local curr = tonumber(redis.call("GET", KEYS[2]) or "0")

-- The seed's estimate: the previous window's count weighted by the share
-- of it still inside the rolling window (assuming its hits were spread
-- evenly), plus everything counted in the current window so far.
local estimate = prev * (window - elapsed) / window + curr

if estimate < limit then
    -- Allowed: count the hit. The counter must outlive the next window,
    -- where it serves as "previous": its TTL is two windows.
    redis.call("INCR", KEYS[2])
    redis.call("PEXPIRE", KEYS[2], window * 2)
    return {1, math.floor(estimate)}
end
return {0, math.floor(estimate)}
`

// redisTarget is a single Redis server running the classic design: every
// application server calls the script itself. As in that design, "now"
// is the calling process's clock, not Redis's: with many application
// servers, each decides with its own clock, so clock skew between them
// moves hits between windows (counter) or shortens and stretches the
// rolling window (log). That is the classic design's weakness; peerlimit
// avoids it because only the key's owner reads a clock.
type redisTarget struct {
	cfg      *Config
	keys     []string
	rdb      *redis.Client
	script   *redis.Script
	windowS  int64
	windowMS int64
}

func newRedisTarget(ctx context.Context, cfg *Config, keys []string) (*redisTarget, error) {
	t := &redisTarget{cfg: cfg, keys: keys,
		windowS: int64(cfg.Window / time.Second), windowMS: cfg.Window.Milliseconds()}
	t.script = redis.NewScript(counterScript)
	if cfg.Algorithm == algoLog {
		t.script = redis.NewScript(logScript)
	}
	t.rdb = redis.NewClient(&redis.Options{
		Addr: cfg.Redis,
		// One connection per worker, for plain calls and for pipelines, as
		// peerlimit's workers share their gRPC connections without limit.
		PoolSize:         cfg.Workers,
		PipelinePoolSize: cfg.Workers,
		// Calls obey their context's deadline (-timeout, the run's end).
		ContextTimeoutEnabled: true,
		// A failed call is an error of the run, as with peerlimit's node
		// and random routes, not a hidden retry that inflates latency.
		MaxRetries:      -1,
		DisableIdentity: true, // no CLIENT SETINFO on connect
	})
	// SCRIPT LOAD at start, as the classic design does; calls are EVALSHA.
	sha, err := t.script.Load(ctx, t.rdb).Result()
	if err != nil {
		_ = t.rdb.Close()
		return nil, fmt.Errorf("loading the %s script into redis at %s: %w", cfg.Algorithm, cfg.Redis, err)
	}
	if sha != t.script.Hash() {
		_ = t.rdb.Close()
		return nil, fmt.Errorf("redis at %s returned SHA1 %s for the %s script, want %s", cfg.Redis, sha, cfg.Algorithm, t.script.Hash())
	}
	return t, nil
}

func (t *redisTarget) close() error {
	if err := t.rdb.Close(); err != nil {
		return fmt.Errorf("closing the redis client: %w", err)
	}
	return nil
}

func (t *redisTarget) caller(int) caller {
	c := &redisCaller{t: t}
	if t.cfg.Batch > 1 {
		c.pipe = t.rdb.Pipeline()
	}
	return c
}

// redisCaller runs the script: one EVALSHA per call with -batch 1 (EVAL if
// the script is missing), a pipeline of -batch EVALSHA otherwise.
type redisCaller struct {
	t    *redisTarget
	pipe redis.Pipeliner // batch > 1
	buf  []byte
}

// args returns the script's KEYS and ARGV for one check of key at now.
func (c *redisCaller) args(key string, now int64) ([]string, []any) {
	argv := []any{now, c.t.windowS, c.t.cfg.Limit}
	if c.t.cfg.Algorithm == algoLog {
		return []string{key}, argv
	}
	// The counter's two fixed windows, "<key>:<window_id>". Both keys go
	// in KEYS, as Redis wants every key a script touches to.
	id := now / c.t.windowMS
	return []string{c.windowKey(key, id-1), c.windowKey(key, id)}, argv
}

func (c *redisCaller) windowKey(key string, id int64) string {
	c.buf = append(append(c.buf[:0], key...), ':')
	c.buf = strconv.AppendInt(c.buf, id, 10)
	return string(c.buf)
}

func (c *redisCaller) call(ctx context.Context, keys []int, o *outcome) error {
	ctx, cancel := context.WithTimeout(ctx, c.t.cfg.Timeout)
	defer cancel()
	if c.pipe == nil {
		ks, argv := c.args(c.t.keys[keys[0]], time.Now().UnixMilli())
		res, err := c.t.script.Run(ctx, c.t.rdb, ks, argv...).Int64Slice()
		if err != nil {
			return fmt.Errorf("EVALSHA: %w", err)
		}
		return o.addScript(res)
	}
	for _, k := range keys {
		ks, argv := c.args(c.t.keys[k], time.Now().UnixMilli())
		c.t.script.EvalSha(ctx, c.pipe, ks, argv...)
	}
	cmds, err := c.pipe.Exec(ctx)
	if len(cmds) != len(keys) {
		return fmt.Errorf("pipeline of %d EVALSHA: %d answers: %w", len(keys), len(cmds), err)
	}
	reload := false
	for _, cmd := range cmds {
		res, err := cmd.(*redis.Cmd).Int64Slice()
		if err == nil {
			err = o.addScript(res)
		}
		if err != nil {
			o.fail(fmt.Errorf("EVALSHA in a pipeline: %w", err))
			reload = reload || redis.HasErrorPrefix(err, "NOSCRIPT")
		}
	}
	if reload {
		// The server lost its scripts (restart, SCRIPT FLUSH). Should this
		// fail, the next calls fail and are counted.
		_ = c.t.script.Load(ctx, c.t.rdb).Err()
	}
	return nil
}

// addScript counts one script answer: {allowed, count, ...}.
func (o *outcome) addScript(res []int64) error {
	if len(res) < 2 {
		return fmt.Errorf("script answered %v, want {allowed, count, ...}", res)
	}
	o.count(res[0] == 1, false)
	return nil
}

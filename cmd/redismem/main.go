// Command redismem measures what rate-limit state costs in Redis, per key,
// stored the way the seed scripts store it, for comparison with peerlimit's
// BenchmarkMemoryPerKey (limiter/bench_test.go).
//
// For each case it runs FLUSHALL SYNC, reads used_memory, writes the state of
// N keys with pipelined commands, waits until used_memory settles and reads
// it again. The difference, less what client buffers account for, divided by
// N is the cost per key. The key names are those of the Go benchmark:
// tenant:<i%97>:user:<i>:/api/v1/resource.
//
//   - counter (seed 000, sliding window counter): two string keys per limited
//     key, <key>:<window_id> for the current and the previous window, each
//     INCRBY'd to 100 (the Go benchmark's full window at limit 100) and given
//     an EXPIRE of two windows.
//   - log-limit-5, -20, -100 and -1000 (seed 001, sliding window log): one ZSET
//     per key holding L members "<ms>-<math.random()>" scored by ms, one ZADD
//     per entry as the seed's Lua script does, then PEXPIRE 2×window.
//
// Usage:
//
//	go run ./cmd/redismem -addr 127.0.0.1:6379 [-json PATH]
//
// It FLUSHALLs the Redis it is pointed at: use a scratch instance.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Window is the rate-limit window of every case, as in the Go benchmark.
const Window = time.Minute

// Case is one kind of state to measure.
type Case struct {
	// Name matches the sub-benchmark of BenchmarkMemoryPerKey.
	Name string `json:"name"`
	// Keys is the number of limited keys (rate-limit identities).
	Keys int `json:"keys"`
	// Entries is the log's length per key (its limit, full); 0 for the counter.
	Entries int `json:"entries_per_key"`
}

// Result is the measured cost of one Case.
type Result struct {
	Case
	RedisKeys      int     `json:"redis_keys"`
	Encoding       string  `json:"encoding"`
	Bytes          int64   `json:"bytes"`
	BytesPerKey    float64 `json:"bytes_per_key"`
	BytesPerEntry  float64 `json:"bytes_per_entry,omitempty"`
	KeyStringBytes float64 `json:"keystring_bytes_per_key"`
	ClientBufDelta int64   `json:"client_buffers_delta"`
}

// Report is what the command prints as JSON.
type Report struct {
	Addr         string    `json:"addr"`
	RedisVersion string    `json:"redis_version"`
	MeasuredAt   time.Time `json:"measured_at"`
	Results      []Result  `json:"results"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "Redis address (it is FLUSHALLed)")
	jsonPath := flag.String("json", "", "also write the report as JSON to this file")
	counterKeys := flag.Int("counter-keys", 200_000, "keys for the counter case")
	log5Keys := flag.Int("log5-keys", 200_000, "keys for the log case at limit 5")
	log20Keys := flag.Int("log20-keys", 50_000, "keys for the log case at limit 20")
	log100Keys := flag.Int("log100-keys", 10_000, "keys for the log case at limit 100")
	log1000Keys := flag.Int("log1000-keys", 2_000, "keys for the log case at limit 1000")
	flag.Parse()

	cases := []Case{
		{Name: "counter", Keys: *counterKeys},
		{Name: "log-limit-5", Keys: *log5Keys, Entries: 5},
		{Name: "log-limit-20", Keys: *log20Keys, Entries: 20},
		{Name: "log-limit-100", Keys: *log100Keys, Entries: 100},
		{Name: "log-limit-1000", Keys: *log1000Keys, Entries: 1000},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, *addr, cases)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redismem:", err)
		os.Exit(1)
	}
	WriteText(os.Stdout, rep)
	if *jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonPath, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "redismem:", err)
			os.Exit(1)
		}
	}
}

// WriteText prints one line per result.
func WriteText(w io.Writer, rep Report) {
	fmt.Fprintf(w, "Redis %s at %s: memory per key (used_memory growth / keys)\n", rep.RedisVersion, rep.Addr)
	for _, r := range rep.Results {
		fmt.Fprintf(w, "  %-15s %7d keys (%7d Redis keys, %s): %9.1f B/key", r.Name, r.Keys, r.RedisKeys, r.Encoding, r.BytesPerKey)
		if r.Entries > 0 {
			fmt.Fprintf(w, ", %6.1f B/entry", r.BytesPerEntry)
		}
		fmt.Fprintf(w, "  (key string %.1f B)\n", r.KeyStringBytes)
	}
}

// Run measures every case against the Redis at addr, FLUSHALLing it before
// each case and once more at the end.
func Run(ctx context.Context, addr string, cases []Case) (Report, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	defer rdb.Close()
	rep := Report{Addr: addr, MeasuredAt: time.Now().UTC()}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return rep, fmt.Errorf("connect to %s: %w", addr, err)
	}
	rep.RedisVersion = infoField(info, "redis_version")
	for _, c := range cases {
		r, err := measure(ctx, rdb, c)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", c.Name, err)
		}
		rep.Results = append(rep.Results, r)
	}
	if err := rdb.Do(ctx, "FLUSHALL", "SYNC").Err(); err != nil {
		return rep, fmt.Errorf("flushall: %w", err)
	}
	return rep, nil
}

// BenchKey is the i-th key of limiter/bench_test.go's benchKeys.
func BenchKey(i int) string {
	return fmt.Sprintf("tenant:%d:user:%d:/api/v1/resource", i%97, i)
}

func measure(ctx context.Context, rdb *redis.Client, c Case) (Result, error) {
	if c.Keys <= 0 || c.Entries < 0 {
		return Result{}, fmt.Errorf("invalid case: %d keys, %d entries", c.Keys, c.Entries)
	}
	r := Result{Case: c}
	if err := rdb.Do(ctx, "FLUSHALL", "SYNC").Err(); err != nil {
		return r, fmt.Errorf("flushall: %w", err)
	}
	before, err := settledMemory(ctx, rdb)
	if err != nil {
		return r, err
	}
	w, err := writeKeys(ctx, rdb, c)
	r.RedisKeys = w.redisKeys
	if err != nil {
		return r, err
	}
	if r.Encoding, err = checkWritten(ctx, rdb, c, w); err != nil {
		return r, err
	}
	after, err := settledMemory(ctx, rdb)
	if err != nil {
		return r, err
	}
	r.ClientBufDelta = after.clients - before.clients
	r.Bytes = (after.used - after.clients) - (before.used - before.clients)
	r.BytesPerKey = float64(r.Bytes) / float64(c.Keys)
	if c.Entries > 0 {
		r.BytesPerEntry = r.BytesPerKey / float64(c.Entries)
	}
	r.KeyStringBytes = float64(w.keyBytes) / float64(c.Keys)
	return r, nil
}

// written is what writeKeys stored.
type written struct {
	redisKeys int    // Redis keys written
	keyBytes  int    // the limited keys' names, summed
	sample    string // the first Redis key written, to inspect
}

func (w *written) add(redisKey string) {
	w.redisKeys++
	if w.sample == "" {
		w.sample = redisKey
	}
}

// writeKeys writes the state of c's keys with pipelined commands.
func writeKeys(ctx context.Context, rdb *redis.Client, c Case) (written, error) {
	// A fixed "now", aligned as the seeds' scripts would see it.
	now := time.UnixMilli(1_700_000_000_000)
	nowMS := now.UnixMilli()
	rng := rand.New(rand.NewPCG(1, 2))
	var w written

	const pipeCmds = 2000 // commands per pipeline round trip
	pipe := rdb.Pipeline()
	flush := func(force bool) error {
		if pipe.Len() == 0 || (!force && pipe.Len() < pipeCmds) {
			return nil
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	for i := 0; i < c.Keys; i++ {
		key := BenchKey(i)
		w.keyBytes += len(key)
		if c.Entries == 0 {
			queueCounter(ctx, pipe, key, nowMS, &w)
		} else {
			queueLog(ctx, pipe, key, c.Entries, nowMS, rng, &w)
		}
		if err := flush(false); err != nil {
			return w, fmt.Errorf("write: %w", err)
		}
	}
	if err := flush(true); err != nil {
		return w, fmt.Errorf("write: %w", err)
	}
	return w, nil
}

// queueCounter queues seed 000's state of key at nowMS: full counters for
// the current and the previous window.
func queueCounter(ctx context.Context, pipe redis.Pipeliner, key string, nowMS int64, w *written) {
	winID := nowMS / Window.Milliseconds()
	for _, id := range []int64{winID - 1, winID} {
		k := key + ":" + strconv.FormatInt(id, 10)
		pipe.IncrBy(ctx, k, 100)
		pipe.Expire(ctx, k, 2*Window)
		w.add(k)
	}
}

// queueLog queues seed 001's state of key at nowMS: a log of entries
// members.
func queueLog(ctx context.Context, pipe redis.Pipeliner, key string, entries int, nowMS int64, rng *rand.Rand, w *written) {
	windowMS := Window.Milliseconds()
	// L admitted requests spread over the last window, one ZADD each.
	for j := 0; j < entries; j++ {
		ms := nowMS - windowMS + int64(j+1)*windowMS/int64(entries)
		member := strconv.FormatInt(ms, 10) + "-" + strconv.FormatFloat(rng.Float64(), 'g', 14, 64)
		pipe.ZAdd(ctx, key, redis.Z{Score: float64(ms), Member: member})
	}
	pipe.PExpire(ctx, key, 2*Window)
	w.add(key)
}

// checkWritten checks that Redis holds what writeKeys wrote and returns
// the encoding Redis chose for it.
func checkWritten(ctx context.Context, rdb *redis.Client, c Case, w written) (string, error) {
	n, err := rdb.DBSize(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("dbsize: %w", err)
	}
	if n != int64(w.redisKeys) {
		return "", fmt.Errorf("dbsize %d, want %d", n, w.redisKeys)
	}
	if c.Entries > 0 {
		if got, err := rdb.ZCard(ctx, w.sample).Result(); err != nil || got != int64(c.Entries) {
			return "", fmt.Errorf("zcard %s = %d (%v), want %d", w.sample, got, err, c.Entries)
		}
	}
	enc, err := rdb.ObjectEncoding(ctx, w.sample).Result()
	if err != nil {
		return enc, fmt.Errorf("object encoding: %w", err)
	}
	return enc, nil
}

type memReading struct {
	used    int64 // INFO memory used_memory
	clients int64 // MEMORY STATS clients.normal: our connections' buffers
}

// settledMemory reads used_memory until two readings 100 ms apart agree (or
// 5 s have passed): Redis rehashes its key tables and trims client buffers
// in its background cron, and a reading in the middle of that is off.
func settledMemory(ctx context.Context, rdb *redis.Client) (memReading, error) {
	var last memReading
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		m, err := readMemory(ctx, rdb)
		if err != nil {
			return m, err
		}
		if (i > 0 && m == last) || time.Now().After(deadline) {
			return m, nil
		}
		last = m
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func readMemory(ctx context.Context, rdb *redis.Client) (memReading, error) {
	var m memReading
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return m, fmt.Errorf("info memory: %w", err)
	}
	if m.used, err = strconv.ParseInt(infoField(info, "used_memory"), 10, 64); err != nil {
		return m, fmt.Errorf("used_memory: %w", err)
	}
	stats, err := rdb.Do(ctx, "MEMORY", "STATS").Result()
	if err != nil {
		return m, fmt.Errorf("memory stats: %w", err)
	}
	if m.clients, err = statsField(stats, "clients.normal"); err != nil {
		return m, err
	}
	return m, nil
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// statsField finds an integer in MEMORY STATS, which is a flat array of
// name, value pairs under RESP2 and a map under RESP3.
func statsField(stats any, name string) (int64, error) {
	switch s := stats.(type) {
	case map[any]any:
		if v, ok := s[name].(int64); ok {
			return v, nil
		}
	case []any:
		for i := 0; i+1 < len(s); i += 2 {
			if k, _ := s[i].(string); k == name {
				if v, ok := s[i+1].(int64); ok {
					return v, nil
				}
			}
		}
	}
	return 0, errors.New("memory stats: no integer " + name)
}

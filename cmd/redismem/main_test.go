package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/peerlimit/peerlimit/internal/testkit/redistest"
)

func TestRunMeasuresPerKeyCost(t *testing.T) {
	addr := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cases := []Case{
		{Name: "counter", Keys: 5000},
		{Name: "log-limit-5", Keys: 5000, Entries: 5},
		{Name: "log-limit-1000", Keys: 50, Entries: 1000},
	}
	rep, err := Run(ctx, addr, cases)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(cases) {
		t.Fatalf("%d results, want %d", len(rep.Results), len(cases))
	}
	by := map[string]Result{}
	for _, r := range rep.Results {
		by[r.Name] = r
		if r.BytesPerKey <= 0 {
			t.Errorf("%s: %.1f B/key, want > 0", r.Name, r.BytesPerKey)
		}
		// Whatever Redis does, it stores the key string.
		if r.BytesPerKey < r.KeyStringBytes {
			t.Errorf("%s: %.1f B/key is less than the key string (%.1f B)", r.Name, r.BytesPerKey, r.KeyStringBytes)
		}
		if r.Entries > 0 && r.BytesPerEntry <= 0 {
			t.Errorf("%s: %.1f B/entry, want > 0", r.Name, r.BytesPerEntry)
		}
	}
	if c := by["counter"]; c.RedisKeys != 2*c.Keys {
		t.Errorf("counter: %d Redis keys, want two per key (%d)", c.RedisKeys, 2*c.Keys)
	}
	if l5, l1000 := by["log-limit-5"], by["log-limit-1000"]; l1000.BytesPerKey <= l5.BytesPerKey {
		t.Errorf("log-limit-1000 costs %.1f B/key, not more than log-limit-5 (%.1f B/key)", l1000.BytesPerKey, l5.BytesPerKey)
	}
	var text strings.Builder
	WriteText(&text, rep)
	t.Log("\n" + text.String())

	// Run leaves the scratch Redis empty.
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("dbsize after Run = %d (%v), want 0", n, err)
	}
}

func TestBenchKeyMatchesGoBenchmark(t *testing.T) {
	// limiter/bench_test.go: fmt.Sprintf("tenant:%d:user:%d:/api/v1/resource", i%97, i)
	if got, want := BenchKey(100), "tenant:3:user:100:/api/v1/resource"; got != want {
		t.Errorf("BenchKey(100) = %q, want %q", got, want)
	}
}

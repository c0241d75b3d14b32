package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// prom asks a Prometheus server through its HTTP API, which is plain JSON:
// https://prometheus.io/docs/prometheus/latest/querying/api/. Safe for
// concurrent use.
type prom struct {
	base string // e.g. http://127.0.0.1:9090, without a trailing slash
	hc   *http.Client
}

// series is one element of a query's result: its labels, and whether its
// value is NaN (a ratio of two zero rates, a quantile of no observations).
type series struct {
	Labels map[string]string
	NaN    bool
}

// apiResponse is the envelope of every answer of the API, errors included.
type apiResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

// call calls path with form (POST for queries, which may be long) and
// returns the answer's data; an error carries Prometheus's own message.
func (p prom) call(ctx context.Context, path string, form url.Values) (json.RawMessage, error) {
	method, body := http.MethodGet, io.Reader(nil)
	if form != nil {
		method, body = http.MethodPost, strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, body)
	if err != nil {
		return nil, err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var r apiResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d, not the API's JSON: %.200q", path, resp.StatusCode, raw)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: HTTP %d: %s: %s", path, resp.StatusCode, r.ErrorType, r.Error)
	}
	return r.Data, nil
}

// instant runs expr as an instant query at the server's now.
func (p prom) instant(ctx context.Context, expr string) ([]series, error) {
	data, err := p.call(ctx, "/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err
	}
	var d struct {
		ResultType string `json:"resultType"`
		Result     json.RawMessage
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("query result: %w", err)
	}
	if d.ResultType != "vector" {
		// A scalar or string has no labels: it cannot be per node.
		return nil, fmt.Errorf("result is a %s, not a vector of series", d.ResultType)
	}
	var result []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"` // [unix time, "value as a string"]
	}
	if err := json.Unmarshal(d.Result, &result); err != nil {
		return nil, fmt.Errorf("query result: %w", err)
	}
	out := make([]series, len(result))
	for i, r := range result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		out[i] = series{Labels: r.Metric, NaN: err != nil || math.IsNaN(v)}
	}
	return out, nil
}

// rule is an alerting rule as the server loaded it.
type rule struct {
	Name      string `json:"name"`
	Type      string `json:"type"`   // alerting, recording
	Health    string `json:"health"` // ok, err, unknown (not evaluated yet)
	LastError string `json:"lastError"`
}

// alertRules lists the alerting rules the server has loaded, by name.
func (p prom) alertRules(ctx context.Context) (map[string]rule, error) {
	data, err := p.call(ctx, "/api/v1/rules", nil)
	if err != nil {
		return nil, err
	}
	var d struct {
		Groups []struct {
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	out := map[string]rule{}
	for _, g := range d.Groups {
		for _, r := range g.Rules {
			if r.Type == "alerting" {
				out[r.Name] = r
			}
		}
	}
	return out, nil
}

// Package metrictest reads Prometheus series in tests: what a component
// counted, straight from its registry.
package metrictest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Value returns the series name{labels...} of g (labels as name, value
// pairs; a label not named matches any value): a counter's or a gauge's
// value, a histogram's count of observations. It fails t if there is no
// such series.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// Scrape is the Gatherer of the metrics a process serves at url (a
// node's GET /metrics), read in Prometheus' protobuf exposition format:
// what a Prometheus server would see, for tests that drive a real node.
func Scrape(url string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
		var mfs []*dto.MetricFamily
		for {
			mf := &dto.MetricFamily{}
			switch err := dec.Decode(mf); {
			case err == nil:
				mfs = append(mfs, mf)
			case errors.Is(err, io.EOF):
				return mfs, nil
			default:
				return nil, fmt.Errorf("GET %s: %w", url, err)
			}
		}
	})
}

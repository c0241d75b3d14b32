package persist

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what a Log writes and restores. A nil *Metrics counts
// nothing.
type Metrics struct {
	failing      prometheus.Gauge
	bytes        prometheus.Counter
	dropped      prometheus.Counter
	syncSeconds  prometheus.Histogram
	snapshots    prometheus.Counter
	snapshotKeys prometheus.Gauge
	snapshotSecs prometheus.Gauge
	restoredKeys prometheus.Gauge
	restoredSecs prometheus.Gauge
	restoreDrops prometheus.Gauge
}

// NewMetrics registers persistence's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "peerlimit", Name: name, Help: help})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "peerlimit", Name: name, Help: help})
	}
	m := &Metrics{
		failing: g("persist_failing", "1 while the data directory cannot be written (a full disk): counts are kept in memory only until a snapshot succeeds."),
		bytes:   c("persist_written_bytes_total", "Bytes this node appended to its data directory's segments."),
		dropped: c("persist_dropped_records_total", "Records (a round's changes, a replication) not written because the data directory could not be: a snapshot covers them once it can."),
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "peerlimit", Name: "persist_sync_seconds",
			Help: "How long each sync (fsync) of the data directory's segment took.", Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}}),
		snapshots:    c("persist_snapshots_total", "Snapshots this node wrote of every state it holds."),
		snapshotKeys: g("persist_snapshot_keys", "States in the last snapshot."),
		snapshotSecs: g("persist_snapshot_seconds", "How long the last snapshot took to write."),
		restoredKeys: g("persist_restored_keys", "States this node restored from its data directory at start: its own, and its replicas' records."),
		restoredSecs: g("persist_restore_seconds", "How long reading the data directory took at start."),
		restoreDrops: g("persist_restore_dropped_files", "Files of the data directory read only in part at start (a record cut short, a checksum mismatch): the log says which."),
	}
	for _, col := range []prometheus.Collector{m.failing, m.bytes, m.dropped, m.syncSeconds, m.snapshots, m.snapshotKeys, m.snapshotSecs,
		m.restoredKeys, m.restoredSecs, m.restoreDrops} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) setFailing(on bool) {
	if m == nil {
		return
	}
	v := 0.0
	if on {
		v = 1
	}
	m.failing.Set(v)
}

func (m *Metrics) wrote(n int) {
	if m != nil {
		m.bytes.Add(float64(n))
	}
}

func (m *Metrics) droppedRecord() {
	if m != nil {
		m.dropped.Inc()
	}
}

func (m *Metrics) synced(d time.Duration) {
	if m != nil {
		m.syncSeconds.Observe(d.Seconds())
	}
}

func (m *Metrics) snapshot(keys int, d time.Duration) {
	if m == nil {
		return
	}
	m.snapshots.Inc()
	m.snapshotKeys.Set(float64(keys))
	m.snapshotSecs.Set(d.Seconds())
}

func (m *Metrics) restored(r Restored) {
	if m == nil {
		return
	}
	keys := len(r.Own)
	for _, op := range r.Replicas {
		keys += len(op.States)
	}
	m.restoredKeys.Set(float64(keys))
	m.restoredSecs.Set(r.Took.Seconds())
	m.restoreDrops.Set(float64(len(r.Dropped)))
}

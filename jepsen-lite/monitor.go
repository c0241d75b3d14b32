package jepsenlite

import (
	"context"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// View is one node's membership and ring as sampled by the monitor.
type View struct {
	Node   string        `json:"node"`
	Asked  time.Duration `json:"asked_ns"` // when the request left: the view is at least this recent
	Got    time.Duration `json:"got_ns"`
	Alive  []string      `json:"alive"` // sorted
	Ring   uint64        `json:"ring"`  // hash of the partition → owner table
	Failed bool          `json:"failed,omitempty"`
}

// Monitor samples every node's view (the Members RPC) every Interval, so
// that the checker can say when the cluster converged after each fault.
type Monitor struct {
	Interval time.Duration
	Timeout  time.Duration
	Nodes    func() []string // whom to ask, e.g. every node ever started

	mu    sync.Mutex
	views []View
}

// Run samples until ctx ends.
func (m *Monitor) Run(ctx context.Context, clients *Clients, start time.Time) {
	t := time.NewTicker(m.Interval)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		for _, id := range m.Nodes() {
			cl := clients.client(id)
			if cl == nil {
				continue
			}
			wg.Add(1)
			go func() { // bounded by Timeout; awaited before Run returns
				defer wg.Done()
				v := View{Node: id, Asked: time.Since(start)}
				cctx, cancel := context.WithTimeout(ctx, m.Timeout)
				resp, err := cl.Members(cctx, &pb.MembersRequest{})
				cancel()
				v.Got = time.Since(start)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					v.Failed = true
				} else {
					v.Alive, v.Ring = summarize(resp)
				}
				m.mu.Lock()
				m.views = append(m.views, v)
				m.mu.Unlock()
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Views returns the samples, ordered by when they were asked.
func (m *Monitor) Views() []View {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Clone(m.views)
	slices.SortFunc(out, func(a, b View) int { return int(a.Asked - b.Asked) })
	return out
}

// summarize reduces a Members answer to the ids in the ring and a
// fingerprint of the ring by owner id, comparable across nodes.
func summarize(r *pb.MembersResponse) ([]string, uint64) {
	var alive []string
	for _, m := range r.GetMembers() {
		// In the ring: alive, or unreachable from this node while the
		// others are asked (cluster's agreement), which moves nothing.
		if m.GetState() == "alive" || m.GetState() == "unreachable" {
			alive = append(alive, m.GetId())
		}
	}
	slices.Sort(alive)
	h := fnv.New64a()
	ms := r.GetMembers()
	for _, o := range r.GetPartitionOwners() {
		if int(o) < len(ms) {
			h.Write([]byte(ms[o].GetId()))
		}
		h.Write([]byte{0})
	}
	return alive, h.Sum64()
}

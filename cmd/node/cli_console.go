package main

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/rpc"
)

// The console's questions from a terminal: top and inspect. --json prints
// the shapes of GET /v1/top and GET /v1/inspect.

func cmdTop(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newCommand("top", "", getenv, stdout, stderr)
	c.grpcFlags()
	n := c.fs.Int("n", 10, "how many keys each list holds (1 to 100)")
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return c.usageError("takes no arguments")
	}
	if *n < 1 || *n > peer.MaxTop {
		return c.usageError("--n must be in [1, %d], got %d", peer.MaxTop, *n)
	}
	resp, err := call(c, pb.RateLimiterClient.Top, &pb.TopRequest{N: uint32(*n)})
	if err != nil {
		return c.fail(err)
	}
	out := httpapi.Top{SinceMS: resp.SinceUnixMs, MembersAsked: int(resp.MembersAsked), MembersAnswered: int(resp.MembersAnswered),
		Checks: hotKeys(resp.Checks), Denials: hotKeys(resp.Denials)}
	if c.json {
		c.printJSON(out)
		return exitOK
	}
	fmt.Fprintf(stdout, "since %s (%d of %d members answered)\n", time.UnixMilli(out.SinceMS).Format(time.TimeOnly),
		out.MembersAnswered, out.MembersAsked)
	printHotKeys(stdout, "CHECKS", out.Checks)
	printHotKeys(stdout, "DENIED", out.Denials)
	if out.MembersAnswered < out.MembersAsked {
		fmt.Fprintln(stdout, "warning: members that did not answer are missing from the lists")
	}
	return exitOK
}

func hotKeys(ks []*pb.HotKey) []httpapi.HotKey {
	out := make([]httpapi.HotKey, len(ks))
	for i, k := range ks {
		out[i] = httpapi.HotKey{Key: k.Key, Count: k.Count, Error: k.Error}
	}
	return out
}

func printHotKeys(w io.Writer, title string, ks []httpapi.HotKey) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tKEY\n", title)
	for _, k := range ks {
		count := fmt.Sprint(k.Count)
		if k.Error > 0 {
			count += fmt.Sprintf(" ±%d", k.Error)
		}
		fmt.Fprintf(tw, "%s\t%q\n", count, k.Key)
	}
	if len(ks) == 0 {
		fmt.Fprintln(tw, "-\t(none)")
	}
	_ = tw.Flush()
}

func cmdInspect(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newCommand("inspect", "KEY", getenv, stdout, stderr)
	c.grpcFlags()
	limit := c.fs.Int64("limit", 0, "compute when the next request would be allowed under this limit")
	hits := c.fs.Int64("hits", 1, "with --limit or --policy: the hits of that next request")
	policy := c.fs.String("policy", "", "a policy of the node's --policies file: its limit, window and algorithm")
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError("want one KEY, got %d arguments", len(pos))
	}
	req := &pb.InspectRequest{Key: pos[0], Limit: *limit, Policy: *policy}
	if *limit > 0 || *policy != "" {
		req.Hits = hits
	}
	resp, err := call(c, pb.RateLimiterClient.Inspect, req)
	if err != nil {
		return c.fail(err)
	}
	out := httpapi.InspectJSON(rpc.FromProtoInspect(resp), time.Now())
	if c.json {
		c.printJSON(out)
		return exitOK
	}
	printInspect(stdout, out)
	return exitOK
}

func printInspect(w io.Writer, in httpapi.Inspect) {
	replica := in.Replica
	if replica == "" {
		replica = "none"
	}
	fmt.Fprintf(w, "%q: partition %d, owner %s, replica on %s\n", in.Key, in.Partition, in.Owner, replica)
	if len(in.Limits) == 0 {
		fmt.Fprintln(w, "no state: nothing counts against this key now")
	}
	for _, l := range in.Leases {
		fmt.Fprintf(w, "lease: %d hits lent to %s, for %s more\n", l.Hits, l.Holder, time.Duration(l.ExpiresInMS)*time.Millisecond)
	}
	for _, v := range in.Limits {
		window := "window " + (time.Duration(v.WindowMS) * time.Millisecond).String()
		if v.Calendar != "" {
			window = "calendar " + v.Calendar + " in " + cmp.Or(v.TimeZone, "UTC")
		}
		fmt.Fprintf(w, "%s, %s: count %d, empty in %s", v.Algorithm, window, v.Count,
			time.Duration(v.ResetAfterMS)*time.Millisecond)
		if v.NextAllowMS != nil {
			fmt.Fprintf(w, ", next allowed in %s", time.Duration(*v.NextAllowMS)*time.Millisecond)
		}
		fmt.Fprintln(w)
		switch {
		case v.Counter != nil && v.Calendar != "":
			fmt.Fprintf(w, "  period from %s: %d\n", time.UnixMilli(v.Counter.WindowStartMS).UTC().Format(time.RFC3339), v.Counter.Current)
		case v.Counter != nil:
			fmt.Fprintf(w, "  window from %s: %d; the window before: %d\n",
				time.UnixMilli(v.Counter.WindowStartMS).Format(time.TimeOnly), v.Counter.Current, v.Counter.Previous)
		case v.Log != nil:
			fmt.Fprintf(w, "  hits in the window, oldest first, by age: %s\n", formatAges(v.Log.EntriesAgeMS))
		}
	}
}

// maxAgeGroups is how many groups of equal ages inspect prints of a log
// before it summarises the middle: a log holds up to --max-log-limit hits.
const maxAgeGroups = 20

// formatAges prints a log's ages (ms, oldest first) for people: equal
// ages, which a batch or a charge of many hits leaves at one instant,
// once with their number ("5.368s ×89"); past maxAgeGroups groups, the
// oldest and newest halves with the number of hits between them.
func formatAges(agesMS []int64) string {
	type group struct {
		age int64
		n   int
	}
	var groups []group
	for _, a := range agesMS {
		if k := len(groups) - 1; k >= 0 && groups[k].age == a {
			groups[k].n++
		} else {
			groups = append(groups, group{a, 1})
		}
	}
	show := func(g group) string {
		s := (time.Duration(g.age) * time.Millisecond).String()
		if g.n > 1 {
			s += fmt.Sprintf(" ×%d", g.n)
		}
		return s
	}
	var parts []string
	for i := 0; i < len(groups); i++ {
		if len(groups) > maxAgeGroups && i == maxAgeGroups/2 {
			skipped, hits := len(groups)-maxAgeGroups, 0
			for _, g := range groups[i : i+skipped] {
				hits += g.n
			}
			parts = append(parts, fmt.Sprintf("… %d hits at %d other ages …", hits, skipped))
			i += skipped - 1
			continue
		}
		parts = append(parts, show(groups[i]))
	}
	return strings.Join(parts, " ")
}

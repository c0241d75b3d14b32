package ownership_test

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/peerlimit/peerlimit/ownership"
	"github.com/peerlimit/peerlimit/ring"
)

// TestTranscripts runs the scripts under testdata/: events in, and after
// each the actions the Machine asked for and the view it left, as etcd's
// raft tests its core. go test ./ownership -rewrite rewrites the expected
// output (read the diff before committing it).
//
// Commands (the script's time starts at 0 and moves only by tick):
//
//	init self=n1 partitions=8 [max-wait=1s] [share-for=5m]
//	member n2 alive|unreachable|left|failed [unconfirmed|cut-off]   (a Membership follows)
//	members n1 n2 n3                                          (these alive, the rest forgotten)
//	joined | leaving
//	done n2 0 1 2                                             (n2's HandoffDone)
//	holds 0 3                                                 (this node holds state of these partitions)
//	tick 500ms                                                (time passes; a Tick)
//	route                                                     (who decides each partition)
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &script{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := s.run(d)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return out
		})
	})
}

type script struct {
	m       *ownership.Machine
	self    string
	members map[string]ownership.Member
	holds   held
	now     time.Time
}

// held is the partitions this node holds state of.
type held map[int]bool

func (h held) PartitionLen(p int) int {
	if h[p] {
		return 1
	}
	return 0
}

func (s *script) run(d *datadriven.TestData) (string, error) {
	switch d.Cmd {
	case "init":
		return s.init(d)
	case "member":
		return s.member(d)
	case "members":
		s.members = map[string]ownership.Member{}
		for _, a := range d.CmdArgs {
			s.members[a.Key] = ownership.Member{ID: a.Key, Addr: a.Key + ":1", State: ownership.Alive}
		}
		return s.step(s.membership())
	case "joined":
		return s.step(ownership.Joined{})
	case "leaving":
		return s.step(ownership.Leaving{})
	case "done":
		parts, err := partitions(d.CmdArgs[1:])
		if err != nil {
			return "", err
		}
		return s.step(ownership.HandoffDone{From: d.CmdArgs[0].Key, Partitions: parts})
	case "holds":
		parts, err := partitions(d.CmdArgs)
		clear(s.holds)
		for _, p := range parts {
			s.holds[p] = true
		}
		return s.route(), err
	case "tick":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			return "", err
		}
		s.now = s.now.Add(dur)
		return s.step(ownership.Tick{Now: s.now})
	case "route":
		return s.route(), nil
	}
	return "", fmt.Errorf("unknown command %q", d.Cmd)
}

func (s *script) init(d *datadriven.TestData) (string, error) {
	cfg := ownership.Config{Ring: ring.DefaultConfig(), MaxWait: time.Second, ShareFor: 5 * time.Minute}
	for _, a := range d.CmdArgs {
		var err error
		switch a.Key {
		case "self":
			cfg.Self = a.Vals[0]
		case "partitions":
			cfg.Partitions, err = strconv.Atoi(a.Vals[0])
		case "max-wait":
			cfg.MaxWait, err = time.ParseDuration(a.Vals[0])
		case "share-for":
			cfg.ShareFor, err = time.ParseDuration(a.Vals[0])
		case "rejoining":
			cfg.Rejoining = true
		default:
			err = fmt.Errorf("unknown init argument %q", a.Key)
		}
		if err != nil {
			return "", err
		}
	}
	s.self, s.holds, s.now = cfg.Self, held{}, time.Unix(0, 0)
	cfg.Addr, cfg.Holdings = cfg.Self+":1", s.holds
	s.members = map[string]ownership.Member{cfg.Self: {ID: cfg.Self, Addr: cfg.Addr}}
	var err error
	if s.m, err = ownership.New(cfg); err != nil {
		return "", err
	}
	return describe(s.m.View()), nil
}

func (s *script) member(d *datadriven.TestData) (string, error) {
	if len(d.CmdArgs) < 2 {
		return "", fmt.Errorf("member wants an id and a state")
	}
	id := d.CmdArgs[0].Key
	m := ownership.Member{ID: id, Addr: id + ":1"}
	switch d.CmdArgs[1].Key {
	case "alive":
		m.State = ownership.Alive
		m.CutOff = len(d.CmdArgs) > 2 && d.CmdArgs[2].Key == "cut-off"
	case "unreachable":
		m.State = ownership.Unreachable
	case "left":
		m.State = ownership.Left
	case "failed":
		m.State, m.Since = ownership.Failed, s.now
		m.Unconfirmed = len(d.CmdArgs) > 2 && d.CmdArgs[2].Key == "unconfirmed"
	default:
		return "", fmt.Errorf("unknown state %q", d.CmdArgs[1].Key)
	}
	if old, ok := s.members[id]; ok && old.State == ownership.Failed && m.State == ownership.Failed {
		m.Since = old.Since // still failed: since the first time
	}
	s.members[id] = m
	return s.step(s.membership())
}

func (s *script) membership() ownership.Membership {
	ms := make([]ownership.Member, 0, len(s.members))
	for _, m := range s.members {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
	return ownership.Membership{Now: s.now, Members: ms}
}

// step applies ev and describes its actions and the view.
func (s *script) step(ev ownership.Event) (string, error) {
	var b strings.Builder
	for _, a := range s.m.Step(ev) {
		b.WriteString(s.action(a) + "\n")
	}
	b.WriteString(describe(s.m.View()))
	return b.String(), nil
}

func (s *script) action(a ownership.Action) string {
	switch a := a.(type) {
	case ownership.Connect:
		var ids []string
		for _, m := range a.Members {
			ids = append(ids, m.ID)
		}
		return "connect " + strings.Join(ids, " ")
	case ownership.RingChanged:
		var failed []string
		for id := range a.Failed() {
			failed = append(failed, id)
		}
		slices.Sort(failed)
		return fmt.Sprintf("ring-changed %s -> %s failed=[%s]", owners(a.Old), owners(a.New), strings.Join(failed, " "))
	case ownership.HandOff:
		return "hand-off"
	case ownership.Contested:
		if len(a.Gone) == 0 {
			return "uncontested"
		}
		return "contested gone=[" + strings.Join(a.Gone, " ") + "]"
	case ownership.Isolated:
		return fmt.Sprintf("isolated %v", a.On)
	case ownership.CutOff:
		return fmt.Sprintf("cut-off %v", a.On)
	case ownership.GaveUp:
		return fmt.Sprintf("gave-up partitions=%d", a.Partitions)
	case ownership.WakeAt:
		return "wake-at " + a.At.Sub(time.Unix(0, 0)).String()
	}
	return fmt.Sprintf("unknown action %T", a)
}

// describe is one line of the view: the ring, joined or not, the
// partitions that wait, the ring without this node, contested, the share.
func describe(v *ownership.View) string {
	parts := []string{"ring " + owners(v.Ring())}
	if !v.Joined() {
		parts = append(parts, "joining")
	}
	if v.Leaving() {
		parts = append(parts, "leaving")
	}
	var waiting []string
	for p := range v.Ring().PartitionCount() {
		if v.Waits(p) {
			waiting = append(waiting, strconv.Itoa(p))
		}
	}
	if len(waiting) > 0 {
		parts = append(parts, "waiting "+strings.Join(waiting, ","))
	}
	if contested(v) {
		parts = append(parts, "contested")
	}
	live, known := v.Share()
	parts = append(parts, fmt.Sprintf("share %d/%d", live, known))
	return "view: " + strings.Join(parts, " | ") + "\n"
}

// contested reports whether every key's answer is contested here, as
// when a member is out unconfirmed: a key of no waiting partition says.
func contested(v *ownership.View) bool {
	for p := range v.Ring().PartitionCount() {
		if !v.Waits(p) {
			return v.Joined() && v.Contested(keyOf(v.Ring(), p))
		}
	}
	return false
}

// route lists who decides each partition, and how a check of it goes.
func (s *script) route() string {
	v := s.m.View()
	var b strings.Builder
	for p := range v.Ring().PartitionCount() {
		key := keyOf(v.Ring(), p)
		fmt.Fprintf(&b, "p%d: ring %s, decided by %s", p, v.Ring().PartitionOwner(p).ID, v.PartitionOwner(p).ID)
		if v.PartitionOwner(p).ID == s.self {
			switch {
			case v.Settling(key):
				b.WriteString(", waits")
			case v.Contested(key):
				b.WriteString(", degraded")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// owners is a ring as member=partitions, sorted by id.
func owners(r *ring.Ring) string {
	var out []string
	for _, m := range r.Members() {
		var ps []string
		for p := range r.PartitionCount() {
			if r.PartitionOwner(p).ID == m.ID {
				ps = append(ps, strconv.Itoa(p))
			}
		}
		out = append(out, m.ID+"="+strings.Join(ps, ","))
	}
	return strings.Join(out, " ")
}

// keyOf returns a key of partition p.
func keyOf(r *ring.Ring, p int) string {
	for i := 0; ; i++ {
		if k := "k" + strconv.Itoa(i); r.Partition(k) == p {
			return k
		}
	}
}

func partitions(args []datadriven.CmdArg) ([]int, error) {
	var out []int
	for _, a := range args {
		p, err := strconv.Atoi(a.Key)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

package ownership_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/ownership"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/ring"
)

// recorder is Effects that notes what it was asked, and the ring of the
// view published when it was.
type recorder struct {
	t   *ownership.Tracker
	log []string
}

func (r *recorder) Connect(ms []peer.Route) {
	r.log = append(r.log, "connect, published: "+members(r.t.View().Ring()))
}
func (r *recorder) RingChanged(c ownership.RingChanged) {
	r.log = append(r.log, "ring changed, published: "+members(r.t.View().Ring()))
}
func (r *recorder) HandOff() { r.log = append(r.log, "hand off") }

func members(r *ring.Ring) string {
	var ids []string
	for _, m := range r.Members() {
		ids = append(ids, m.ID)
	}
	return strings.Join(ids, "")
}

func alive(ids ...string) []ownership.Member {
	var out []ownership.Member
	for _, id := range ids {
		out = append(out, ownership.Member{ID: id, Addr: id + ":1"})
	}
	return out
}

func newTracker(t *testing.T, fx *recorder) *ownership.Tracker {
	t.Helper()
	tr, err := ownership.NewTracker(ownership.Config{Self: "n1", Addr: "n1:1", Ring: ring.DefaultConfig(), Partitions: 16, MaxWait: time.Second},
		ownership.TrackerDeps{Effects: fx, Logger: slog.New(slog.NewTextHandler(testlog.New(t), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Stop)
	fx.t = tr
	return tr
}

// Connect runs before the view that routes to the new members is
// published, the rest after: a forward must find its connection.
func TestTrackerConnectsBeforeItPublishes(t *testing.T) {
	fx := &recorder{}
	tr := newTracker(t, fx)
	tr.Membership(alive("n1", "n2"))
	want := []string{"connect, published: n1", "ring changed, published: n1n2", "hand off"}
	if !slices.Equal(fx.log, want) {
		t.Fatalf("effects: got %q, want %q", fx.log, want)
	}
}

// A check that waits for its partition waits on the view's Changed, which
// closes when a newer view is published: the join's end, a HandoffDone,
// the wait given up by a tick at MaxWait.
func TestTrackerWakesWaitersAndGivesUpAtMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newTracker(t, &recorder{})
		joining := tr.View()
		key := "k"
		if ch := tr.Settling(key); ch == nil || ch != joining.Changed() {
			t.Fatal("before the join, a key settles on the view's Changed")
		}
		tr.Membership(alive("n1", "n2"))
		tr.Joined()
		select {
		case <-joining.Changed():
		default:
			t.Fatal("the view before the join was not closed when a newer one was published")
		}
		v := tr.View()
		if v.Waiting() == 0 {
			t.Fatal("n1 gained partitions from n2 and waits for none")
		}
		mine := keyOwnedBy(v, "n1")
		if !v.Settling(mine) || tr.Settling(mine) != v.Changed() {
			t.Fatalf("a key of a gained partition does not settle on the current view")
		}
		time.Sleep(time.Second) // MaxWait: the tracker's tick gives up
		synctest.Wait()
		if w := tr.View().Waiting(); w != 0 {
			t.Fatalf("after MaxWait %d partitions still wait", w)
		}
		select {
		case <-v.Changed():
		default:
			t.Fatal("giving up did not wake the waiters")
		}
	})
}

// keyOwnedBy returns a key v's ring gives id.
func keyOwnedBy(v *ownership.View, id string) string {
	for i := 0; ; i++ {
		k := string(rune('a'+i%26)) + time.Duration(i).String()
		if v.Ring().Owner(k).ID == id {
			return k
		}
	}
}

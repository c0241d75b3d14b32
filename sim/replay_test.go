package sim_test

import (
	"flag"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/sim"
)

// A failing seed's replay command draws the plan that failed, whatever
// plans the run drew (hunting or plain, with clock faults or without):
// its flags, parsed as go test parses them, select the same options, and
// the plan drawn under them is the plan drawn under the options in use.
func TestReplayCommandDrawsThePlanThatFailed(t *testing.T) {
	defer opts.apply()
	const s = 57
	for _, hunt := range []bool{false, true} {
		for _, clocks := range []bool{true, false} {
			used := fixed(hunt, clocks)
			line := replayCommand(used, s)
			replayed := parseReplay(t, line)
			assert.Equal(t, uint64(s), *replayed.seed, line)
			assert.Equal(t, hunt, *replayed.hunt, line)
			assert.Equal(t, clocks, *replayed.clocks, line)

			used.apply()
			want := sim.NewPlan(s)
			replayed.apply()
			assert.True(t, reflect.DeepEqual(want, sim.NewPlan(s)), "%s draws another plan", line)
		}
	}
	// And the options of this run: what a failure in it prints.
	replayed := parseReplay(t, replayCommand(opts, s))
	assert.Equal(t, *opts.hunt, *replayed.hunt)
	assert.Equal(t, *opts.clocks, *replayed.clocks)
}

// fixed returns options of the given plan flags.
func fixed(hunt, clocks bool) options {
	o := register(flag.NewFlagSet("used", flag.PanicOnError))
	*o.hunt, *o.clocks = hunt, clocks
	return o
}

// parseReplay parses a replay command's test flags as the test binary
// would, after checking that it runs TestSimulation.
func parseReplay(t *testing.T, line string) options {
	t.Helper()
	args := strings.Fields(strings.ReplaceAll(line, "'", ""))
	require.Equal(t, []string{"go", "test"}, args[:2], line)
	i := indexOf(args, "-run")
	require.Positive(t, i, line)
	assert.True(t, regexp.MustCompile(args[i+1]).MatchString("TestSimulation"), line)
	pkg := indexOf(args, "./sim")
	require.Positive(t, pkg, line)
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	o := register(fs)
	require.NoError(t, fs.Parse(args[pkg+1:]), line)
	require.Empty(t, fs.Args(), line)
	return o
}

func indexOf(args []string, s string) int {
	for i, a := range args {
		if a == s {
			return i
		}
	}
	return -1
}

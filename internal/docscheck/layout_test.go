package docscheck

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// layoutHeading starts the section of docs/design.md that must name every
// package; the section runs to the next "## " heading.
const layoutHeading = "## Code layout"

// The rule, as docs/design.md's section states it: every package of the
// module, by its path from the module root, appears in backquotes in the
// section (`internal/wallclock`; the module root's own package, if it
// ever has one, as `.`), and the first column of the section's tables
// names only packages that exist.
func TestDesignLayoutNamesEveryPackage(t *testing.T) {
	root, pkgs := modulePackages(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	require.NoError(t, err)
	section, err := layoutSection(string(doc))
	require.NoError(t, err)

	named := quoted(section)
	for _, p := range pkgs {
		assert.True(t, named[p], "docs/design.md, %q: package %s is not named there: add it, in backquotes, with its one job", layoutHeading, p)
	}
	for _, p := range tableFirstColumn(section) {
		assert.True(t, slices.Contains(pkgs, p), "docs/design.md, %q: a table names %s, which is no package of the module (go list ./...)", layoutHeading, p)
	}
}

// modulePackages returns the module's root directory and its packages'
// paths relative to the module ("internal/wallclock"; "." for the root).
func modulePackages(t *testing.T) (string, []string) {
	t.Helper()
	goTool, err := exec.LookPath("go") // go test puts its own go first on PATH
	require.NoError(t, err, "the go tool lists the module's packages")
	out, err := exec.Command(goTool, "list", "-m", "-f", "{{.Path}} {{.Dir}}").Output()
	require.NoError(t, err, "go list -m")
	module, root, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	require.True(t, ok, "go list -m: %q", out)

	cmd := exec.Command(goTool, "list", "./...")
	cmd.Dir = root
	out, err = cmd.Output()
	require.NoError(t, err, "go list ./...")
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(p, module)
		require.True(t, ok, "%s is not in module %s", p, module)
		if rel = strings.TrimPrefix(rel, "/"); rel == "" {
			rel = "."
		}
		pkgs = append(pkgs, rel)
	}
	require.NotEmpty(t, pkgs)
	return root, pkgs
}

// layoutSection returns the section that starts with layoutHeading, up to
// the next second-level heading.
func layoutSection(doc string) (string, error) { return sectionOf(doc, layoutHeading) }

// sectionOf returns the section of doc whose heading line starts with
// heading, up to the next second-level heading.
func sectionOf(doc, heading string) (string, error) {
	i := strings.Index(doc, "\n"+heading)
	if i < 0 {
		return "", fmt.Errorf("no %q heading", heading)
	}
	section := doc[i+1:]
	if j := strings.Index(section[len(heading):], "\n## "); j >= 0 {
		section = section[:len(heading)+j]
	}
	return section, nil
}

var (
	fenced   = regexp.MustCompile("(?ms)^```.*?^```")
	backtick = regexp.MustCompile("`([^`\n]+)`")
)

// quoted returns what the text writes in backquotes, outside fenced code
// blocks (the diagram, whose names are not meant as the list).
func quoted(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range backtick.FindAllStringSubmatch(fenced.ReplaceAllString(text, ""), -1) {
		out[m[1]] = true
	}
	return out
}

// tableFirstColumn returns what the first cell of each table row writes
// in backquotes, header rows left out.
func tableFirstColumn(text string) []string {
	var out []string
	for line := range strings.Lines(text) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) < 3 || cells[0] != "" {
			continue
		}
		for _, m := range backtick.FindAllStringSubmatch(cells[1], -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// The section parsing the rule rests on: the section ends at the next
// heading, the diagram's names do not count, and a header or separator
// row names nothing.
func TestLayoutRuleParsing(t *testing.T) {
	doc := "# Design\n\n## Before\n`ghost`\n\n" +
		"## Code layout: one path\n\nText naming `internal/wallclock`.\n\n" +
		"```\n`node` ─► `route`\n```\n\n" +
		"| package | its one job |\n| --- | --- |\n| `limiter` | the store |\n| `httpapi`, `envoyrls` | faces; not `grpc` |\n\n" +
		"### A subsection stays in\n`cmd/node`\n\n## The ring\n`ring`\n"
	section, err := layoutSection(doc)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(section, layoutHeading))

	got := quoted(section)
	for _, want := range []string{"internal/wallclock", "limiter", "httpapi", "envoyrls", "grpc", "cmd/node"} {
		assert.True(t, got[want], want)
	}
	for _, gone := range []string{"ghost", "node", "route", "ring"} {
		assert.False(t, got[gone], "%s is outside the section or in the diagram", gone)
	}
	assert.Equal(t, []string{"limiter", "httpapi", "envoyrls"}, tableFirstColumn(section))

	_, err = layoutSection("# Design\n## Layout\n")
	assert.ErrorContains(t, err, layoutHeading)
}

package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every relative link of the repository's Markdown pages leads somewhere:
// the file exists and, with a #fragment into a Markdown page, that page has
// the heading (by GitHub's rule for anchors) or an <a id="..."> of that
// name. Pages move and headings change; a newcomer following a link should
// not land on nothing.
func TestRelativeLinksResolve(t *testing.T) {
	root, _ := modulePackages(t)
	pages := markdownPages(t, root)
	require.NotEmpty(t, pages)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		text, err := os.ReadFile(page)
		require.NoError(t, err)
		anchors[page] = pageAnchors(string(text))
		return anchors[page]
	}
	for _, page := range pages {
		text, err := os.ReadFile(page)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, page)
		for _, l := range relativeLinks(string(text)) {
			path, fragment, _ := strings.Cut(l.target, "#")
			dest := page
			if path != "" {
				dest = filepath.Join(filepath.Dir(page), filepath.FromSlash(path))
			}
			if _, err := os.Stat(dest); err != nil {
				assert.Failf(t, "a link leads nowhere", "%s:%d: %s: no such file", rel, l.line, l.target)
				continue
			}
			if fragment != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[fragment] {
				assert.Failf(t, "a link leads nowhere", "%s:%d: %s: no heading or anchor %q there", rel, l.line, l.target, fragment)
			}
		}
	}
}

// markdownPages returns every .md file under root, .git left out.
func markdownPages(t *testing.T, root string) []string {
	t.Helper()
	var pages []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return nil
	})
	require.NoError(t, err)
	return pages
}

type link struct {
	target string
	line   int
}

var (
	linkTarget = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	htmlAnchor = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlTag    = regexp.MustCompile(`<[^>]*>`)
)

// relativeLinks returns the targets of the page's inline links and images
// that stay in the repository (no scheme), outside fenced code blocks.
func relativeLinks(text string) []link {
	var out []link
	for i, line := range outsideFences(text) {
		for _, m := range linkTarget.FindAllStringSubmatch(line, -1) {
			if t := m[1]; !strings.Contains(t, "://") && !strings.HasPrefix(t, "mailto:") {
				out = append(out, link{target: t, line: i + 1})
			}
		}
	}
	return out
}

// pageAnchors returns the anchors a page offers: its headings' slugs, with
// GitHub's -1, -2 suffixes for repeats, and its explicit <a id>s.
func pageAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range outsideFences(text) {
		if m := heading.FindStringSubmatch(line); m != nil {
			s := slug(m[1])
			if n, dup := seen[s]; dup {
				seen[s] = n + 1
				s += "-" + strconv.Itoa(n+1)
			} else {
				seen[s] = 0
			}
			out[s] = true
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// slug is GitHub's anchor of a heading: lower case, tags and punctuation
// dropped (letters, digits, marks, '_' and '-' stay), each space a '-'.
func slug(h string) string {
	h = htmlTag.ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// outsideFences returns the page's lines, those inside ``` blocks blanked
// (their line numbers kept): a link or a '#' there is code, not Markdown.
func outsideFences(text string) []string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			lines[i] = ""
		} else if in {
			lines[i] = ""
		}
	}
	return lines
}

// The anchors the pages link to, as GitHub makes them.
func TestSlugIsGitHubs(t *testing.T) {
	for heading, want := range map[string]string{
		"Handoff (`handoff/`)":                       "handoff-handoff",
		"Scaling out (2026-11-25)":                   "scaling-out-2026-11-25",
		"Against Redis + Lua: every path users take": "against-redis--lua-every-path-users-take",
		"Envoy's API against envoyproxy/ratelimit":   "envoys-api-against-envoyproxyratelimit",
		"How `make bench-compare` measures":          "how-make-bench-compare-measures",
		"Memory layout and measured cost":            "memory-layout-and-measured-cost",
		"What AP costs in accuracy":                  "what-ap-costs-in-accuracy",
	} {
		assert.Equal(t, want, slug(heading), heading)
	}
	a := pageAnchors("# A\n## B\n```\n## not a heading\n```\n## B\n<a id=\"old-name\"></a>\n")
	assert.Equal(t, map[string]bool{"a": true, "b": true, "b-1": true, "old-name": true}, a)
}

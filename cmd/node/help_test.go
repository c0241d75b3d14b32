package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// registeredCommands returns the commands dispatch knows: the string
// cases of its switch, read from the source, so that a command added
// there and to no help text fails TestEveryCommandIsDocumented.
func registeredCommands(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "cli.go", nil, 0)
	require.NoError(t, err)
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "dispatch" {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if cc, ok := n.(*ast.CaseClause); ok {
				for _, e := range cc.List {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						name, err := strconv.Unquote(lit.Value)
						require.NoError(t, err)
						names = append(names, name)
					}
				}
			}
			return true
		})
	}
	require.NotEmpty(t, names, "cli.go: dispatch's switch not found")
	slices.Sort(names)
	return names
}

// Every command the binary dispatches is in `help`, in the last line of
// serve's --help, in docs/api.md's "The command line", in the cmd/node
// row of docs/design.md's layout, and (the client commands) in the
// README's "From a shell" line; and each prints its own usage for --help.
func TestEveryCommandIsDocumented(t *testing.T) {
	cmds := registeredCommands(t)
	client := slices.DeleteFunc(slices.Clone(cmds), func(c string) bool {
		return c == "serve" || c == "ratelimit" || c == "help"
	})

	code, help, _ := cli(t, "help")
	require.Equal(t, exitOK, code)
	for _, c := range cmds {
		assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(c)+`\b`, help, "peerlimit-node help does not list %q", c)
	}

	code, _, serveHelp := cli(t, "--help")
	require.Equal(t, exitOK, code)
	_, others, ok := strings.Cut(serveHelp, "Other commands")
	require.True(t, ok, "serve --help ends with the other commands:\n%s", serveHelp)
	for _, c := range cmds {
		if c != "serve" && c != "help" {
			assert.Regexp(t, `\b`+regexp.QuoteMeta(c)+`\b`, others, "serve --help's last lines do not name %q", c)
		}
	}

	for _, c := range cmds {
		if c == "help" {
			continue
		}
		code, out, errOut := cli(t, c, "--help")
		assert.Equal(t, exitOK, code, "%s --help", c)
		usage := out + errOut
		want := "Usage: peerlimit-node " + c
		if c == "serve" {
			want = "Usage: peerlimit-node [serve]"
		}
		assert.Contains(t, usage, want, "%s --help prints another command's usage", c)
		assert.NotRegexp(t, `required[^\n]*\n?[^\n]*\(default `, usage, "%s --help: a required flag with a default", c)
	}

	api := section(t, readDoc(t, "docs/api.md"), "## The command line")
	for _, c := range cmds {
		if c != "help" {
			assert.Regexp(t, "(peerlimit-node |`)"+regexp.QuoteMeta(c)+`\b`, api, "docs/api.md, The command line, does not name %q", c)
		}
	}
	layout := section(t, readDoc(t, "docs/design.md"), "## Code layout")
	row := regexp.MustCompile("(?m)^\\| `cmd/node` \\|.*$").FindString(layout)
	require.NotEmpty(t, row, "docs/design.md: no cmd/node row in the layout")
	for _, c := range client {
		assert.Contains(t, row, "`"+c+"`", "docs/design.md's cmd/node row does not name %q", c)
	}
	shell := regexp.MustCompile("From a shell\\*\\*: `peerlimit-node ([a-z|]+)`").FindStringSubmatch(readDoc(t, "README.md"))
	require.Len(t, shell, 2, "README.md: no \"From a shell: `peerlimit-node a|b|…`\" line")
	assert.ElementsMatch(t, client, strings.Split(shell[1], "|"), "README.md's From a shell line and the client commands")
}

// readDoc reads a file of the repository by its path from the root.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(path)))
	require.NoError(t, err)
	return string(b)
}

// section is the part of doc from heading to the next heading of the same
// level or higher.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading)
	require.True(t, i >= 0, "no heading %q", heading)
	_, rest, _ := strings.Cut(doc[i+1:], "\n")
	level := strings.Repeat("#", strings.Index(heading, " "))
	for i, line := range strings.Split(rest, "\n") {
		if strings.HasPrefix(line, "#") && !strings.HasPrefix(line, level+"#") {
			return strings.Join(strings.Split(rest, "\n")[:i], "\n")
		}
	}
	return rest
}

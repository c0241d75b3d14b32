package httpapi

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// httpapi links no gRPC (docs/design.md, "Code layout"): a program that
// serves only the HTTP API should not carry gRPC's ~60 packages, and the
// package that does need gRPC for the same view (envoyrls) hands it over
// as a gRPC-free rlconfig.View. This asks the go tool for the package's
// dependencies, tests excluded, and names the import chain that brings a
// google.golang.org/grpc package in.
func TestLinksNoGRPC(t *testing.T) {
	goTool, err := exec.LookPath("go") // go test puts its own go first on PATH
	require.NoError(t, err, "the go tool lists this package's dependencies")
	out, err := exec.Command(goTool, "list", "-deps", "-f", `{{.ImportPath}}:{{join .Imports ","}}`, ".").Output()
	require.NoError(t, err, "go list -deps")
	imports := map[string][]string{}
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		pkg, deps, _ := strings.Cut(strings.TrimSpace(line), ":")
		imports[pkg] = strings.Split(deps, ",")
	}
	const self = "github.com/peerlimit/peerlimit/httpapi"
	require.Contains(t, imports, self, "go list -deps lists the package itself:\n%s", out)
	chain := importChain(imports, self, isGRPC)
	assert.Nil(t, chain, "httpapi links gRPC: %s", strings.Join(chain, " → "))
}

func isGRPC(pkg string) bool {
	return pkg == "google.golang.org/grpc" || strings.HasPrefix(pkg, "google.golang.org/grpc/")
}

// importChain returns the shortest chain of imports from root to a
// package that matches, or nil when none does.
func importChain(imports map[string][]string, root string, match func(string) bool) []string {
	from := map[string]string{root: ""}
	for queue := []string{root}; len(queue) > 0; queue = queue[1:] {
		pkg := queue[0]
		if match(pkg) {
			var chain []string
			for p := pkg; p != ""; p = from[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, dep := range imports[pkg] {
			if _, seen := from[dep]; !seen && dep != "" {
				from[dep] = pkg
				queue = append(queue, dep)
			}
		}
	}
	return nil
}

// The failure names the chain that brings gRPC in, the shortest one.
func TestImportChainFindsTheShortestPath(t *testing.T) {
	imports := map[string][]string{
		"a": {"b", "c"}, "b": {"google.golang.org/grpc/status"}, "c": {"d"},
		"d": {"google.golang.org/grpc"}, "google.golang.org/grpc/status": {"google.golang.org/grpc/codes"},
	}
	assert.Equal(t, []string{"a", "b", "google.golang.org/grpc/status"}, importChain(imports, "a", isGRPC))
	assert.Nil(t, importChain(map[string][]string{"a": {"b"}, "b": {""}}, "a", isGRPC))
	assert.True(t, isGRPC("google.golang.org/grpc"))
	assert.False(t, isGRPC("google.golang.org/grpcx"), "another module's package")
}

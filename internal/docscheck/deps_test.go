package docscheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's "Dependencies" section says why each module go.mod
// requires directly is used: every one appears there in backquotes, and
// none that go.mod no longer requires.
func TestREADMEExplainsEveryDependency(t *testing.T) {
	root, _ := modulePackages(t)
	direct := directRequirements(t, root)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	section, err := sectionOf(string(readme), "## Dependencies")
	require.NoError(t, err)

	named := quoted(section)
	for _, m := range direct {
		assert.True(t, named[m], "README.md, Dependencies: %s is required directly by go.mod; say why it is used", m)
	}
	for _, m := range tableFirstColumn(section) {
		if strings.Contains(m, ".") && strings.Contains(m, "/") && !strings.HasPrefix(m, "…") {
			assert.Contains(t, direct, m, "README.md, Dependencies: %s is not a direct requirement of go.mod", m)
		}
	}
}

// directRequirements returns the module paths go.mod requires without
// "// indirect".
func directRequirements(t *testing.T, root string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go tool reads go.mod")
	cmd := exec.Command(goTool, "mod", "edit", "-json")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "go mod edit -json")
	var mod struct {
		Require []struct {
			Path     string
			Indirect bool
		}
	}
	require.NoError(t, json.Unmarshal(out, &mod))
	var direct []string
	for _, r := range mod.Require {
		if !r.Indirect {
			direct = append(direct, r.Path)
		}
	}
	require.NotEmpty(t, direct)
	return direct
}

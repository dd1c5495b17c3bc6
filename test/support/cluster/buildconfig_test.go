package cluster

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOneBuildConfiguration: every build of this module outside `go test` (the Makefile's
// go-build, its GO_RUN for the hack/ tools, `make lint`'s go vet, and BuildPluginCached here)
// uses the same configuration, CGO_ENABLED=0 and -trimpath, so the packages one of them
// compiles are reused by the others. Compiled in another configuration they are compiled again: on a fresh machine
// that was a whole extra compile of the dependencies (931 instead of 598 CPU-seconds for vet and
// the binary).
func TestOneBuildConfiguration(t *testing.T) {
	build := filepath.Join("test", "support", "cluster", "build.go")
	for _, c := range []struct {
		file, line string
		want       []string
	}{
		{"Makefile", `(?m)^go-build = .*$`, []string{"CGO_ENABLED=0 ", "-trimpath"}},
		{"Makefile", `(?m)^GO_RUN := .*$`, []string{"CGO_ENABLED=0 ", "-trimpath"}},
		{filepath.Join("hack", "lint.sh"), `(?m)^[^#\n]*go vet .*$`, []string{"CGO_ENABLED=0 ", "-trimpath"}},
		{build, `(?m)^\s*env := append\(os\.Environ\(\), .*$`, []string{`"CGO_ENABLED=0"`}},
		{build, `(?m)^\s*cmd := exec\.Command\("go", "build", .*$`, []string{`"-trimpath"`}},
	} {
		b, err := os.ReadFile(filepath.Join(RepoRoot(), c.file))
		if err != nil {
			t.Fatal(err)
		}
		lines := regexp.MustCompile(c.line).FindAllString(string(b), -1)
		if len(lines) != 1 {
			t.Errorf("%s: %d lines match %s, want 1", c.file, len(lines), c.line)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(lines[0], w) {
				t.Errorf("%s: %q lacks %s", c.file, strings.TrimSpace(lines[0]), w)
			}
		}
	}
}

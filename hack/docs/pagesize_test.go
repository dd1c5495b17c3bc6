package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// pageSizeRE finds what the docs say of the page of the namespace-wide lists: "pages of 100"
// (bold or not) and "100 a page".
var pageSizeRE = regexp.MustCompile(`pages of \**(\d{1,3}(?:,\d{3})*)\**|(\d{1,3}(?:,\d{3})*) a page`)

// TestDocsPageSize: every page size the user docs state is plugin.PageSize, the one the reads
// use (docs/benchmarks.md is the run's output, and states the run's own).
func TestDocsPageSize(t *testing.T) {
	docs, err := DocFiles(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, doc := range docs {
		if filepath.Base(doc) == "benchmarks.md" {
			continue
		}
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range pageSizeRE.FindAllSubmatch(b, -1) {
			n := strings.ReplaceAll(string(m[1])+string(m[2]), ",", "")
			found++
			if got, _ := strconv.Atoi(n); got != plugin.PageSize {
				t.Errorf("%s: %q: the reads use pages of %d (plugin.PageSize)", filepath.Base(doc), m[0], plugin.PageSize)
			}
		}
	}
	if found < 3 {
		t.Errorf("found %d statements of the page size in the docs, want at least 3 (README, security.md, design.md)", found)
	}
}

package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// emitted is one thing a user sees: an Event reason, an alert, a failure kind or an exit code,
// as the troubleshooting page must head its entry (the name in backquotes), and where the code
// defines it.
type emitted struct{ heading, source string }

// enumerateEmitted reads, from the code under root, everything docs/troubleshooting.md must
// have an entry for:
//   - Event reasons: every string constant named Reason* in plugin/..., and every string
//     literal passed as the reason of an Event or Eventf call (a reason written inline);
//   - failure kinds: the controller's Failure* constants (the reason label of its
//     reconcile_errors_total);
//   - exit codes: the Exit* constants of plugin/cli and plugin/cmd, by value;
//   - alerts: every `- alert: Name` of the chart's templates.
func enumerateEmitted(root string) ([]emitted, error) {
	var out []emitted
	seen := map[string]bool{}
	add := func(heading, source string) {
		if !seen[heading] {
			seen[heading] = true
			out = append(out, emitted{heading, source})
		}
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(root, "plugin"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", path, err)
		}
		rel, _ := filepath.Rel(root, path)
		dir := filepath.ToSlash(filepath.Dir(rel))
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if i >= len(n.Values) {
						continue
					}
					lit, ok := n.Values[i].(*ast.BasicLit)
					if !ok {
						continue
					}
					where := rel + ": " + name.Name
					switch {
					case strings.HasPrefix(name.Name, "Reason") && lit.Kind == token.STRING:
						add("`"+unquote(lit.Value)+"`", where)
					case strings.HasPrefix(name.Name, "Failure") && dir == "plugin/controller" && lit.Kind == token.STRING:
						add("`"+unquote(lit.Value)+"`", where)
					case strings.HasPrefix(name.Name, "Exit") && (dir == "plugin/cli" || dir == "plugin/cmd") && lit.Kind == token.INT:
						add("Exit code `"+lit.Value+"`", where)
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Event" && sel.Sel.Name != "Eventf") || len(n.Args) < 3 {
					return true
				}
				// (object, type, reason, message...): the reason, when written inline.
				if lit, ok := n.Args[2].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					add("`"+unquote(lit.Value)+"`", fmt.Sprintf("%s: an Event", fset.Position(n.Pos())))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	alert := regexp.MustCompile(`(?m)^\s*-\s*alert:\s*([A-Za-z0-9_]+)\s*$`)
	tmpls, err := filepath.Glob(filepath.Join(root, "charts", "*", "templates", "*.yaml"))
	if err != nil {
		return nil, err
	}
	for _, p := range tmpls {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, p)
		for _, m := range alert.FindAllStringSubmatch(string(b), -1) {
			add("`"+m[1]+"`", rel+": alert")
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].heading < out[j].heading })
	return out, nil
}

func unquote(s string) string {
	u, err := strconv.Unquote(s)
	if err != nil {
		return s
	}
	return u
}

// missingEntries returns what has no heading of its own in the page: a Markdown heading line
// that contains it.
func missingEntries(page string, all []emitted) []string {
	var headings []string
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, "#") {
			headings = append(headings, l)
		}
	}
	var missing []string
	for _, e := range all {
		found := false
		for _, h := range headings {
			if strings.Contains(h, e.heading) {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, fmt.Sprintf("%s (%s)", e.heading, e.source))
		}
	}
	return missing
}

// TestTroubleshootingCoversEverything: docs/troubleshooting.md has an entry (a heading naming
// it) for every Event reason, alert, controller failure kind and exit code the code can emit,
// enumerated from the code, not from a list kept by hand.
func TestTroubleshootingCoversEverything(t *testing.T) {
	root := filepath.Join("..", "..")
	all, err := enumerateEmitted(root)
	if err != nil {
		t.Fatal(err)
	}
	// The enumeration itself finds each family (a refactor that hides one fails here).
	for _, want := range []string{"`ConfigAttachFailed`", "`OwnerReferenceFailed`", "`ConfigMapAttacherNoLeader`", "`forbidden`", "`panic`", "Exit code `2`"} {
		if len(missingEntries("# "+want, all)) == len(all) {
			t.Errorf("the code enumeration found no %s: %v", want, all)
		}
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missingEntries(string(page), all) {
		t.Errorf("docs/troubleshooting.md has no entry for %s: add a heading naming it, with the cause and the fix", m)
	}
	t.Logf("%d entries checked", len(all))

	// Planted: the page without one entry's heading fails the check, naming it.
	var kept []string
	for _, l := range strings.Split(string(page), "\n") {
		if !strings.HasPrefix(l, "### `OwnerReferenceBlocked`") {
			kept = append(kept, l)
		}
	}
	if m := missingEntries(strings.Join(kept, "\n"), all); len(m) != 1 || !strings.HasPrefix(m[0], "`OwnerReferenceBlocked`") {
		t.Errorf("with the OwnerReferenceBlocked entry removed: missing %q, want exactly it", m)
	}
}

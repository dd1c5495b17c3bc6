package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The map cannot drift: every code reference the docs make in backquotes names something that
// exists in the tree. A reference is one of these classes (anything else in backquotes, flags,
// YAML fields, shell, label keys and API groups, is not a code reference and is left alone):
//   - a path: its first segment is a top-level directory or file of the repository
//     (`plugin/send.go`, `test/support/cluster`, `examples/controller.yaml`), with an optional
//     `:line` or `#anchor`; it must exist;
//   - a qualified Go name: `pkg.Name` or `pkg.Type.Member` whose first segment is the name of a
//     package of the module (`plugin.Reconcile`, `plugin.Attacher.Reconcile`); the package must
//     declare Name, and Type must have Member as a method or field;
//   - a method of a type: `Type.Member` where Type is a type the module declares
//     (`Attacher.Reconcile`); Member must be its method or field;
//   - a test: `TestX`, `BenchmarkX` or `FuzzX`, with an optional `/subtest`; a function of that
//     name must exist in a _test.go file;
//   - a name placed in a package or file: a path of the tree followed by a name (`plugin/users.go`
//     `ReadUsage`, `plugin/cmd` `Job.Main`, `test/core` `TestMetadataOnlyRequests`): that file
//     or package declares it (Type.Member: the type is declared there and has the member);
//   - the files of a package and what they hold, in a table: a row whose first cell is a
//     package directory (`plugin/controller`) names files (`informers.go`) that must be in it; a
//     row whose first cell is bare files (`send.go`, `readusage.go`), in a table that follows a line
//     naming its directory (The files of `plugin/`), names files that must be in that directory
//     and names (`call`, `OwnerPatch`) that its package must declare (at top level, or as a
//     method or field).
// A trailing `()` is allowed on names.

// docPages are the pages whose references are checked: the README, docs/, the chart's README
// template and the examples' READMEs. The changelog is history: it may name what was removed.
func docPages(root string) ([]string, error) {
	pages := []string{filepath.Join(root, "README.md"), filepath.Join(root, "charts", "configmap-attacher", "README.md.gotmpl")}
	for _, pattern := range []string{"docs/*.md", "examples/*.md", "examples/*/*.md", "examples/*/*/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, err
		}
		pages = append(pages, m...)
	}
	var out []string
	for _, p := range pages {
		if filepath.Base(p) == "changelog.md" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out, nil
}

// goTree is what the module declares, by the names docs use.
type goTree struct {
	// pkgs: package name → the names its files declare at top level.
	pkgs map[string]map[string]bool
	// members: type name → its methods and fields (across the module: the same type name in
	// two packages pools its members, which can only hide a stale reference, never invent one).
	members map[string]map[string]bool
	// tests: Test*, Benchmark*, Fuzz* functions of _test.go files.
	tests map[string]bool
	// dirs and files: what each directory's package and each file (slash paths relative to the
	// root) declare, top-level names and "Type.Member" alike.
	dirs, files map[string]map[string]bool
}

// declare records name (and, for a member, "Type.Member" and the bare member) in the
// directory's and the file's sets.
func (t *goTree) declare(file string, names ...string) {
	dir := path.Dir(file)
	if t.dirs[dir] == nil {
		t.dirs[dir] = map[string]bool{}
	}
	if t.files[file] == nil {
		t.files[file] = map[string]bool{}
	}
	for _, n := range names {
		t.dirs[dir][n] = true
		t.files[file][n] = true
	}
}

// readTree parses every Go file under root (not testdata, bin, dist or dot directories).
func readTree(root string) (*goTree, error) {
	t := &goTree{pkgs: map[string]map[string]bool{}, members: map[string]map[string]bool{}, tests: map[string]bool{},
		dirs: map[string]map[string]bool{}, files: map[string]map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "dist" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		t.add(filepath.ToSlash(rel), f, strings.HasSuffix(name, "_test.go"))
		return nil
	})
	return t, err
}

func (t *goTree) member(typ, name string) {
	if t.members[typ] == nil {
		t.members[typ] = map[string]bool{}
	}
	t.members[typ][name] = true
}

func (t *goTree) add(file string, f *ast.File, test bool) {
	pkg := f.Name.Name
	if t.pkgs[pkg] == nil {
		t.pkgs[pkg] = map[string]bool{}
	}
	decl := t.pkgs[pkg]
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				decl[d.Name.Name] = true
				t.declare(file, d.Name.Name)
				if test && regexp.MustCompile(`^(Test|Benchmark|Fuzz)`).MatchString(d.Name.Name) {
					t.tests[d.Name.Name] = true
				}
				continue
			}
			if typ := recvType(d.Recv.List[0].Type); typ != "" {
				t.member(typ, d.Name.Name)
				t.declare(file, typ+"."+d.Name.Name, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					decl[s.Name.Name] = true
					t.declare(file, s.Name.Name)
					t.member(s.Name.Name, "") // the type exists, even without members
					if st, ok := s.Type.(*ast.StructType); ok {
						for _, fl := range st.Fields.List {
							for _, n := range fl.Names {
								t.member(s.Name.Name, n.Name)
								t.declare(file, s.Name.Name+"."+n.Name, n.Name)
							}
							if len(fl.Names) == 0 { // embedded: its name is the type's
								if n := recvType(fl.Type); n != "" {
									t.member(s.Name.Name, n)
									t.declare(file, s.Name.Name+"."+n, n)
								}
							}
						}
					}
					if it, ok := s.Type.(*ast.InterfaceType); ok {
						for _, m := range it.Methods.List {
							for _, n := range m.Names {
								t.member(s.Name.Name, n.Name)
								t.declare(file, s.Name.Name+"."+n.Name, n.Name)
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						decl[n.Name] = true
						t.declare(file, n.Name)
					}
				}
			}
		}
	}
}

// recvType is the type name of a receiver or embedded field: T, *T, T[P], pkg.T.
func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.IndexListExpr:
		return recvType(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

var (
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	fence    = regexp.MustCompile("(?m)^\\s*```")
	goName   = regexp.MustCompile(`^[A-Za-z_]\w*(\.[A-Za-z_]\w*){1,2}$`)
	testName = regexp.MustCompile(`^(Test|Benchmark|Fuzz)[A-Z0-9_]\w*(/\S*)?$`)
	pathLike = regexp.MustCompile(`^\.?[\w.-]+(/[\w.*-]*)*(:\d+)?(#[\w-]*)?$`)
)

// inlineSpans are the backquoted spans of a Markdown page outside fenced blocks, with their
// line numbers.
func inlineSpans(md string) []struct {
	line int
	text string
} {
	var out []struct {
		line int
		text string
	}
	for i, l := range proseLines(md) {
		for _, m := range codeSpan.FindAllStringSubmatch(l, -1) {
			out = append(out, struct {
				line int
				text string
			}{i + 1, m[1]})
		}
	}
	return out
}

// proseLines are a page's lines with those of fenced blocks (and the fences) blanked, so that
// indexes stay line numbers.
func proseLines(md string) []string {
	lines := strings.Split(md, "\n")
	in := false
	for i, l := range lines {
		if fence.MatchString(l) {
			in = !in
			lines[i] = ""
		} else if in {
			lines[i] = ""
		}
	}
	return lines
}

// staleRef checks one span: "" when it is no code reference or names something that exists,
// else what is wrong.
func staleRef(root string, t *goTree, topLevel map[string]bool, span string) string {
	s := strings.TrimSuffix(strings.TrimSpace(span), "()")
	switch {
	case testName.MatchString(s):
		name, _, _ := strings.Cut(s, "/")
		if !t.tests[name] {
			return "no test function " + name
		}
		return ""
	case strings.Contains(s, "/") && pathLike.MatchString(s) && !strings.Contains(s, "*"):
		p := strings.TrimPrefix(s, "./")
		first, _, _ := strings.Cut(p, "/")
		if !topLevel[first] {
			return "" // an API group, a label key, a plugin name: not a path of the tree
		}
		p = strings.TrimSuffix(regexp.MustCompile(`(:\d+)?(#[\w-]*)?$`).ReplaceAllString(p, ""), "/...")
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			return "no such file or directory " + p
		}
		return ""
	case goName.MatchString(s):
		parts := strings.Split(s, ".")
		if decl, ok := t.pkgs[parts[0]]; ok && isExported(parts[1]) && isPackageRef(parts) {
			if !decl[parts[1]] {
				return "package " + parts[0] + " declares no " + parts[1]
			}
			if len(parts) == 3 && !t.members[parts[1]][parts[2]] {
				return parts[1] + " has no method or field " + parts[2]
			}
			return ""
		}
		if len(parts) == 2 && isExported(parts[0]) {
			if m, ok := t.members[parts[0]]; ok && !m[parts[1]] {
				return parts[0] + " has no method or field " + parts[1]
			}
		}
	}
	return ""
}

// isPackageRef: `pkg.Name` or `pkg.Type.Member` with an exported or lowerCamel second part;
// `plugin.yaml`-like file names never reach here (they have no second identifier part after a
// package name the module declares… except where a package is named like a file's stem, hence
// the extension check).
func isPackageRef(parts []string) bool {
	switch strings.ToLower(parts[len(parts)-1]) {
	case "go", "md", "yaml", "yml", "json", "sh", "txt", "tpl", "svg", "log":
		return false
	}
	return true
}

func isExported(s string) bool { return s != "" && s[0] >= 'A' && s[0] <= 'Z' }

var (
	goIdent = regexp.MustCompile(`^[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$`)
	heading = regexp.MustCompile(`^#+ `)
)

// declaredIn checks a name placed in a file or package directory (rel, a slash path of the
// tree): "" when rel holds no Go code or declares name, else what is wrong.
func (t *goTree) declaredIn(rel, name string) string {
	name, _, _ = strings.Cut(strings.TrimSuffix(name, "()"), "/") // a test's subtest
	set, where := t.dirs[strings.TrimSuffix(rel, "/")], "package "+rel
	if strings.HasSuffix(rel, ".go") {
		set, where = t.files[rel], rel
	}
	if set == nil || !goIdent.MatchString(name) || set[name] {
		return ""
	}
	return where + " declares no " + name
}

// span is one backquoted span of a line and where it stands.
type span struct {
	text       string
	start, end int
}

func lineSpans(l string) []span {
	var out []span
	for _, m := range codeSpan.FindAllStringSubmatchIndex(l, -1) {
		out = append(out, span{strings.TrimSpace(l[m[2]:m[3]]), m[0], m[1]})
	}
	return out
}

// placedRefs checks the names a page places in a file or package: a path followed by a name,
// and the rows of the tables of a package's files (see the classes above).
func placedRefs(root string, t *goTree, topLevel map[string]bool, md string) []struct {
	line int
	text string
	why  string
} {
	var out []struct {
		line int
		text string
		why  string
	}
	report := func(i int, text, why string) {
		if why != "" {
			out = append(out, struct {
				line int
				text string
				why  string
			}{i + 1, text, why})
		}
	}
	// treeDir: the span as a directory of the tree holding Go code, or "".
	treeDir := func(s string) string {
		p := strings.TrimSuffix(strings.TrimPrefix(s, "./"), "/")
		first, _, _ := strings.Cut(p, "/")
		if !topLevel[first] || t.dirs[p] == nil {
			return ""
		}
		return p
	}
	// treeFile: the span as a Go file of the tree, or "".
	treeFile := func(s string) string {
		p := strings.TrimPrefix(s, "./")
		if t.files[p] == nil {
			return ""
		}
		return p
	}
	dirCtx := ""
	for i, l := range proseLines(md) {
		spans := lineSpans(l)
		// A path followed by a name: the name is declared there.
		for j := 1; j < len(spans); j++ {
			if strings.TrimSpace(l[spans[j-1].end:spans[j].start]) != "" {
				continue
			}
			where := treeFile(spans[j-1].text)
			if where == "" {
				where = treeDir(spans[j-1].text)
			}
			if where != "" {
				report(i, spans[j].text, t.declaredIn(where, spans[j].text))
			}
		}
		trimmed := strings.TrimSpace(l)
		if !strings.HasPrefix(trimmed, "|") {
			if heading.MatchString(trimmed) {
				dirCtx = ""
			}
			for _, sp := range spans {
				if d := treeDir(sp.text); d != "" {
					dirCtx = d
				}
			}
			continue
		}
		cells := strings.Split(strings.Trim(trimmed, "|"), "|")
		first := lineSpans(cells[0])
		if len(first) == 0 {
			continue
		}
		rest := lineSpans(strings.Join(cells[1:], "|"))
		if d := treeDir(first[0].text); d != "" && len(first) == 1 {
			// A package's row: the files it names are its own (its names may be other
			// packages', a type's fields, API kinds: placed names are checked above).
			for _, sp := range rest {
				if strings.HasSuffix(sp.text, ".go") && !strings.Contains(sp.text, "/") {
					if _, err := os.Stat(filepath.Join(root, d, sp.text)); err != nil {
						report(i, sp.text, "no file "+sp.text+" in "+d)
					}
				}
			}
			continue
		}
		bare := true
		for _, sp := range first {
			bare = bare && strings.HasSuffix(sp.text, ".go") && !strings.Contains(sp.text, "/")
		}
		if !bare || dirCtx == "" {
			continue
		}
		// A file's row in the table of a package's files: every file and name is the package's.
		for _, sp := range append(first, rest...) {
			if strings.HasSuffix(sp.text, ".go") && !strings.Contains(sp.text, "/") {
				if _, err := os.Stat(filepath.Join(root, dirCtx, sp.text)); err != nil {
					report(i, sp.text, "no file "+sp.text+" in "+dirCtx)
				}
				continue
			}
			if strings.Contains(sp.text, "/") && strings.Contains(sp.text, ".") {
				continue // an import path: not the package's
			}
			for _, n := range strings.Split(sp.text, "/") {
				report(i, sp.text, t.declaredIn(dirCtx, n))
			}
		}
	}
	return out
}

// checkRefs returns every stale reference of the pages, as "page:line: `span`: why".
func checkRefs(root string, pages []string, t *goTree) ([]string, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	topLevel := map[string]bool{}
	for _, e := range entries {
		// bin and dist are build output, not the tree.
		if (!strings.HasPrefix(e.Name(), ".") || e.Name() == ".ci") && e.Name() != "bin" && e.Name() != "dist" {
			topLevel[e.Name()] = true
		}
	}
	var out []string
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, p)
		for _, sp := range inlineSpans(string(b)) {
			if why := staleRef(root, t, topLevel, sp.text); why != "" {
				out = append(out, rel+":"+strconv.Itoa(sp.line)+": `"+sp.text+"`: "+why)
			}
		}
		for _, sp := range placedRefs(root, t, topLevel, string(b)) {
			out = append(out, rel+":"+strconv.Itoa(sp.line)+": `"+sp.text+"`: "+sp.why)
		}
	}
	return out, nil
}

// TestDocsCodeReferencesResolve: every code reference of the user and design docs names a
// file, package member, method or test that exists.
func TestDocsCodeReferencesResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	tree, err := readTree(root)
	if err != nil {
		t.Fatal(err)
	}
	pages, err := docPages(root)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := checkRefs(root, pages, tree)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stale {
		t.Error(s)
	}
}

// TestDocsCodeReferencesPlanted: one planted stale name per class is caught (a path, a
// package's name, a type's member, a test, a name placed in a file or package, a file in a
// package's row, a name and a file in a table of a package's files), and the same page's live
// names and non-references are not.
func TestDocsCodeReferencesPlanted(t *testing.T) {
	root := filepath.Join("..", "..")
	tree, err := readTree(root)
	if err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(t.TempDir(), "page.md")
	md := strings.Join([]string{
		"Live: `plugin/send.go`, `plugin/send.go:12`, `docs/step.md#the-step`, `plugin.NewUsage`, `./plugin/...`,",
		"`plugin.Attacher.Reconcile`, `Attacher.Reconcile()`, `TestDocsCodeReferencesResolve`.",
		"Not references: `apps/v1`, `configmap-attacher/revisioned`, `-namespaces a,b`, `spec.selector`,",
		"`metadata.ownerReferences`, `app.kubernetes.io/name`, `kubectl get rs`, `cleanup.enabled`, `bin/bench/`.",
		"Stale: `plugin/classify.go`, `plugin.MissingOwnersGone`, `plugin.Attacher.Adopt`,",
		"`Attacher.PlanAdoption`, `TestNoSuchThing`.",
		"```sh",
		"echo `plugin.InsideAFence`",
		"```",
		"Placed, live: `plugin/readusage.go` `ReadUsage`, `plugin/cmd/stepplugin` `Command.Main`, `plugin/step` `TestStepEveryUserCounts`.",
		"Placed, stale: `plugin/users.go` `ReadUsageGone`, `plugin/cmd` `StepPlugin.Main`.",
		"",
		"| package | files |",
		"|---|---|",
		"| `plugin/controller` | `informers.go`, `cache.go`, `healthgone.go` |",
		"",
		"The files of `plugin/`:",
		"",
		"| file | what |",
		"|---|---|",
		"| `send.go`, `readusage.go` | `call`, `OwnerPatch`/`ownerPatchFor`, `Attacher.ReadUsage`, from `k8s.io/kubernetes/pkg/api/v1/pod` |",
		"| `owners.go` | `MissingOwnersGone`, `logger.go` |",
	}, "\n")
	if err := os.WriteFile(page, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	stale, err := checkRefs(root, []string{page}, tree)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range stale {
		_, span, _ := strings.Cut(s, "`")
		span, _, _ = strings.Cut(span, "`")
		got = append(got, span)
	}
	want := []string{"plugin/classify.go", "plugin.MissingOwnersGone", "plugin.Attacher.Adopt", "Attacher.PlanAdoption", "TestNoSuchThing",
		"ReadUsageGone", "StepPlugin.Main", "healthgone.go", "MissingOwnersGone", "logger.go"}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("stale references found %q, want %q\n%s", got, want, strings.Join(stale, "\n"))
	}
}

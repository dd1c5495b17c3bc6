// Package stamp keeps the release version in one place, hack/release/VERSION, and every other
// mention of it in the tree in step: the chart's version and appVersion, the image tag and the
// release download URLs in examples/ and docs/, the ?ref= of the Kustomize remote bases, and the
// chart labels of the generated Kustomize base. Scan finds every mention and says which differ
// from VERSION (`go run ./hack/release check-version`, and this package's test in `make
// check`); Set rewrites them all (`make set-version VERSION=vX.Y.Z`); Text stamps one file's
// copy for dist/ (make release).
//
// A mention is found by what precedes it (the image's repository, the download path, ...), and
// the value is everything up to the next delimiter, so a tag that is not a version at all
// (`:latest`, `?ref=main`) is reported as a mismatch rather than left unnoticed. A
// placeholder in prose (`…/configmap-attacher:<tag>`) is no image mention.
package stamp

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// File is the one source of truth, relative to the repository root.
const File = "hack/release/VERSION"

// versionRE is what VERSION may hold: a semantic version with a leading v (the git tag).
var versionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// Validate fails unless v is a release version (vMAJOR.MINOR.PATCH[-PRERELEASE]).
func Validate(v string) error {
	if !versionRE.MatchString(v) {
		return fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH[-PRERELEASE] (a git tag such as v0.2.0 or v1.0.0-rc.1)", v)
	}
	return nil
}

// ChartVersion is the chart's version for release version v: the same without the leading v
// (Helm's version is SemVer 2, which has no v).
func ChartVersion(v string) string { return strings.TrimPrefix(v, "v") }

// Rule is one kind of mention: RE's first group is the value, Chart says it is the chart's
// form (no leading v), Files (globs relative to the root, matched by path.Match on each
// directory level; "**" matches any number of directories) says where it is looked for.
type Rule struct {
	Name  string
	RE    *regexp.Regexp
	Chart bool
	Files []string
}

// Rules are every kind of mention. docs/changelog.md is not scanned: it names past releases.
var Rules = []Rule{
	{Name: "chart version", RE: regexp.MustCompile(`(?m)^version: *(\S*)\s*$`), Chart: true, Files: []string{"charts/configmap-attacher/Chart.yaml"}},
	{Name: "chart appVersion", RE: regexp.MustCompile(`(?m)^appVersion: *"?([^"\s]*)"?\s*$`), Files: []string{"charts/configmap-attacher/Chart.yaml"}},
	{Name: "image tag", RE: regexp.MustCompile(`ghcr\.io/configmap-attacher/configmap-attacher:([^\s"'@)<>` + "`" + `]+)`), Files: scanned},
	{Name: "release download", RE: regexp.MustCompile(`github\.com/configmap-attacher/configmap-attacher/releases/download/([^/\s]*)/`), Files: scanned},
	{Name: "remote base ref", RE: regexp.MustCompile(`github\.com/configmap-attacher/configmap-attacher//[^?\s]*\?ref=([^\s&"')` + "`" + `]*)`), Files: scanned},
	{Name: "mirror download", RE: regexp.MustCompile(`artifacts\.example\.com/configmap-attacher/([^/\s]*)/`), Files: scanned},
	{Name: "chart label", RE: regexp.MustCompile(`helm\.sh/chart: *"?configmap-attacher-([^"\s]*)`), Chart: true, Files: scanned},
	{Name: "argocd chart revision", RE: regexp.MustCompile(`(?m)^ *targetRevision: *"?([^"\s]*)"?\s*$`), Chart: true, Files: []string{"examples/argocd/*.yaml"}},
	{Name: "flux chart tag", RE: regexp.MustCompile(`(?m)^ *tag: *"?([^"\s]*)"?\s*$`), Chart: true, Files: []string{"examples/flux/ocirepository.yaml"}},
	{Name: "version label", RE: regexp.MustCompile(`app\.kubernetes\.io/version: *"?([^"\s]*)`), Files: []string{"examples/**"}},
	{Name: "chart from the registry", RE: regexp.MustCompile(`oci://ghcr\.io/configmap-attacher/charts/configmap-attacher --version ([^\s"'` + "`" + `]+)`), Chart: true, Files: scanned},
	{Name: "plugin log line", RE: regexp.MustCompile(`plugin=configmap-attacher version=(\S*)`), Files: []string{"docs/*.md"}},
}

// scanned are the files users copy from or read: every example, the docs but the changelog,
// the READMEs, the chart's metadata (its artifacthub.io/images annotation).
var scanned = []string{"examples/**", "docs/*.md", "README.md", "charts/configmap-attacher/README.md", "charts/configmap-attacher/Chart.yaml"}

// skipped are never scanned.
var skipped = []string{"docs/changelog.md"}

// Mention is one occurrence: File relative to the root, its 1-based Line, Value as written
// and Want (the value for the version it was checked against).
type Mention struct {
	Rule        string
	File        string
	Line        int
	Value, Want string
}

func (m Mention) String() string {
	return fmt.Sprintf("%s:%d: %s %q, want %q", m.File, m.Line, m.Rule, m.Value, m.Want)
}

// Read returns root's VERSION, validated.
func Read(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, File))
	if err != nil {
		return "", fmt.Errorf("reading the release version: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if err := Validate(v); err != nil {
		return "", fmt.Errorf("%s: %w (fix it with make set-version VERSION=vX.Y.Z)", File, err)
	}
	return v, nil
}

// Scan returns every mention under root with Want set for version v, and the files scanned.
func Scan(root, v string) ([]Mention, error) {
	files, err := files(root)
	if err != nil {
		return nil, err
	}
	var out []Mention
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		out = append(out, scanText(f, b, v)...)
	}
	return out, nil
}

// Mismatches are the mentions of Scan(root, v) whose value is not v's.
func Mismatches(root, v string) ([]Mention, error) {
	all, err := Scan(root, v)
	if err != nil {
		return nil, err
	}
	var bad []Mention
	for _, m := range all {
		if m.Value != m.Want {
			bad = append(bad, m)
		}
	}
	return bad, nil
}

// Set writes v into VERSION and into every mention under root, and returns the files it
// changed.
func Set(root, v string) ([]string, error) {
	if err := Validate(v); err != nil {
		return nil, err
	}
	files, err := files(root)
	if err != nil {
		return nil, err
	}
	var changed []string
	for _, f := range files {
		p := filepath.Join(root, f)
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		nb := Text(f, b, v)
		if bytes.Equal(b, nb) {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, nb, fi.Mode().Perm()); err != nil {
			return nil, fmt.Errorf("writing %s: %w", f, err)
		}
		changed = append(changed, f)
	}
	if err := os.WriteFile(filepath.Join(root, File), []byte(v+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", File, err)
	}
	return append(changed, File), nil
}

// Text returns b, the content of the file at rel (relative to the root: it decides which
// rules apply), with every mention set to version v.
func Text(rel string, b []byte, v string) []byte {
	ms := find(rel, b, v)
	// From the end, so the earlier offsets stay valid.
	slices.SortFunc(ms, func(a, b found) int { return b.start - a.start })
	out := slices.Clone(b)
	for _, m := range ms {
		out = append(out[:m.start:m.start], append([]byte(m.Want), out[m.end:]...)...)
	}
	return out
}

func scanText(rel string, b []byte, v string) []Mention {
	var out []Mention
	for _, m := range find(rel, b, v) {
		out = append(out, m.Mention)
	}
	slices.SortFunc(out, func(a, b Mention) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		return a.Line - b.Line
	})
	return out
}

// found is a Mention with the value's byte offsets in the file.
type found struct {
	Mention
	start, end int
}

// find is every mention in b, the content of the file at rel, checked against version v.
func find(rel string, b []byte, v string) []found {
	var out []found
	for _, r := range Rules {
		if !matchAny(r.Files, rel) {
			continue
		}
		want := v
		if r.Chart {
			want = ChartVersion(v)
		}
		for _, m := range r.RE.FindAllSubmatchIndex(b, -1) {
			out = append(out, found{Mention{Rule: r.Name, File: rel, Line: bytes.Count(b[:m[2]], []byte("\n")) + 1, Value: string(b[m[2]:m[3]]), Want: want}, m[2], m[3]})
		}
	}
	return out
}

// files are the regular files under root that some rule applies to, sorted.
func files(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "bin" || rel == "dist" || rel == "test" || rel == "plugin" || rel == "rpc") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || slices.Contains(skipped, rel) {
			return nil
		}
		for _, r := range Rules {
			if matchAny(r.Files, rel) {
				out = append(out, rel)
				break
			}
		}
		return nil
	})
	return out, err
}

func matchAny(globs []string, rel string) bool {
	for _, g := range globs {
		if dir, ok := strings.CutSuffix(g, "/**"); ok {
			if strings.HasPrefix(rel, dir+"/") {
				return true
			}
			continue
		}
		if ok, _ := filepath.Match(g, rel); ok {
			return true
		}
	}
	return false
}

// ChangelogSection returns the body of docs/changelog.md's section for version v: the "## v…"
// heading naming it (the heading may go on, e.g. "## v0.2.0 (2026-12-02)"), or, when there is
// none, "## Unreleased" with fromUnreleased true (a release built before the changelog was
// cut, e.g. a test's).
func ChangelogSection(md []byte, v string) (body string, fromUnreleased bool, err error) {
	lines := strings.SplitAfter(string(md), "\n")
	find := func(match func(h string) bool) (string, bool) {
		for i, l := range lines {
			h, ok := strings.CutPrefix(strings.TrimRight(l, "\r\n"), "## ")
			if !ok || !match(h) {
				continue
			}
			var b strings.Builder
			for _, l := range lines[i+1:] {
				if strings.HasPrefix(l, "## ") || strings.HasPrefix(l, "# ") {
					break
				}
				b.WriteString(l)
			}
			return strings.TrimSpace(b.String()), true
		}
		return "", false
	}
	if s, ok := find(func(h string) bool { return h == v || strings.HasPrefix(h, v+" ") }); ok {
		return s, false, nil
	}
	if s, ok := find(func(h string) bool { return strings.EqualFold(strings.TrimSpace(h), "Unreleased") }); ok {
		return s, true, nil
	}
	return "", false, fmt.Errorf("changelog: no section %q and no %q (add one before tagging)", "## "+v, "## Unreleased")
}

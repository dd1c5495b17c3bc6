package stamp

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// required are the files that must carry the version: a rule that stops matching (a reworded
// example) would otherwise leave a stale version unchecked.
var required = map[string]int{
	"charts/configmap-attacher/Chart.yaml":                       2,
	"examples/job.yaml":                                          1,
	"examples/controller.yaml":                                   1,
	"examples/helm-values.yaml":                                  2,
	"examples/argo-rollouts-config.yaml":                         2,
	"examples/argo-rollouts-config-https.yaml":                   1,
	"examples/kustomize/argo-rollouts-plugin/kustomization.yaml": 2,
	"examples/kustomize/controller/kustomization.yaml":           1,
	"examples/kustomize/controller/install.yaml":                 10,
	"examples/kustomize/step-config-names/kustomization.yaml":    1,
	"examples/kustomize/rollout-app/kustomization.yaml":          1,
	"examples/argocd/application.yaml":                           1,
	"examples/flux/ocirepository.yaml":                           1,
	"docs/install.md":                                            4,
	"README.md":                                                  1,
}

// TestTreeVersionsAgree: every mention of the release version in the tree is VERSION's.
func TestTreeVersionsAgree(t *testing.T) {
	root := repoRoot(t)
	v, err := Read(root)
	if err != nil {
		t.Fatal(err)
	}
	all, err := Scan(root, v)
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, m := range all {
		per[m.File]++
		if m.Value != m.Want {
			t.Errorf("%s (make set-version VERSION=%s rewrites it)", m, v)
		}
	}
	for f, n := range required {
		if per[f] < n {
			t.Errorf("%s: %d mentions of the version found, want at least %d (a rule in stamp.Rules no longer matches it?)", f, per[f], n)
		}
	}
	t.Logf("%s: %s in %d mentions over %d files", File, v, len(all), len(per))
}

// TestSetVersion bumps a copy of the tree and checks that nothing of the old version is left
// where a rule looks, and that the planted faults (a stale tag, a tag that is no version) are
// found.
func TestSetVersion(t *testing.T) {
	root := repoRoot(t)
	old, err := Read(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range append(mustFiles(t, root), File, "docs/changelog.md") {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, f), b)
	}
	const nv = "v1.2.3-rc.1"
	changed, err := Set(dir, nv)
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) < len(required)+1 {
		t.Errorf("Set changed %v, want at least the %d required files and VERSION", changed, len(required))
	}
	if got, err := Read(dir); err != nil || got != nv {
		t.Fatalf("VERSION after Set: %q %v", got, err)
	}
	if bad, err := Mismatches(dir, nv); err != nil || len(bad) != 0 {
		t.Fatalf("after Set: %v %v", bad, err)
	}
	chart := string(read(t, filepath.Join(dir, "charts/configmap-attacher/Chart.yaml")))
	if !strings.Contains(chart, "\nversion: 1.2.3-rc.1\n") || !strings.Contains(chart, "\nappVersion: v1.2.3-rc.1\n") {
		t.Errorf("Chart.yaml after Set:\n%s", chart)
	}
	for f := range required {
		if s := string(read(t, filepath.Join(dir, f))); strings.Contains(s, ":"+old) || strings.Contains(s, "="+old) || strings.Contains(s, "/"+old+"/") {
			t.Errorf("%s still mentions %s after Set", f, old)
		}
	}
	// The changelog names past releases and is left alone.
	if string(read(t, filepath.Join(dir, "docs/changelog.md"))) != string(read(t, filepath.Join(root, "docs/changelog.md"))) {
		t.Errorf("Set changed docs/changelog.md")
	}

	// Planted faults: one stale image tag, one that is not a version.
	job := filepath.Join(dir, "examples/job.yaml")
	b := read(t, job)
	write(t, job, []byte(strings.Replace(string(b), "configmap-attacher:"+nv, "configmap-attacher:v0.0.9", 1)))
	cfg := filepath.Join(dir, "examples/kustomize/controller/kustomization.yaml")
	write(t, cfg, []byte(strings.Replace(string(read(t, cfg)), "?ref="+nv, "?ref=main", 1)))
	bad, err := Mismatches(dir, nv)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 2 || bad[0].File != "examples/job.yaml" || bad[0].Value != "v0.0.9" || bad[1].Value != "main" {
		t.Errorf("planted faults: found %v, want the stale tag in examples/job.yaml and ?ref=main", bad)
	}
	for _, m := range bad {
		if !strings.Contains(m.String(), m.File+":") || !strings.Contains(m.String(), nv) {
			t.Errorf("mismatch message %q does not name the file, line and wanted version", m)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, v := range []string{"v0.1.0", "v1.0.0-rc.1", "v10.20.30"} {
		if err := Validate(v); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
	for _, v := range []string{"0.1.0", "v1.0", "v01.0.0", "latest", "", "v1.0.0 "} {
		if err := Validate(v); err == nil || !strings.Contains(err.Error(), "vMAJOR.MINOR.PATCH") {
			t.Errorf("%q: %v, want an error naming the form", v, err)
		}
	}
}

func TestChangelogSection(t *testing.T) {
	md := []byte("# Changelog\n\n## Compatibility\n\nx\n\n## v0.2.0 (2026-12-02)\n\n- two\n\n## Unreleased\n\n- next\n\n## v0.1.0\n\n- one\n")
	for _, c := range []struct {
		v, want    string
		unreleased bool
	}{{"v0.2.0", "- two", false}, {"v0.1.0", "- one", false}, {"v0.3.0", "- next", true}} {
		got, unr, err := ChangelogSection(md, c.v)
		if err != nil || got != c.want || unr != c.unreleased {
			t.Errorf("%s: %q %v %v, want %q %v", c.v, got, unr, err, c.want, c.unreleased)
		}
	}
	if _, _, err := ChangelogSection([]byte("# Changelog\n\n## v0.1.0\n- one\n"), "v0.2.0"); err == nil || !strings.Contains(err.Error(), "## v0.2.0") {
		t.Errorf("no section: %v, want an error naming the heading", err)
	}
}

func mustFiles(t *testing.T, root string) []string {
	t.Helper()
	f, err := files(root)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func read(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func write(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// makeVar reads `NAME ?= value` or `NAME := value` from the Makefile, so that the test runs
// helm-docs exactly as `make docs` does.
func makeVar(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `\s*[?:]?=\s*(.*)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("Makefile has no %s", name)
	}
	return strings.TrimSpace(string(m[1]))
}

// helmDocsBin is helm-docs at the Makefile's version, built once by hack/tool.sh from the
// module proxy; without it the test is skipped, or fails when cluster.Required().
func helmDocsBin(t *testing.T) string {
	t.Helper()
	version := makeVar(t, "HELM_DOCS_VERSION")
	cmd := exec.Command("bash", filepath.Join(repoRoot(), "hack", "tool.sh"), "helm-docs", "github.com/norwoodj/helm-docs/cmd/helm-docs@"+version)
	cmd.Env = append(os.Environ(), "CMA_CACHE="+cluster.CacheDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		cluster.SkipOrFail(t, fmt.Errorf("%w: hack/tool.sh helm-docs %s: %v\n%s", cluster.ErrUnavailable, version, err, stderr.String()))
	}
	return strings.TrimSpace(string(out))
}

// helmDocs copies the chart into a temporary directory, lets edit change the copy, runs
// helm-docs over it with the Makefile's flags and returns the README.md it wrote.
func helmDocs(t *testing.T, edit func(dir string)) string {
	t.Helper()
	bin := helmDocsBin(t)
	root := t.TempDir()
	dir := filepath.Join(root, "configmap-attacher")
	copyDir(t, chartDir(), dir)
	if edit != nil {
		edit(dir)
	}
	flags := strings.Fields(makeVar(t, "HELM_DOCS_FLAGS"))
	for i, f := range flags {
		if f == "--chart-search-root" && i+1 < len(flags) {
			flags[i+1] = root
		}
	}
	cmd := exec.Command(bin, flags...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm-docs %v: %v\n%s", flags, err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func editFile(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s has no %q", path, old)
	}
	writeFile(t, path, strings.Replace(string(b), old, new, 1))
}

// valuesRows are the rows of the generated values table: key → description.
func valuesRows(t *testing.T, readme string) map[string]string {
	t.Helper()
	rows := map[string]string{}
	row := regexp.MustCompile(`(?m)^\| ([a-zA-Z][a-zA-Z0-9.\[\]]*) \| [a-z]+ \| .* \|(.*)\|$`)
	for _, m := range row.FindAllStringSubmatch(readme, -1) {
		// The description is the last column; a default may itself hold " | " in backticks,
		// so split from the right.
		line := m[0]
		cols := strings.Split(strings.TrimSuffix(line, "|"), " | ")
		rows[m[1]] = strings.TrimSpace(cols[len(cols)-1])
	}
	if len(rows) == 0 {
		t.Fatalf("README has no values table rows")
	}
	return rows
}

// undocumented are the values-table keys without a description.
func undocumented(t *testing.T, readme string) []string {
	t.Helper()
	var out []string
	for k, d := range valuesRows(t, readme) {
		if d == "" {
			out = append(out, k)
		}
	}
	return out
}

// TestChartReadmeUpToDate: charts/configmap-attacher/README.md is what `make docs` (helm-docs
// over values.yaml's `# --` comments and README.md.gotmpl) writes, and every value in its
// table has a description. Planted faults: a changed description in values.yaml is detected as
// drift, and a value whose `# --` comment is removed is detected as undocumented.
func TestChartReadmeUpToDate(t *testing.T) {
	committed, err := os.ReadFile(filepath.Join(chartDir(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	got := helmDocs(t, nil)
	if got != string(committed) {
		t.Fatalf("charts/configmap-attacher/README.md is not what helm-docs writes from values.yaml and README.md.gotmpl: run make docs and commit the result")
	}
	if u := undocumented(t, got); len(u) > 0 {
		t.Errorf("values without a `# --` description in values.yaml: %v", u)
	}
	for _, k := range []string{"networkPolicy.enabled", "podMonitor.enabled", "extraObjects", "topologySpreadConstraints", "resources"} {
		if _, ok := valuesRows(t, got)[k]; !ok {
			t.Errorf("the values table has no row %s", k)
		}
	}

	t.Run("planted-changed-description", func(t *testing.T) {
		drifted := helmDocs(t, func(dir string) {
			editFile(t, filepath.Join(dir, "values.yaml"), "# -- `-workers`: parallel reconciles.", "# -- `-workers`: how many reconciles run at once.")
		})
		if drifted == string(committed) {
			t.Fatal("a changed value description gave the committed README: the drift check would miss it")
		}
		if !strings.Contains(drifted, "how many reconciles run at once") {
			t.Errorf("the changed description is not in the regenerated table")
		}
	})
	t.Run("planted-undocumented-value", func(t *testing.T) {
		readme := helmDocs(t, func(dir string) {
			editFile(t, filepath.Join(dir, "values.yaml"), "# -- `-workers`: parallel reconciles.\n", "")
		})
		if u := undocumented(t, readme); len(u) != 1 || u[0] != "workers" {
			t.Errorf("undocumented %v, want [workers]", u)
		}
	})
}

// chartYAML is the part of Chart.yaml these tests read.
type chartYAML struct {
	Version, AppVersion, KubeVersion string
	Maintainers                      []struct{ Name, Email, URL string }
	Annotations                      map[string]string
}

func readChartYAML(t *testing.T) chartYAML {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c chartYAML
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	return c
}

// TestChartMetadata: kubeVersion is the range the tests cover: from the oldest Kubernetes a
// control plane is built at (cluster.OldKubeVersion, TestOldestKubernetes) up, each tested
// version named in docs/changelog.md's compatibility table; and helm enforces it: every tested
// version renders, the minor before the oldest is refused with helm's message. Artifact Hub's
// image is values.yaml's repository at the appVersion tag; the maintainers and links are there.
func TestChartMetadata(t *testing.T) {
	c := readChartYAML(t)
	minor := strings.Join(strings.Split(strings.TrimPrefix(cluster.OldKubeVersion, "v"), ".")[:2], ".")
	if want := ">=" + minor + ".0-0"; c.KubeVersion != want {
		t.Errorf("Chart.yaml kubeVersion %q, want %q (the oldest Kubernetes the tests run on is %s)", c.KubeVersion, want, cluster.OldKubeVersion)
	}
	changelog, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "changelog.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range cluster.KubeVersions {
		if !strings.Contains(string(changelog), "tested with "+v) {
			t.Errorf("docs/changelog.md's compatibility table does not say Kubernetes %s is tested", v)
		}
		if _, err := helm(t, "", "template", "rel", chartDir(), "--kube-version", v); err != nil {
			t.Errorf("the tested Kubernetes %s: %v", v, err)
		}
	}
	// Without --kube-version helm assumes its own client-go's minor (as the released binaries do).
	if _, err := helm(t, "", "template", "rel", chartDir()); err != nil {
		t.Errorf("helm template without --kube-version: %v (is the cached helm built without its Kubernetes version flags? hack/build-binaries.sh helm rebuilds it)", err)
	}
	var maj, min int
	if _, err := fmt.Sscanf(minor, "%d.%d", &maj, &min); err != nil {
		t.Fatal(err)
	}
	older := fmt.Sprintf("v%d.%d.0", maj, min-1)
	_, err = helm(t, "", "template", "rel", chartDir(), "--kube-version", older)
	if want := "incompatible with Kubernetes " + older; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Kubernetes %s (untested): error %v, want one containing %q", older, err, want)
	}

	var images []struct{ Name, Image string }
	if err := yaml.Unmarshal([]byte(c.Annotations["artifacthub.io/images"]), &images); err != nil || len(images) != 1 {
		t.Fatalf("artifacthub.io/images %q: %v (want one image)", c.Annotations["artifacthub.io/images"], err)
	}
	var values struct{ Image struct{ Repository string } }
	vb, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(vb, &values); err != nil {
		t.Fatal(err)
	}
	if want := values.Image.Repository + ":" + c.AppVersion; images[0].Image != want {
		t.Errorf("artifacthub.io/images image %q, want %q (values.yaml's repository at the appVersion tag)", images[0].Image, want)
	}
	var links []struct{ Name, URL string }
	if err := yaml.Unmarshal([]byte(c.Annotations["artifacthub.io/links"]), &links); err != nil || len(links) == 0 {
		t.Errorf("artifacthub.io/links %q: %v", c.Annotations["artifacthub.io/links"], err)
	}
	for _, l := range links {
		if l.Name == "" || !strings.HasPrefix(l.URL, "https://") {
			t.Errorf("artifacthub.io/links entry %+v: want a name and an https URL", l)
		}
	}
	if len(c.Maintainers) == 0 || c.Maintainers[0].Name == "" {
		t.Errorf("Chart.yaml maintainers %+v: want at least one with a name", c.Maintainers)
	}
}

// dashboardJobProblems returns every query of the dashboard JSON that does not select the
// `job` variable: each configmap_attacher_ series selector must hold job=~"$job" and no other
// job matcher, and the dashboard must define the variable.
func dashboardJobProblems(b []byte) []string {
	var d struct {
		Templating struct {
			List []struct{ Name, Type string }
		}
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return []string{err.Error()}
	}
	var problems []string
	hasVar := false
	for _, v := range d.Templating.List {
		hasVar = hasVar || (v.Name == "job" && v.Type == "query")
	}
	if !hasVar {
		problems = append(problems, "no `job` query variable")
	}
	series := regexp.MustCompile(`configmap_attacher_[a-z_]+(\{[^}]*\})?`)
	jobMatcher := regexp.MustCompile(`\bjob\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range series.FindAllStringSubmatch(tg.Expr, -1) {
				matchers := jobMatcher.FindAllStringSubmatch(m[1], -1)
				if len(matchers) != 1 || matchers[0][1] != "=~" || matchers[0][2] != "$job" {
					problems = append(problems, fmt.Sprintf("panel %q: %s does not select job=~\"$job\" (alone)", p.Title, m[0]))
				}
			}
		}
	}
	return problems
}

// TestDashboardSelectsJob: every query of files/dashboard.json selects the dashboard's `job`
// variable, so two installs in one Prometheus are never summed together. Planted fault: one
// query with a hard-coded job is reported.
func TestDashboardSelectsJob(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir(), "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if p := dashboardJobProblems(b); len(p) > 0 {
		t.Errorf("files/dashboard.json:\n%s", strings.Join(p, "\n"))
	}
	t.Run("planted-hard-coded-job", func(t *testing.T) {
		old := `configmap_attacher_controller_ready{job=~\"$job\"}`
		if !bytes.Contains(b, []byte(old)) {
			t.Fatalf("dashboard.json has no %s", old)
		}
		bad := bytes.Replace(b, []byte(old), []byte(`configmap_attacher_controller_ready{job=\"cma-configmap-attacher-metrics\"}`), 1)
		if p := dashboardJobProblems(bad); len(p) != 1 || !strings.Contains(p[0], "configmap_attacher_controller_ready") {
			t.Errorf("a hard-coded job: problems %q, want exactly the ready query", p)
		}
	})
}

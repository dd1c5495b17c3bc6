package chart

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

const (
	// ChartRegistry is the OCI repository the examples install the chart from: `helm push
	// configmap-attacher-<version>.tgz oci://ghcr.io/configmap-attacher/charts` puts the chart at
	// oci://ghcr.io/configmap-attacher/charts/configmap-attacher:<version>.
	ChartRegistry = "ghcr.io/configmap-attacher/charts"
	// FluxVersion is the Flux release the Flux example is checked against: its
	// manifests/crds/kustomization.yaml names the helm-controller and source-controller releases
	// whose CRDs Flux installs, and those controllers' root modules carry the CRD YAML
	// (config/crd). The flux2 module itself carries no CRD YAML, only those release URLs.
	FluxVersion = "v2.9.5"
)

// gitopsRelease is a Helm release as a GitOps tool would install it: the name, the namespace
// and the values exactly as the example carries them.
type gitopsRelease struct {
	example   string // the file, for messages
	name, ns  string
	createsNS bool // the tool creates the release namespace (the chart renders none)
	values    map[string]any
}

// TestArgoCDApplication: examples/argocd/application.yaml is admitted by Argo CD's own
// Application CRD (argo-cd v3 module, the version hack/build-binaries.sh builds) in a
// server-side dry run; it names the chart where the release publishes it, at the chart's
// version; and the chart rendered with exactly its releaseName, destination namespace and
// valuesObject (helm template, as Argo CD's repo server renders it) applies to the real
// apiserver (server-side dry run). Planted faults: a misspelt value fails the render, a
// misspelt field fails the CRD's admission.
func TestArgoCDApplication(t *testing.T) {
	c := cluster.Require(t, shared, sharedErr)
	dir := moduleDir(t, "github.com/argoproj/argo-cd/v3@"+cluster.ArgoCDVersion)
	for _, f := range []string{"application-crd.yaml", "appproject-crd.yaml"} {
		if _, err := kubectl(c, nil, "apply", "--server-side", "-f", filepath.Join(dir, "manifests", "crds", f)); err != nil {
			t.Fatal(err)
		}
	}
	waitCRDs(t, c, "applications.argoproj.io", "appprojects.argoproj.io")
	gitopsNamespace(t, c, cluster.ArgoCDNamespace)

	file := filepath.Join(repoRoot(), "examples", "argocd", "application.yaml")
	raw := readExample(t, file)
	if _, err := gitopsDryRun(c, raw, 1); err != nil {
		t.Fatalf("%s against Argo CD %s's CRD: %v", file, cluster.ArgoCDVersion, err)
	}
	rel, err := argoCDRelease(file, raw)
	if err != nil {
		t.Fatal(err)
	}
	n := checkGitopsRelease(t, c, rel, "argocd-controller")
	t.Logf("%s: admitted by Argo CD %s's CRD; the chart with its values: %d objects, admitted (server-side dry run)", file, cluster.ArgoCDVersion, n)

	t.Run("planted-misspelt-value", func(t *testing.T) {
		bad := plant(t, raw, "        replicas: 2\n", "        replica: 2\n")
		rel, err := argoCDRelease(file, bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := renderGitopsRelease(t, rel); err == nil || !strings.Contains(err.Error(), "additional properties 'replica' not allowed") {
			t.Errorf("the chart rendered with a misspelt value (replica): %v", err)
		}
	})
	t.Run("planted-misspelt-field", func(t *testing.T) {
		bad := plant(t, raw, "    syncOptions:\n", "    syncOption:\n")
		if _, err := gitopsDryRun(c, bad, 1); err == nil || !strings.Contains(err.Error(), ".spec.syncPolicy.syncOption: field not declared in schema") {
			t.Errorf("Argo CD's CRD admitted spec.syncPolicy.syncOption: %v", err)
		}
	})
}

// TestFluxHelmRelease: examples/flux (kubectl kustomize, as a Flux Kustomization builds it)
// is admitted by the OCIRepository and HelmRelease CRDs of Flux FluxVersion (from the
// helm-controller and source-controller root modules) in a server-side dry run; the
// OCIRepository names the chart where the release publishes it, at the chart's version, and
// the HelmRelease refers to it; the chart rendered with exactly the HelmRelease's releaseName,
// targetNamespace and values applies to the real apiserver, and helm-controller's own Helm
// (v4, fluxHelmBin) renders the same objects; and the values are examples/argocd's. Planted
// faults: a misspelt value fails both renders, other values make the renders differ, a source
// kind the CRD does not allow fails its admission.
func TestFluxHelmRelease(t *testing.T) {
	c := cluster.Require(t, shared, sharedErr)
	crdDirs, helmController := fluxCRDDirs(t)
	for _, d := range crdDirs {
		out, err := kubectl(c, nil, "kustomize", d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kubectl(c, []byte(out), "apply", "--server-side", "-f", "-"); err != nil {
			t.Fatal(err)
		}
	}
	waitCRDs(t, c, "helmreleases.helm.toolkit.fluxcd.io", "ocirepositories.source.toolkit.fluxcd.io")
	gitopsNamespace(t, c, "flux-system")

	dir := filepath.Join(repoRoot(), "examples", "flux")
	built, err := kubectl(c, nil, "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gitopsDryRun(c, []byte(built), 2); err != nil {
		t.Fatalf("%s against Flux %s's CRDs: %v", dir, FluxVersion, err)
	}
	rel, err := fluxRelease(t, dir, built)
	if err != nil {
		t.Fatal(err)
	}
	n := checkGitopsRelease(t, c, rel, "helm-controller")

	// Flux renders with Helm 4's library: the same values give the same objects (so the dry
	// run above holds for it), and a misspelt value fails there too.
	h4, h4v := fluxHelmBin(t, helmController)
	v3, err := renderGitopsRelease(t, rel)
	if err != nil {
		t.Fatal(err)
	}
	v4, err := renderGitopsReleaseWith(t, h4, rel)
	if err != nil {
		t.Fatalf("helm %s (helm-controller's): %v", h4v, err)
	}
	a, _ := withoutTestHooks(t, parseDocs(t, "helm "+HelmVersion, v3))
	b, _ := withoutTestHooks(t, parseDocs(t, "helm "+h4v, v4))
	if !reflect.DeepEqual(a, b) {
		t.Errorf("helm %s and helm %s (helm-controller's) render different objects from the same values:\n%v\n%v", HelmVersion, h4v, keys(a), keys(b))
	}
	t.Run("planted-other-values-differ", func(t *testing.T) {
		other := rel
		other.values = map[string]any{}
		for k, v := range rel.values {
			other.values[k] = v
		}
		other.values["replicas"] = 3
		out, err := renderGitopsReleaseWith(t, h4, other)
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := withoutTestHooks(t, parseDocs(t, "helm "+h4v, out)); reflect.DeepEqual(a, d) {
			t.Error("the comparison of the two renders cannot tell replicas 2 from 3")
		}
	})

	// One set of values for both tools: the two examples say the same.
	app, err := argoCDRelease("examples/argocd/application.yaml", readExample(t, filepath.Join(repoRoot(), "examples", "argocd", "application.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(app.values, rel.values) {
		a, _ := yaml.Marshal(app.values)
		f, _ := yaml.Marshal(rel.values)
		t.Errorf("the HelmRelease's values differ from the Application's valuesObject:\nflux:\n%s\nargocd:\n%s", f, a)
	}
	t.Logf("%s: admitted by Flux %s's CRDs; the chart with its values: %d objects, admitted (server-side dry run)", dir, FluxVersion, n)

	// The commented-out signature check, uncommented as a user would, is admitted too, and
	// carries the release workflow's identity.
	t.Run("verify-uncommented", func(t *testing.T) {
		src := string(readExample(t, filepath.Join(dir, "ocirepository.yaml")))
		i := strings.Index(src, "  # verify:\n")
		if i < 0 {
			t.Fatal("ocirepository.yaml has no commented verify block")
		}
		on := src[:i] + strings.ReplaceAll(src[i:], "  # ", "  ")
		if _, err := gitopsDryRun(c, []byte(on), 1); err != nil {
			t.Fatalf("the OCIRepository with verify uncommented: %v", err)
		}
		var repo obj
		if err := yaml.Unmarshal([]byte(on), &repo); err != nil {
			t.Fatal(err)
		}
		id, _ := get(repo, "spec", "verify", "matchOIDCIdentity", 0).(map[string]any)
		subject, _ := id["subject"].(string)
		re, err := regexp.Compile(subject)
		if err != nil || get(repo, "spec", "verify", "provider") != "cosign" ||
			!re.MatchString("https://github.com/configmap-attacher/configmap-attacher/.github/workflows/release.yaml@refs/tags/v0.1.0") ||
			re.MatchString("https://github.com/someone/fork/.github/workflows/release.yaml@refs/tags/v0.1.0") {
			t.Errorf("verify %v: want cosign, a subject matching only this repository's release workflow at a tag (%v)", get(repo, "spec", "verify"), err)
		}
		if _, err := os.Stat(filepath.Join(repoRoot(), ".github", "workflows", "release.yaml")); err != nil {
			t.Errorf("the subject names .github/workflows/release.yaml: %v", err)
		}
	})

	hr := filepath.Join(dir, "helmrelease.yaml")
	t.Run("planted-misspelt-value", func(t *testing.T) {
		bad := plant(t, readExample(t, hr), "    replicas: 2\n", "    replica: 2\n")
		d := t.TempDir()
		copyDir(t, dir, d)
		writeFile(t, filepath.Join(d, "helmrelease.yaml"), string(bad))
		built, err := kubectl(c, nil, "kustomize", d)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := fluxRelease(t, d, built)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := renderGitopsRelease(t, rel); err == nil || !strings.Contains(err.Error(), "additional properties 'replica' not allowed") {
			t.Errorf("the chart rendered with a misspelt value (replica): %v", err)
		}
		if _, err := renderGitopsReleaseWith(t, h4, rel); err == nil || !strings.Contains(err.Error(), "additional properties 'replica' not allowed") {
			t.Errorf("helm %s rendered the chart with a misspelt value (replica): %v", h4v, err)
		}
	})
	t.Run("planted-wrong-source-kind", func(t *testing.T) {
		bad := plant(t, readExample(t, hr), "    kind: OCIRepository\n", "    kind: HelmRepository\n")
		if _, err := gitopsDryRun(c, bad, 1); err == nil || !strings.Contains(err.Error(), "spec.chartRef.kind") {
			t.Errorf("Flux's CRD admitted chartRef.kind HelmRepository: %v", err)
		}
	})
}

// argoCDRelease reads the Helm release an Application describes, checking that it installs
// the published chart at the chart's version.
func argoCDRelease(file string, raw []byte) (gitopsRelease, error) {
	var app struct {
		Kind string
		Spec struct {
			Source struct {
				RepoURL        string `json:"repoURL"`
				Chart          string `json:"chart"`
				TargetRevision string `json:"targetRevision"`
				Helm           struct {
					ReleaseName  string         `json:"releaseName"`
					ValuesObject map[string]any `json:"valuesObject"`
					Values       string         `json:"values"`
				} `json:"helm"`
			} `json:"source"`
			Destination struct {
				Namespace string `json:"namespace"`
			} `json:"destination"`
			SyncPolicy struct {
				SyncOptions []string `json:"syncOptions"`
			} `json:"syncPolicy"`
		}
		Metadata struct{ Name string }
	}
	if err := yaml.Unmarshal(raw, &app); err != nil {
		return gitopsRelease{}, fmt.Errorf("%s: %w", file, err)
	}
	name, version, err := chartNameVersion()
	if err != nil {
		return gitopsRelease{}, err
	}
	s := app.Spec.Source
	var errs []error
	if app.Kind != "Application" {
		errs = append(errs, fmt.Errorf("kind %q, want Application", app.Kind))
	}
	// Argo CD takes a Helm OCI repository without the oci:// scheme (helm.IsHelmOciRepo: a URL
	// with no host part), with the chart name apart.
	if s.RepoURL != ChartRegistry || s.Chart != name {
		errs = append(errs, fmt.Errorf("spec.source repoURL %q chart %q, want %q and %q (where the release pushes the chart)", s.RepoURL, s.Chart, ChartRegistry, name))
	}
	if s.TargetRevision != version {
		errs = append(errs, fmt.Errorf("spec.source.targetRevision %q, want the chart's version %q (charts/configmap-attacher/Chart.yaml)", s.TargetRevision, version))
	}
	if s.Helm.Values != "" || len(s.Helm.ValuesObject) == 0 {
		errs = append(errs, errors.New("spec.source.helm: want the values inline in valuesObject (and no values string)"))
	}
	rel := gitopsRelease{example: file, name: s.Helm.ReleaseName, ns: app.Spec.Destination.Namespace, values: s.Helm.ValuesObject,
		createsNS: slices.Contains(app.Spec.SyncPolicy.SyncOptions, "CreateNamespace=true")}
	if rel.name == "" {
		rel.name = app.Metadata.Name // Argo CD's default release name
	}
	return rel, errors.Join(errs...)
}

// fluxRelease reads the Helm release the HelmRelease of a built examples/flux describes,
// checking that its OCIRepository is the published chart at the chart's version.
func fluxRelease(t *testing.T, dir, built string) (gitopsRelease, error) {
	t.Helper()
	name, version, err := chartNameVersion()
	if err != nil {
		return gitopsRelease{}, err
	}
	var hr, repo obj
	for _, o := range parseDocs(t, dir+" built", built) {
		switch o.kind() {
		case "HelmRelease":
			hr = o
		case "OCIRepository":
			repo = o
		}
	}
	if hr == nil || repo == nil {
		return gitopsRelease{}, fmt.Errorf("%s builds no HelmRelease and OCIRepository", dir)
	}
	var errs []error
	ref, _ := get(hr, "spec", "chartRef").(map[string]any)
	if ref["kind"] != "OCIRepository" || ref["name"] != repo.meta("name") || (ref["namespace"] != nil && ref["namespace"] != repo.meta("namespace")) || hr.meta("namespace") != repo.meta("namespace") {
		errs = append(errs, fmt.Errorf("HelmRelease spec.chartRef %v does not name the OCIRepository %s/%s", ref, repo.meta("namespace"), repo.meta("name")))
	}
	if u, want := get(repo, "spec", "url"), "oci://"+ChartRegistry+"/"+name; u != want {
		errs = append(errs, fmt.Errorf("OCIRepository spec.url %v, want %s (where the release pushes the chart)", u, want))
	}
	if tag := get(repo, "spec", "ref", "tag"); tag != version {
		errs = append(errs, fmt.Errorf("OCIRepository spec.ref.tag %v, want the chart's version %q (charts/configmap-attacher/Chart.yaml)", tag, version))
	}
	// The chart layer, as helm-controller's own OCIRepository example selects it
	// (docs/spec/v2/helmreleases.md; operation copy keeps the chart archive unaltered).
	if mt := get(repo, "spec", "layerSelector", "mediaType"); mt != "application/vnd.cncf.helm.chart.content.v1.tar+gzip" {
		errs = append(errs, fmt.Errorf("OCIRepository spec.layerSelector.mediaType %v, want the Helm chart layer", mt))
	}
	values, _ := get(hr, "spec", "values").(map[string]any)
	if len(values) == 0 {
		errs = append(errs, errors.New("HelmRelease spec.values: want the values inline"))
	}
	// helm-controller's defaults: the namespace is the HelmRelease's, the release name
	// [<targetNamespace>-]<name>.
	rel := gitopsRelease{example: dir, ns: hr.meta("namespace"), name: hr.meta("name"), values: values}
	if tn, _ := get(hr, "spec", "targetNamespace").(string); tn != "" {
		rel.ns, rel.name = tn, tn+"-"+rel.name
	}
	if rn, _ := get(hr, "spec", "releaseName").(string); rn != "" {
		rel.name = rn
	}
	rel.createsNS, _ = get(hr, "spec", "install", "createNamespace").(bool)
	return rel, errors.Join(errs...)
}

// checkGitopsRelease renders the chart as rel says and applies the result to the real
// apiserver (server-side dry run, as field manager manager); the values must show in the
// rendered Deployment. It returns the number of objects.
func checkGitopsRelease(t *testing.T, c *cluster.Cluster, rel gitopsRelease, manager string) int {
	t.Helper()
	out, err := renderGitopsRelease(t, rel)
	if err != nil {
		t.Fatalf("%s: the chart with the example's values: %v", rel.example, err)
	}
	objs, hooks := withoutTestHooks(t, parseDocs(t, "rendered YAML", out))
	if find(objs, "Namespace", "", rel.ns) == nil && !rel.createsNS {
		t.Errorf("%s: the chart renders no Namespace %s and the example does not have the tool create it", rel.example, rel.ns)
	}
	// The names the docs use (deploy/configmap-attacher in namespace configmap-attacher).
	d := find(objs, "Deployment", "configmap-attacher", "configmap-attacher")
	if d == nil {
		t.Fatalf("%s: no Deployment configmap-attacher/configmap-attacher in %v (release %s in %s)", rel.example, keys(objs), rel.name, rel.ns)
	}
	var args []string
	list, _ := get(d, "spec", "template", "spec", "containers", 0, "args").([]any)
	for _, a := range list {
		args = append(args, fmt.Sprint(a))
	}
	if v, ok := rel.values["selector"]; ok && !slices.Contains(args, fmt.Sprint("-selector=", v)) {
		t.Errorf("%s: the Deployment's args %v lack -selector=%v", rel.example, args, v)
	}
	if v, ok := rel.values["replicas"]; ok && fmt.Sprint(get(d, "spec", "replicas")) != fmt.Sprint(v) {
		t.Errorf("%s: the Deployment has replicas %v, the values %v", rel.example, get(d, "spec", "replicas"), v)
	}
	gitopsNamespace(t, c, rel.ns)
	var applied []string
	for _, o := range objs {
		b, err := yaml.Marshal(map[string]any(o))
		if err != nil {
			t.Fatal(err)
		}
		applied = append(applied, string(b))
	}
	res, err := kubectl(c, []byte(strings.Join(applied, "---\n")), "apply", "--server-side", "--dry-run=server", "--field-manager="+manager, "-f", "-")
	if err != nil {
		t.Fatalf("%s: server-side dry run of the rendered chart: %v", rel.example, err)
	}
	if n := strings.Count(strings.TrimSpace(res), "\n") + 1; n != len(objs) {
		t.Errorf("%s: dry run applied %d objects, rendered %d:\n%s", rel.example, n, len(objs), res)
	}
	if len(hooks) > 0 {
		t.Logf("%s: not applied, as neither tool does at a sync or install: the chart's test and uninstall hooks %v", rel.example, hooks)
	}
	return len(objs)
}

// helmTestHooks are the helm.sh/hook values of `helm test` hooks, and the chart's uninstall
// hook (pre-delete): neither is applied at a sync or an install. gitops-engine maps only the
// install and upgrade hooks to sync phases, and helm-controller runs pre-delete hooks only when
// it uninstalls the HelmRelease's release.
var helmTestHooks = []string{"test", "test-success", "test-failure", "pre-delete"}

// withoutTestHooks splits the rendered objects into those a sync or an install applies and the
// chart's `helm test` hooks, which neither tool applies: Argo CD never syncs a Helm hook it has
// no equivalent for (gitops-engine pkg/sync/hook: a helm.sh/hook object is a hook, and only
// pre/post-install and pre/post-upgrade map to sync phases; its docs/user-guide/helm.md: test
// hooks "Not supported", "Unsupported hooks are ignored"), and helm-controller runs them only
// with spec.test.enable. Any other hook fails the test: the tools run those differently
// (Argo CD as PreSync/PostSync hooks), which this check does not model.
func withoutTestHooks(t *testing.T, objs []obj) (kept []obj, hooks []string) {
	t.Helper()
	for _, o := range objs {
		ann, _ := get(o, "metadata", "annotations").(map[string]any)
		h, ok := ann["helm.sh/hook"].(string)
		if !ok {
			kept = append(kept, o)
			continue
		}
		for _, v := range strings.Split(h, ",") {
			if !slices.Contains(helmTestHooks, strings.TrimSpace(v)) {
				t.Errorf("%s has helm.sh/hook %q: only test hooks are modelled here (Argo CD runs install and upgrade hooks as PreSync/PostSync)", o.key(), h)
			}
		}
		hooks = append(hooks, o.key())
	}
	return kept, hooks
}

// renderGitopsRelease is `helm template` with the release's name, namespace and values, as
// Argo CD's repo server and Flux's helm-controller render the chart (values.schema.json
// checked first).
func renderGitopsRelease(t *testing.T, rel gitopsRelease) (string, error) {
	t.Helper()
	return renderGitopsReleaseWith(t, helmBin(t), rel)
}

// renderGitopsReleaseWith is renderGitopsRelease with the helm binary bin (an isolated HOME:
// no repositories, no plugins).
func renderGitopsReleaseWith(t *testing.T, bin string, rel gitopsRelease) (string, error) {
	t.Helper()
	b, err := json.Marshal(rel.values)
	if err != nil {
		return "", err
	}
	home := t.TempDir()
	f := filepath.Join(home, "values.json")
	writeFile(t, f, string(b))
	cmd := exec.Command(bin, "template", rel.name, chartDir(), "-n", rel.ns, "-f", f)
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s template: %v\n%s", bin, err, stderr.String())
	}
	return stdout.String(), nil
}

// gitopsDryRun applies manifests with a server-side dry run (a field the CRD's schema does not
// declare is an error: "field not declared in schema") and checks that want objects were
// applied.
func gitopsDryRun(c *cluster.Cluster, manifests []byte, want int) (string, error) {
	res, err := kubectl(c, manifests, "apply", "--server-side", "--dry-run=server", "-f", "-")
	if err != nil {
		return res, err
	}
	if n := strings.Count(strings.TrimSpace(res), "\n") + 1; n != want {
		return res, fmt.Errorf("dry run applied %d objects, want %d:\n%s", n, want, res)
	}
	return res, nil
}

// chartNameVersion are Chart.yaml's name and version.
func chartNameVersion() (string, string, error) {
	b, err := os.ReadFile(filepath.Join(chartDir(), "Chart.yaml"))
	if err != nil {
		return "", "", err
	}
	var ch struct{ Name, Version string }
	if err := yaml.Unmarshal(b, &ch); err != nil || ch.Name == "" || ch.Version == "" {
		return "", "", fmt.Errorf("Chart.yaml: name %q version %q: %v", ch.Name, ch.Version, err)
	}
	return ch.Name, ch.Version, nil
}

// fluxReleaseURL is one controller release's CRD asset in flux2's manifests/crds.
var fluxReleaseURL = regexp.MustCompile(`https://github\.com/fluxcd/(helm-controller|source-controller)/releases/download/(v[0-9][^/]*)/`)

// fluxCRDDirs returns the config/crd kustomizations of the helm-controller and
// source-controller releases Flux FluxVersion installs (its manifests/crds/kustomization.yaml
// names them), from those controllers' root modules.
func fluxCRDDirs(t *testing.T) (dirs []string, helmController string) {
	t.Helper()
	flux := moduleDir(t, "github.com/fluxcd/flux2/v2@"+FluxVersion)
	b, err := os.ReadFile(filepath.Join(flux, "manifests", "crds", "kustomization.yaml"))
	if err != nil {
		t.Fatalf("flux2 %s: %v", FluxVersion, err)
	}
	for _, m := range fluxReleaseURL.FindAllStringSubmatch(string(b), -1) {
		mod := moduleDir(t, "github.com/fluxcd/"+m[1]+"@"+m[2])
		if m[1] == "helm-controller" {
			helmController = mod
		}
		d := filepath.Join(mod, "config", "crd")
		if _, err := os.Stat(filepath.Join(d, "kustomization.yaml")); err != nil {
			t.Fatalf("%s %s carries no config/crd/kustomization.yaml: %v", m[1], m[2], err)
		}
		dirs = append(dirs, d)
	}
	if len(dirs) != 2 || helmController == "" {
		t.Fatalf("flux2 %s manifests/crds/kustomization.yaml names %d of helm-controller and source-controller:\n%s", FluxVersion, len(dirs), b)
	}
	return dirs, helmController
}

// helmLibrary is the Helm requirement in a go.mod.
var helmLibrary = regexp.MustCompile(`(?m)^\s*helm\.sh/helm/(v[34]) (v[0-9]+\.[0-9]+\.[0-9]+)\s*$`)

// fluxHelmBin is the helm CLI of the Helm library helm-controller links (its go.mod's
// helm.sh/helm requirement: Helm 4 for helm-controller v1.6.4), built once from the module
// proxy by hack/tool.sh into <CacheDir>/tools/helm-<version>/ (minutes the first time). Flux
// renders the chart with that library, not with the helm v3 the other chart tests use.
func fluxHelmBin(t *testing.T, helmController string) (bin, version string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(helmController, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := helmLibrary.FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("%s/go.mod requires no helm.sh/helm", helmController)
	}
	cmd := exec.Command("bash", filepath.Join(repoRoot(), "hack", "tool.sh"), "helm", "helm.sh/helm/"+m[1]+"/cmd/helm@"+m[2])
	cmd.Env = append(os.Environ(), "CMA_CACHE="+cluster.CacheDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		cluster.SkipOrFail(t, fmt.Errorf("%w: building helm %s with hack/tool.sh: %v: %s", cluster.ErrUnavailable, m[2], err, stderr.String()))
	}
	return strings.TrimSpace(string(out)), m[2]
}

func waitCRDs(t *testing.T, c *cluster.Cluster, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := kubectl(c, nil, "wait", "--for=condition=Established", "--timeout=60s", "crd/"+n); err != nil {
			t.Fatal(err)
		}
	}
}

// gitopsNamespace creates namespace ns if missing (namespaced objects need theirs, even in a
// dry run).
func gitopsNamespace(t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	if _, err := kubectl(c, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ns+"}\n"), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

func readExample(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// plant returns b with old replaced by fault, once; the test fails if old is not there exactly
// once (the planted fault must really be planted).
func plant(t *testing.T, b []byte, old, fault string) []byte {
	t.Helper()
	if n := strings.Count(string(b), old); n != 1 {
		t.Fatalf("planting a fault: %q occurs %d times, want once", old, n)
	}
	return []byte(strings.Replace(string(b), old, fault, 1))
}

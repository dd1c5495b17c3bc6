package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// TestKustomizeComponent: examples/kustomize/argo-rollouts-plugin, the Kustomize Component
// that adds the plugin to Argo Rollouts' own install, built with the real kustomize inside
// kubectl (`kubectl kustomize`) over argo-rollouts v1.10.2's manifests/install.yaml from the Go
// module cache, as a user's kustomization would use it. The result carries the initContainer,
// the volume and the controller's mount, the argo-rollouts-config entry naming the installed
// file, and the plugin's rules on the controller's ClusterRole; it applies to the real
// apiserver (server-side dry run), and the controller's pod it describes is admitted by Pod
// Security's restricted level.
func TestKustomizeComponent(t *testing.T) {
	c := cluster.Require(t, shared, sharedErr)
	install := filepath.Join(moduleDir(t, "github.com/argoproj/argo-rollouts"), "manifests", "install.yaml")
	dir := t.TempDir()
	// The component as a user's kustomization references it: a directory beside theirs.
	copyDir(t, filepath.Join(repoRoot(), "examples", "kustomize", "argo-rollouts-plugin"), filepath.Join(dir, "argo-rollouts-plugin"))
	app := filepath.Join(dir, "app")
	if err := os.MkdirAll(app, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(install)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(app, "install.yaml"), string(b))
	writeFile(t, filepath.Join(app, "kustomization.yaml"), "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"+
		"namespace: argo-rollouts\nresources: [install.yaml]\ncomponents: [../argo-rollouts-plugin]\n")
	out, err := kubectl(c, nil, "kustomize", app)
	if err != nil {
		t.Fatal(err)
	}
	objs := parseDocs(t, "kustomize output", out)

	dep := find(objs, "Deployment", "argo-rollouts", "argo-rollouts")
	spec := podTemplateOf(t, dep)
	if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "install-configmap-attacher" ||
		strings.Join(spec.InitContainers[0].Args, " ") != "install-plugin /plugins" {
		t.Errorf("initContainers %+v, want install-configmap-attacher with install-plugin /plugins", spec.InitContainers)
	}
	var mount *corev1.VolumeMount
	for i, ctr := range spec.Containers {
		if ctr.Name != "argo-rollouts" {
			continue
		}
		for j, m := range ctr.VolumeMounts {
			if m.Name == "configmap-attacher-plugin" {
				mount = &spec.Containers[i].VolumeMounts[j]
			}
		}
		// Upstream's own mounts are kept (a strategic merge, not a replacement).
		if !slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "plugin-bin" }) {
			t.Errorf("the controller container lost upstream's plugin-bin mount: %+v", ctr.VolumeMounts)
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("the controller container has no read-only configmap-attacher-plugin mount")
	}
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "configmap-attacher-plugin" && v.EmptyDir != nil }) {
		t.Errorf("volumes %+v lack the configmap-attacher-plugin emptyDir", spec.Volumes)
	}
	cm := find(objs, "ConfigMap", "argo-rollouts", "argo-rollouts-config")
	raw, _ := get(map[string]any(cm), "data", "stepPlugins").(string)
	var entries []struct {
		Name, Location string
		Args           []string
	}
	if err := yaml.UnmarshalStrict([]byte(raw), &entries); err != nil || len(entries) != 1 {
		t.Fatalf("argo-rollouts-config stepPlugins %q: %v", raw, err)
	}
	if want := "file://" + mount.MountPath + "/configmap-attacher"; entries[0].Name != "configmap-attacher/configmap-attacher" || entries[0].Location != want {
		t.Errorf("stepPlugins entry %+v, want configmap-attacher/configmap-attacher at %s (the controller's mount)", entries[0], want)
	}
	cr := find(objs, "ClusterRole", "", "argo-rollouts")
	got := rules(cr)
	for _, want := range []string{"/configmaps:patch", "/secrets:patch", "apps/statefulsets:list", "apps/daemonsets:list", "batch/cronjobs:list"} {
		if !slices.Contains(got, want) {
			t.Errorf("ClusterRole argo-rollouts lacks %s (the plugin's rules, examples/rbac-step-plugin.yaml)", want)
		}
	}

	// The real apiserver takes it (CRDs, RBAC, the controller), and restricted admits the pod.
	if _, err := kubectl(c, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: argo-rollouts}\n"), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	res, err := kubectl(c, []byte(out), "apply", "--server-side", "--dry-run=server", "--field-manager=kustomize", "-f", "-")
	if err != nil {
		t.Fatalf("server-side dry run: %v", err)
	}
	if n := strings.Count(strings.TrimSpace(res), "\n") + 1; n != len(objs) {
		t.Errorf("dry run applied %d objects, kustomize built %d", n, len(objs))
	}
	cs := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := restrictedNamespace(t, c)
	if err := admitPod(ctx, cs, ns, spec); err != nil {
		t.Errorf("the controller's pod with the component, in a restricted namespace: %v", err)
	}
	t.Logf("kubectl kustomize: %d objects from install.yaml + the component; applied (dry run) and admitted by restricted", len(objs))
}

// rolloutTransformURL is the configurations: entry of examples/kustomize/rollout-app: Argo
// Rollouts' own configuration for Kustomize 5 at the tested version, the file the argo-rollouts
// module holds at docs/features/kustomize/rollout-transform-kustomize-v5.yaml.
const rolloutTransformURL = "https://raw.githubusercontent.com/argoproj/argo-rollouts/v1.10.2/docs/features/kustomize/rollout-transform-kustomize-v5.yaml"

// TestKustomizeStepConfigNames: examples/kustomize/rollout-app built with the real kustomize
// in kubectl (`kubectl kustomize`; no cluster). Its configMapGenerator and secretGenerator
// names, written un-hashed in the Rollout's pod template and in the configmap-attacher step's
// lists, come out as the generated (hashed) names in both places, the same ones: Argo
// Rollouts' rollout-transform configuration rewrites the template, the Component
// examples/kustomize/step-config-names the step. Argo Rollouts' configuration comes from the
// argo-rollouts module (the example names it by URL): both of its files, the Kustomize 5 one
// the example uses and the older one. Then an overlay with a namePrefix and a nameSuffix that
// holds the Component itself (the app's own reference removed). The step's config parses as
// the plugin parses it, and the pod template references exactly the listed objects
// (plugin.TemplateReferences, the rule the step checks).
func TestKustomizeStepConfigNames(t *testing.T) {
	kubectl := kubectlBin(t)
	transforms := filepath.Join(moduleDir(t, "github.com/argoproj/argo-rollouts"), "docs", "features", "kustomize")
	src := filepath.Join(repoRoot(), "examples", "kustomize")
	k, err := os.ReadFile(filepath.Join(src, "rollout-app", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(k, []byte(rolloutTransformURL)) {
		t.Fatalf("examples/kustomize/rollout-app/kustomization.yaml does not list %s", rolloutTransformURL)
	}
	const componentRef = "  - ../step-config-names\n"
	cases := []struct {
		name, transform string
		// overlay, when set, is a kustomization beside the app built instead of it, and the
		// app's reference to the Component is removed.
		overlay        string
		prefix, suffix string
	}{
		{name: "rollout-transform-kustomize-v5", transform: "rollout-transform-kustomize-v5.yaml"},
		{name: "rollout-transform", transform: "rollout-transform.yaml"},
		{name: "overlay-with-component-prefix-suffix", transform: "rollout-transform-kustomize-v5.yaml", prefix: "prod-", suffix: "-eu",
			overlay: "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../rollout-app]\n" +
				"components: [../step-config-names]\nnamePrefix: prod-\nnameSuffix: -eu\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range []string{"rollout-app", "step-config-names"} {
				copyDir(t, filepath.Join(src, d), filepath.Join(dir, d))
			}
			app := filepath.Join(dir, "rollout-app")
			b, err := os.ReadFile(filepath.Join(transforms, tc.transform))
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(app, tc.transform), string(b))
			kust := strings.Replace(string(k), rolloutTransformURL, tc.transform, 1)
			build := app
			if tc.overlay != "" {
				if strings.Count(kust, componentRef) != 1 {
					t.Fatalf("examples/kustomize/rollout-app/kustomization.yaml: want one line %q", componentRef)
				}
				kust = strings.Replace(kust, componentRef, "", 1)
				build = filepath.Join(dir, "overlay")
				if err := os.MkdirAll(build, 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(build, "kustomization.yaml"), tc.overlay)
			}
			writeFile(t, filepath.Join(app, "kustomization.yaml"), kust)
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(kubectl, "kustomize", build)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("kubectl kustomize: %v\n%s", err, stderr.String())
			}
			objs := parseDocs(t, "kustomize output", stdout.String())
			cm := generatedName(t, objs, "ConfigMap", tc.prefix+"web-config"+tc.suffix)
			secret := generatedName(t, objs, "Secret", tc.prefix+"web-secret"+tc.suffix)

			ro := find(objs, "Rollout", "", tc.prefix+"web"+tc.suffix)
			if ro == nil {
				t.Fatalf("no Rollout %sweb%s in %v", tc.prefix, tc.suffix, keys(objs))
			}
			var step any
			steps, _ := get(ro, "spec", "strategy", "canary", "steps").([]any)
			for _, s := range steps {
				if get(s, "plugin", "name") == "configmap-attacher/configmap-attacher" {
					step = get(s, "plugin", "config")
				}
			}
			raw, err := json.Marshal(step)
			if err != nil || step == nil {
				t.Fatalf("no configmap-attacher/configmap-attacher step with a config in %v (%v)", steps, err)
			}
			cfg, err := plugin.ParseConfig(raw)
			if err != nil {
				t.Fatalf("the step's config %s: %v", raw, err)
			}
			if !slices.Equal(cfg.ConfigMaps, []string{cm}) || !slices.Equal(cfg.Secrets, []string{secret}) {
				t.Errorf("the step lists configMaps %v and secrets %v, want [%s] and [%s]: the generated names (step-config-names not applied?)",
					cfg.ConfigMaps, cfg.Secrets, cm, secret)
			}
			spec := podTemplateOf(t, ro)
			refs := plugin.TemplateReferences(&spec)
			if !maps.Equal(refs.ConfigMaps, map[string]bool{cm: true}) || !maps.Equal(refs.Secrets, map[string]bool{secret: true}) {
				t.Errorf("the pod template references ConfigMaps %v and Secrets %v, want %s and %s: the generated names",
					slices.Sorted(maps.Keys(refs.ConfigMaps)), slices.Sorted(maps.Keys(refs.Secrets)), cm, secret)
			}
			if !t.Failed() {
				t.Logf("kubectl kustomize with %s: the step lists %v %v, the pod template uses the same", tc.transform, cfg.ConfigMaps, cfg.Secrets)
			}
		})
	}
}

// generatedName is the name of the one object of kind that a generator named name made:
// name, a dash and Kustomize's 10-character content hash.
func generatedName(t *testing.T, objs []obj, kind, name string) string {
	t.Helper()
	re := regexp.MustCompile("^" + regexp.QuoteMeta(name) + "-[a-z0-9]{10}$")
	var found []string
	for _, o := range objs {
		if o.kind() == kind && re.MatchString(o.meta("name")) {
			found = append(found, o.meta("name"))
		}
	}
	if len(found) != 1 {
		t.Fatalf("%ss generated from %s: %v, want one (%v)", kind, name, found, keys(objs))
	}
	return found[0]
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// controllerBaseHeader heads examples/kustomize/controller/install.yaml.
const controllerBaseHeader = "# Generated from charts/configmap-attacher with its default values (release configmap-attacher,\n" +
	"# namespace configmap-attacher, --skip-tests --no-hooks) by test/chart TestKustomizeControllerBase (CMA_UPDATE=1). Do not edit.\n"

// TestKustomizeControllerBase: examples/kustomize/controller/install.yaml is the chart rendered
// with its defaults, so the Kustomize base cannot drift from the chart (CMA_UPDATE=1 rewrites
// it); `kubectl kustomize` builds the base, the real apiserver takes it (server-side dry run),
// and its controller pod is admitted by Pod Security's restricted level.
func TestKustomizeControllerBase(t *testing.T) {
	c := cluster.Require(t, shared, sharedErr)
	base := filepath.Join(repoRoot(), "examples", "kustomize", "controller")
	// --skip-tests: the helm test hook (templates/tests) is no part of an install; --no-hooks:
	// nor is the uninstall cleanup hook (a plain Job here, run at once).
	rendered, err := helm(t, "", "template", "configmap-attacher", chartDir(), "-n", "configmap-attacher", "--skip-tests", "--no-hooks")
	if err != nil {
		t.Fatal(err)
	}
	want := controllerBaseHeader + rendered
	file := filepath.Join(base, "install.yaml")
	if os.Getenv("CMA_UPDATE") == "1" {
		writeFile(t, file, want)
	}
	if got, err := os.ReadFile(file); err != nil || string(got) != want {
		t.Fatalf("%s differs from the chart rendered with its defaults (%v): run CMA_UPDATE=1 go test ./test/chart -run TestKustomizeControllerBase", file, err)
	}
	out, err := kubectl(c, nil, "kustomize", base)
	if err != nil {
		t.Fatal(err)
	}
	objs := parseDocs(t, "kustomize output", out)
	if _, err := kubectl(c, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: configmap-attacher}\n"), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	res, err := kubectl(c, []byte(out), "apply", "--server-side", "--dry-run=server", "--field-manager=kustomize", "-f", "-")
	if err != nil {
		t.Fatalf("server-side dry run: %v", err)
	}
	if n := strings.Count(strings.TrimSpace(res), "\n") + 1; n != len(objs) {
		t.Errorf("dry run applied %d objects, kustomize built %d", n, len(objs))
	}
	d := find(objs, "Deployment", "configmap-attacher", "configmap-attacher")
	ns := restrictedNamespace(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admitPod(ctx, c.Client(t), ns, podTemplateOf(t, d)); err != nil {
		t.Errorf("the base's controller pod in a restricted namespace: %v", err)
	}
}

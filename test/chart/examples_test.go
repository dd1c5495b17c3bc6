package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The values examples/controller.yaml is rendered with: the chart's defaults, released as
// configmap-attacher (the chart's name, so every object and the Lease are named
// configmap-attacher, the controller's -leader-election-id default, as the Argo CD, Flux and
// Kustomize examples install it) in the namespace configmap-attacher, as the controller mode's
// tests and hack/demo expect (test/support/cluster ControllerModeIdentity).
const (
	exampleRelease   = "configmap-attacher"
	exampleNamespace = "configmap-attacher"
)

// controllerExampleHeader heads examples/controller.yaml; the Namespace follows it (the chart
// does not create its own namespace, `kubectl apply -f` needs it).
const controllerExampleHeader = `# configmap-attacher controller: the watcher that makes every opted-in ConfigMap and Secret a
# dependent of each live ReplicaSet (of a Rollout or a Deployment) whose pod template uses it.
# See docs/controller.md.
#   kubectl apply -f controller.yaml
#
# Generated from charts/configmap-attacher with its default values by test/chart
# TestExamplesFollowChart (CMA_UPDATE=1 rewrites it); do not edit, change the chart:
#   helm template configmap-attacher charts/configmap-attacher \
#     -n configmap-attacher --skip-tests --no-hooks
# with this Namespace first. Without the chart's pre-delete hook (applied by kubectl it would run
# at once): before deleting these objects, run configmap-attacher cleanup (docs/install.md#uninstall). The chart's values (charts/configmap-attacher/README.md) are the
# knobs: render with your own to change them, e.g. --set image.digest=sha256:<index digest>
# (the release's install.md), or install the chart.
#
# It watches every namespace. To watch only some: the chart's rbac.scope=namespaces with
# namespaces={a,b}, or this file without its ClusterRole and ClusterRoleBinding, -namespaces=a,b
# in the args, and controller-namespaced.yaml in each namespace.
#
# Nothing here reads object data: the controller watches ConfigMaps and Secrets through the
# metadata API (PartialObjectMetadata). But RBAC cannot tell a metadata request from a full one:
# list/watch on secrets would let anyone holding this token read every Secret's data. Treat the
# token as a Secret reader (it never leaves the pod; automount only into this Deployment) or use
# the namespaced variant.
#
# OwnerReferencesPermissionEnforcement (OpenShift): that admission lets a user change an object's
# ownerReferences only if the user may delete the object, so on such clusters the controller also
# needs delete on the ConfigMaps and Secrets (it never deletes anything). Bind it per namespace
# with rbac-ownerreferences-enforcement.yaml, or render with
# --set rbac.ownerReferencesPermissionEnforcement=true (cluster-wide).
---
apiVersion: v1
kind: Namespace
metadata:
  name: configmap-attacher
`

// renderControllerExample is what examples/controller.yaml must hold.
func renderControllerExample(t *testing.T) string {
	t.Helper()
	// --no-hooks: the uninstall cleanup hook, applied by kubectl, would be an ordinary Job run at once.
	rendered, err := helm(t, "", "template", exampleRelease, chartDir(), "-n", exampleNamespace, "--skip-tests", "--no-hooks")
	if err != nil {
		t.Fatal(err)
	}
	return controllerExampleHeader + rendered
}

// namespacedDrift compares examples/controller-namespaced.yaml (a Role and a RoleBinding
// without a namespace, applied with kubectl -n in each watched namespace) with the Role and
// RoleBinding the chart renders in a watched namespace with rbac.scope: namespaces, object by
// object: names, the rules, the roleRef and the subjects. It returns the differences.
func namespacedDrift(t *testing.T, example []byte, chart []obj, ns string) []string {
	t.Helper()
	var diffs []string
	got := map[string]obj{}
	for _, o := range parseDocs(t, "examples/controller-namespaced.yaml", string(example)) {
		if o.meta("namespace") != "" {
			diffs = append(diffs, fmt.Sprintf("%s has a namespace: it is applied with kubectl -n", o.key()))
		}
		got[o.kind()+" "+o.meta("name")] = o
	}
	for _, kind := range []string{"Role", "RoleBinding"} {
		w := find(chart, kind, ns, exampleRelease)
		if w == nil {
			t.Fatalf("the chart renders no %s %s/%s: %v", kind, ns, exampleRelease, keys(chart))
		}
		g, ok := got[kind+" "+exampleRelease]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("no %s %s (the chart's name)", kind, exampleRelease))
			continue
		}
		delete(got, kind+" "+exampleRelease)
		for _, field := range []string{"rules", "roleRef", "subjects"} {
			if !reflect.DeepEqual(g[field], w[field]) {
				gy, _ := yaml.Marshal(g[field])
				wy, _ := yaml.Marshal(w[field])
				diffs = append(diffs, fmt.Sprintf("%s %s: %s differ from the chart's:\n%s\nchart:\n%s", kind, exampleRelease, field, gy, wy))
			}
		}
	}
	for k := range got {
		diffs = append(diffs, fmt.Sprintf("%s is not in the chart's per-namespace RBAC", k))
	}
	return diffs
}

// TestExamplesFollowChart: the plain manifests cannot drift from the chart.
// examples/controller.yaml is the chart rendered with its defaults (CMA_UPDATE=1 rewrites it);
// examples/controller-namespaced.yaml is checked object by object against the chart's
// rbac.scope: namespaces RBAC. Planted faults: a verb removed from either is reported.
func TestExamplesFollowChart(t *testing.T) {
	file := filepath.Join(repoRoot(), "examples", "controller.yaml")
	want := renderControllerExample(t)
	if os.Getenv("CMA_UPDATE") == "1" {
		writeFile(t, file, want)
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s differs from the chart rendered with its defaults: run CMA_UPDATE=1 go test ./test/chart -run TestExamplesFollowChart", file)
	}
	objs := parseDocs(t, "examples/controller.yaml", string(got))
	for _, k := range []string{"Namespace /" + exampleNamespace, "ServiceAccount " + exampleNamespace + "/" + exampleRelease,
		"ClusterRole /" + exampleRelease, "Deployment " + exampleNamespace + "/" + exampleRelease} {
		if !strings.Contains(strings.Join(keys(objs), "\n")+"\n", k+"\n") {
			t.Errorf("examples/controller.yaml has no %s: %v", k, keys(objs))
		}
	}

	nsFile := filepath.Join(repoRoot(), "examples", "controller-namespaced.yaml")
	example, err := os.ReadFile(nsFile)
	if err != nil {
		t.Fatal(err)
	}
	chart, _, err := renderRelease(t, exampleRelease, exampleNamespace, "rbac: {scope: namespaces}\nnamespaces: [app-a]\n")
	if err != nil {
		t.Fatal(err)
	}
	if d := namespacedDrift(t, example, chart, "app-a"); len(d) > 0 {
		t.Errorf("%s differs from the chart's rbac.scope: namespaces RBAC:\n%s", nsFile, strings.Join(d, "\n"))
	}

	t.Run("planted-verb-removed", func(t *testing.T) {
		// controller.yaml: a hand edit is not the rendering.
		edited := strings.Replace(string(got), `verbs: ["list", "watch", "patch"]`, `verbs: ["list", "watch"]`, 1)
		if edited == string(got) || edited == want {
			t.Errorf("removing patch from controller.yaml's ClusterRole went unnoticed")
		}
		// controller-namespaced.yaml: the object-by-object check names the Role's rules.
		bad := strings.Replace(string(example), `verbs: ["list", "watch", "patch"]`, `verbs: ["list", "watch"]`, 1)
		if bad == string(example) {
			t.Fatalf("controller-namespaced.yaml has no rule with list, watch, patch")
		}
		d := namespacedDrift(t, []byte(bad), chart, "app-a")
		if len(d) != 1 || !strings.Contains(d[0], "Role "+exampleRelease+": rules differ") {
			t.Errorf("a removed verb: differences %q, want the Role's rules", d)
		}
	})
}

// renderRelease is render with another release name and namespace.
func renderRelease(t *testing.T, release, ns, values string) ([]obj, []byte, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	writeFile(t, f, values)
	out, err := helm(t, "", "template", release, chartDir(), "-n", ns, "--skip-tests", "-f", f)
	if err != nil {
		return nil, nil, err
	}
	return parseDocs(t, "rendered YAML", out), []byte(out), nil
}

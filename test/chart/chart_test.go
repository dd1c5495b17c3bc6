package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// obj is one rendered manifest.
type obj map[string]any

func (o obj) kind() string { s, _ := o["kind"].(string); return s }
func (o obj) meta(k string) string {
	m, _ := o["metadata"].(map[string]any)
	s, _ := m[k].(string)
	return s
}
func (o obj) key() string { return o.kind() + " " + o.meta("namespace") + "/" + o.meta("name") }

// get walks o by keys (string for maps, int for lists).
func get(v any, path ...any) any {
	if o, ok := v.(obj); ok {
		v = map[string]any(o)
	}
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

const releaseNS = "cma-chart"

// render runs helm template with values (YAML) and returns the manifests `helm install`
// applies: without the `helm test` hooks (templates/tests), which only `helm test` creates.
func render(t *testing.T, values string) ([]obj, []byte, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := helm(t, "", "template", "rel", chartDir(), "-n", releaseNS, "--skip-tests", "-f", f)
	if err != nil {
		return nil, nil, err
	}
	return parseDocs(t, "rendered YAML", out), []byte(out), nil
}

// parseDocs parses a multi-document YAML stream (helm template, kubectl kustomize) into its
// objects; what names the stream in the failure.
func parseDocs(t *testing.T, what, out string) []obj {
	t.Helper()
	var objs []obj
	for _, doc := range strings.Split(out, "\n---") {
		var o obj
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%s does not parse: %v\n%s", what, err, doc)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
	return objs
}

func find(objs []obj, kind, ns, name string) obj {
	for _, o := range objs {
		if o.kind() == kind && o.meta("namespace") == ns && o.meta("name") == name {
			return o
		}
	}
	return nil
}

func keys(objs []obj) []string {
	var k []string
	for _, o := range objs {
		k = append(k, o.key())
	}
	sort.Strings(k)
	return k
}

// containerArgs are the controller container's args in the rendered Deployment.
func containerArgs(t *testing.T, objs []obj) []string {
	t.Helper()
	d := find(objs, "Deployment", releaseNS, "rel-configmap-attacher")
	if d == nil {
		t.Fatalf("no Deployment rel-configmap-attacher in %v", keys(objs))
	}
	var args []string
	list, _ := get(d, "spec", "template", "spec", "containers", 0, "args").([]any)
	for _, a := range list {
		args = append(args, a.(string))
	}
	return args
}

// rules returns a Role's or ClusterRole's rules as "group/resource:verb" strings, sorted.
func rules(o obj) []string {
	var out []string
	rs, _ := o["rules"].([]any)
	for _, r := range rs {
		groups, _ := get(r, "apiGroups").([]any)
		resources, _ := get(r, "resources").([]any)
		verbs, _ := get(r, "verbs").([]any)
		for _, g := range groups {
			for _, res := range resources {
				for _, v := range verbs {
					out = append(out, fmt.Sprintf("%s/%s:%s", g, res, v))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// controllerRules is exactly what the controller calls (and examples/controller.yaml grants).
var controllerRules = sortedUnion([]string{
	"/configmaps:list", "/configmaps:patch", "/configmaps:watch",
	"/events:create", "/events:patch",
	"/secrets:list", "/secrets:patch", "/secrets:watch",
	"apps/replicasets:list", "apps/replicasets:watch",
	// The live confirmation of new owners (GETs, metadata only).
	"apps/replicasets:get", "apps/deployments:get", "argoproj.io/rollouts:get", "argoproj.io/experiments:get",
	// Every user counts: the workloads and the pod templates that cannot own.
	"/pods:list", "/pods:watch",
	"apps/daemonsets:list", "apps/daemonsets:watch", "apps/deployments:list", "apps/deployments:watch",
	"apps/statefulsets:list", "apps/statefulsets:watch",
	"argoproj.io/experiments:list", "argoproj.io/experiments:watch", "argoproj.io/rollouts:list", "argoproj.io/rollouts:watch",
	"batch/cronjobs:list", "batch/cronjobs:watch", "batch/jobs:list", "batch/jobs:watch",
	// Every user owns: revisions and anchors (the only objects created and deleted), and the
	// live confirmation of the other owner kinds.
	"apps/controllerrevisions:list", "apps/controllerrevisions:watch", "apps/controllerrevisions:get",
	"apps/controllerrevisions:create", "apps/controllerrevisions:delete", "/namespaces:get",
	"/pods:get", "apps/statefulsets:get", "apps/daemonsets:get", "batch/jobs:get", "batch/cronjobs:get",
})

var deleteRules = []string{"/configmaps:delete", "/secrets:delete"}

func sortedUnion(a ...[]string) []string {
	var out []string
	for _, l := range a {
		out = append(out, l...)
	}
	sort.Strings(out)
	return out
}

// combos are the values combinations every test renders, each with its checks.
var combos = []struct {
	name   string
	values string
	check  func(t *testing.T, objs []obj)
}{
	{"defaults", ``, func(t *testing.T, objs []obj) {
		cr := find(objs, "ClusterRole", "", "rel-configmap-attacher")
		if cr == nil || !slices.Equal(rules(cr), controllerRules) {
			t.Errorf("ClusterRole rules %v, want %v", rules(cr), controllerRules)
		}
		le := find(objs, "Role", releaseNS, "rel-configmap-attacher-leader-election")
		if want := []string{"coordination.k8s.io/leases:create", "coordination.k8s.io/leases:get", "coordination.k8s.io/leases:update"}; le == nil || !slices.Equal(rules(le), want) {
			t.Errorf("leader-election Role rules %v, want %v", rules(le), want)
		}
		args := containerArgs(t, objs)
		for _, want := range []string{"controller", "-leader-elect=true", "-leader-election-namespace=" + releaseNS, "-leader-election-id=rel-configmap-attacher",
			"-selector=configmap-attacher/revisioned=true", "-metrics-addr=:8080", "-health-addr=:8081"} {
			if !slices.Contains(args, want) {
				t.Errorf("args %q lack %q", args, want)
			}
		}
		// The default detects the kinds (the Rollout CRD may be absent): no -workloads.
		if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-workloads") }) {
			t.Errorf("args %q: -workloads by default; the controller then refuses to start without the Rollout CRD", args)
		}
		if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-namespaces") }) {
			t.Errorf("args %q: -namespaces without namespaces", args)
		}
		d := find(objs, "Deployment", releaseNS, "rel-configmap-attacher")
		if get(d, "spec", "replicas") != float64(2) || get(d, "spec", "template", "spec", "securityContext", "runAsNonRoot") != true ||
			get(d, "spec", "template", "spec", "containers", 0, "securityContext", "readOnlyRootFilesystem") != true ||
			get(d, "spec", "template", "spec", "containers", 0, "readinessProbe", "httpGet", "path") != "/readyz" ||
			get(d, "spec", "template", "spec", "containers", 0, "livenessProbe", "httpGet", "path") != "/healthz" ||
			get(d, "spec", "template", "spec", "containers", 0, "image") != "ghcr.io/configmap-attacher/configmap-attacher:"+readChartYAML(t).AppVersion {
			t.Errorf("Deployment: replicas, security context, probes or image wrong: %v", d)
		}
		if env := get(d, "spec", "template", "spec", "containers", 0, "env", 1); get(env, "name") != "CONFIGMAP_ATTACHER_MEMORY_LIMIT" ||
			get(env, "valueFrom", "resourceFieldRef", "resource") != "limits.memory" {
			t.Errorf("env[1] %v, want CONFIGMAP_ATTACHER_MEMORY_LIMIT from limits.memory (the controller sets GOMEMLIMIT to 80 %% of it)", env)
		}
		for _, k := range []string{"PodDisruptionBudget " + releaseNS + "/rel-configmap-attacher", "Service " + releaseNS + "/rel-configmap-attacher-metrics"} {
			if !slices.Contains(keys(objs), k) {
				t.Errorf("no %s in %v", k, keys(objs))
			}
		}
	}},
	{"per-namespace", "rbac: {scope: namespaces}\nnamespaces: [cma-chart-a, cma-chart-b]\n", func(t *testing.T, objs []obj) {
		if find(objs, "ClusterRole", "", "rel-configmap-attacher") != nil || find(objs, "ClusterRoleBinding", "", "rel-configmap-attacher") != nil {
			t.Errorf("per-namespace RBAC renders a ClusterRole or ClusterRoleBinding: %v", keys(objs))
		}
		for _, ns := range []string{"cma-chart-a", "cma-chart-b"} {
			r := find(objs, "Role", ns, "rel-configmap-attacher")
			if r == nil || !slices.Equal(rules(r), controllerRules) || find(objs, "RoleBinding", ns, "rel-configmap-attacher") == nil {
				t.Errorf("namespace %s: Role rules %v (want %v) and a RoleBinding", ns, rules(r), controllerRules)
			}
		}
		if args := containerArgs(t, objs); !slices.Contains(args, "-namespace=cma-chart-a,cma-chart-b") {
			t.Errorf("args %q lack -namespace=cma-chart-a,cma-chart-b", args)
		}
	}},
	{"ownerreferences-enforcement", "rbac: {ownerReferencesPermissionEnforcement: true}\n", func(t *testing.T, objs []obj) {
		if cr := find(objs, "ClusterRole", "", "rel-configmap-attacher"); !slices.Equal(rules(cr), sortedUnion(controllerRules, deleteRules)) {
			t.Errorf("ClusterRole rules %v, want %v plus delete", rules(cr), controllerRules)
		}
	}},
	{"ownerreferences-enforcement-per-namespace", "rbac: {scope: namespaces, ownerReferencesPermissionEnforcement: true}\nnamespaces: [cma-chart-a]\n", func(t *testing.T, objs []obj) {
		if r := find(objs, "Role", "cma-chart-a", "rel-configmap-attacher"); !slices.Equal(rules(r), sortedUnion(controllerRules, deleteRules)) {
			t.Errorf("Role rules %v, want %v plus delete", rules(r), controllerRules)
		}
	}},
	{"job-rbac", "rbac: {job: {enabled: true, namespaces: [cma-chart-a, cma-chart-b]}}\n", func(t *testing.T, objs []obj) {
		want := exampleJobRules(t)
		for _, ns := range []string{"cma-chart-a", "cma-chart-b"} {
			// Named after the release: examples/job.yaml's configmap-attacher-job can sit beside it.
			r := find(objs, "Role", ns, "rel-configmap-attacher-job")
			if r == nil || !slices.Equal(rules(r), want) || find(objs, "ServiceAccount", ns, "rel-configmap-attacher-job") == nil ||
				find(objs, "RoleBinding", ns, "rel-configmap-attacher-job") == nil {
				t.Errorf("namespace %s: Job Role rules %v, want examples/job.yaml's %v, with its ServiceAccount and RoleBinding", ns, rules(r), want)
			}
			if find(objs, "ServiceAccount", ns, "configmap-attacher-job") != nil {
				t.Errorf("namespace %s: the chart renders examples/job.yaml's ServiceAccount name", ns)
			}
		}
	}},
	// -require-opt-in lists the listed objects' labels, -dry-run gets their owners: the Role
	// has exactly what each flag adds (the commented rules of examples/job.yaml).
	{"job-rbac-opt-in-dry-run", "rbac: {job: {enabled: true, namespaces: [cma-chart-a], requireOptIn: true, dryRun: true, serviceAccountName: deployer}}\n", func(t *testing.T, objs []obj) {
		want := sortedUnion(exampleJobRules(t), []string{"/configmaps:list", "/secrets:list", "/configmaps:get", "/secrets:get"})
		r := find(objs, "Role", "cma-chart-a", "deployer")
		if r == nil || !slices.Equal(rules(r), want) {
			t.Errorf("Job Role rules %v, want %v", rules(r), want)
		}
	}},
	{"monitoring", "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}\ngrafanaDashboard: {enabled: true}\n", func(t *testing.T, objs []obj) {
		sm := find(objs, "ServiceMonitor", releaseNS, "rel-configmap-attacher")
		if sm == nil || get(sm, "spec", "endpoints", 0, "port") != "metrics" || get(sm, "spec", "endpoints", 0, "honorLabels") != true {
			t.Errorf("ServiceMonitor %v: want port metrics, honorLabels", sm)
		}
		pr := find(objs, "PrometheusRule", releaseNS, "rel-configmap-attacher")
		var alerts []string
		rs, _ := get(pr, "spec", "groups", 0, "rules").([]any)
		for _, r := range rs {
			alerts = append(alerts, fmt.Sprintf("%s for %s", get(r, "alert"), get(r, "for")))
		}
		for _, want := range []string{"ConfigMapAttacherLostReferences for 5m", "ConfigMapAttacherUnownedObjects for 15m"} {
			if !slices.Contains(alerts, want) {
				t.Errorf("PrometheusRule alerts %v lack %q", alerts, want)
			}
		}
		checkAlertSelectors(t, pr, `{job="rel-configmap-attacher-metrics"}`)
		cm := find(objs, "ConfigMap", releaseNS, "rel-configmap-attacher-dashboard")
		if get(cm, "metadata", "labels", "grafana_dashboard") != "1" {
			t.Errorf("dashboard ConfigMap %v: want label grafana_dashboard: \"1\"", get(cm, "metadata"))
		}
		var d map[string]any
		js, _ := get(cm, "data", "configmap-attacher.json").(string)
		if err := json.Unmarshal([]byte(js), &d); err != nil || d["uid"] != "configmap-attacher" {
			t.Errorf("dashboard JSON: %v (uid %v)", err, d["uid"])
		}
	}},
	// Scraped by something else than the chart's ServiceMonitor: the alerts select what the
	// series carry then, and nothing of the ServiceMonitor's job.
	{"monitoring-other-scraper", "prometheusRule: {enabled: true, selector: 'namespace=\"mon\", pod=~\"cma-.*\"'}\n", func(t *testing.T, objs []obj) {
		checkAlertSelectors(t, find(objs, "PrometheusRule", releaseNS, "rel-configmap-attacher"), `{namespace="mon", pod=~"cma-.*"}`)
	}},
	{"single-replica-dry-run-digest", "replicas: 1\nleaderElection: {enabled: false}\ndryRun: true\nworkloads: [deployments]\nlogFormat: text\n" +
		"image: {digest: \"sha256:0000000000000000000000000000000000000000000000000000000000000000\"}\n", func(t *testing.T, objs []obj) {
		args := containerArgs(t, objs)
		for _, want := range []string{"-leader-elect=false", "-dry-run", "-workloads=deployments", "-log-format=text"} {
			if !slices.Contains(args, want) {
				t.Errorf("args %q lack %q", args, want)
			}
		}
		if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-leader-election-") }) {
			t.Errorf("args %q: lease flags without leader election", args)
		}
		for _, k := range []string{"Role " + releaseNS + "/rel-configmap-attacher-leader-election", "PodDisruptionBudget " + releaseNS + "/rel-configmap-attacher"} {
			if slices.Contains(keys(objs), k) {
				t.Errorf("%s rendered with one replica and no leader election", k)
			}
		}
		if img := get(find(objs, "Deployment", releaseNS, "rel-configmap-attacher"), "spec", "template", "spec", "containers", 0, "image"); img != "ghcr.io/configmap-attacher/configmap-attacher@sha256:0000000000000000000000000000000000000000000000000000000000000000" {
			t.Errorf("image %v, want repository@digest", img)
		}
	}},
	// Scraped by a PodMonitor (no metrics Service): the alerts' default selector is its job.
	{"podmonitor", "metrics: {enabled: false}\npodMonitor: {enabled: true, interval: 15s}\nprometheusRule: {enabled: true}\n", func(t *testing.T, objs []obj) {
		pm := find(objs, "PodMonitor", releaseNS, "rel-configmap-attacher")
		if pm == nil || get(pm, "spec", "podMetricsEndpoints", 0, "port") != "metrics" || get(pm, "spec", "podMetricsEndpoints", 0, "interval") != "15s" ||
			get(pm, "spec", "selector", "matchLabels", "app.kubernetes.io/instance") != "rel" {
			t.Errorf("PodMonitor %v: want the metrics port every 15s of the release's pods", pm)
		}
		for _, k := range []string{"ServiceMonitor", "Service"} {
			for _, o := range objs {
				if o.kind() == k {
					t.Errorf("%s rendered with podMonitor and metrics.enabled false", o.key())
				}
			}
		}
		checkAlertSelectors(t, find(objs, "PrometheusRule", releaseNS, "rel-configmap-attacher"), `{job="`+releaseNS+`/rel-configmap-attacher"}`)
	}},
	// Every knob of the chart set at once (everyKnob): each appears where it should, and the
	// apiserver takes the whole (server-side dry run, the monitoring objects against their CRDs).
	{"every-knob", everyKnob, checkEveryKnob},
	{"external-service-account-no-rbac", "serviceAccount: {create: false, name: preexisting}\nrbac: {create: false}\n", func(t *testing.T, objs []obj) {
		for _, o := range objs {
			if strings.Contains(o.kind(), "Role") || o.kind() == "ServiceAccount" {
				t.Errorf("%s rendered with rbac.create and serviceAccount.create false", o.key())
			}
		}
		if sa := get(find(objs, "Deployment", releaseNS, "rel-configmap-attacher"), "spec", "template", "spec", "serviceAccountName"); sa != "preexisting" {
			t.Errorf("serviceAccountName %v, want preexisting", sa)
		}
	}},
}

// checkAlertSelectors: every metric selector of every alert's expression is sel, exactly.
func checkAlertSelectors(t *testing.T, pr obj, sel string) {
	t.Helper()
	rs, _ := get(pr, "spec", "groups", 0, "rules").([]any)
	if len(rs) == 0 {
		t.Fatalf("PrometheusRule %v has no rules", pr)
	}
	metric := regexp.MustCompile(`configmap_attacher_[a-z_]+(\{[^}]*\})?`)
	for _, r := range rs {
		expr, _ := get(r, "expr").(string)
		for _, m := range metric.FindAllStringSubmatch(expr, -1) {
			if m[1] != sel {
				t.Errorf("alert %v: %s selects %q, want %q", get(r, "alert"), m[0], m[1], sel)
			}
		}
	}
}

// exampleJobRules are the rules of examples/job.yaml's Role.
func exampleJobRules(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "examples", "job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---") {
		var o obj
		if err := yaml.Unmarshal([]byte(doc), &o); err == nil && o.kind() == "Role" {
			return rules(o)
		}
	}
	t.Fatal("examples/job.yaml has no Role")
	return nil
}

func TestLint(t *testing.T) {
	for _, c := range combos {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(c.values), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := helm(t, "", "lint", "--strict", chartDir(), "-f", f)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		// --strict turns warnings into failures; only the [INFO] about a missing icon remains.
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "[") && !strings.HasPrefix(l, "[INFO] Chart.yaml: icon is recommended") {
				t.Errorf("%s: helm lint: %s", c.name, l)
			}
		}
	}
}

// TestTemplateServerDryRun renders every combination, checks it, and applies it to the real
// apiserver with a server-side dry run (schema validation of every object, the monitoring ones
// against the prometheus-operator CRDs: ServiceMonitor, PodMonitor, PrometheusRule).
func TestTemplateServerDryRun(t *testing.T) {
	c := cluster.Require(t, shared, sharedErr)
	prepareDryRun(t, c)
	for _, combo := range combos {
		t.Run(combo.name, func(t *testing.T) {
			objs, out, err := render(t, combo.values)
			if err != nil {
				t.Fatal(err)
			}
			combo.check(t, objs)
			serverDryRun(t, c, objs, out)
		})
	}
}

// prepareDryRun installs the monitoring CRDs (ServiceMonitor, PodMonitor, PrometheusRule) and
// the namespaces the combinations render into.
func prepareDryRun(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	crds := prometheusOperatorCRDs(t)
	// The PodMonitor CRD from the same module and directory.
	crds = append(crds, filepath.Join(filepath.Dir(crds[0]), "monitoring.coreos.com_podmonitors.yaml"))
	for _, f := range crds {
		if _, err := kubectl(c, nil, "apply", "--server-side", "-f", f); err != nil {
			t.Fatal(err)
		}
	}
	for _, crd := range []string{"servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com", "podmonitors.monitoring.coreos.com"} {
		if _, err := kubectl(c, nil, "wait", "--for=condition=Established", "--timeout=60s", "crd/"+crd); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{releaseNS, "cma-chart-a", "cma-chart-b"} {
		if _, err := kubectl(c, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ns+"}\n"), "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
	}
}

// serverDryRun applies a render with a server-side dry run: server-side apply refuses a field
// the apiserver's schema does not have, so every object is checked against c's version.
func serverDryRun(t *testing.T, c *cluster.Cluster, objs []obj, out []byte) {
	t.Helper()
	res, err := kubectl(c, out, "apply", "--server-side", "--dry-run=server", "--field-manager=helm", "-f", "-")
	if err != nil {
		t.Fatalf("server-side dry run: %v", err)
	}
	if n := strings.Count(strings.TrimSpace(res), "\n") + 1; n != len(objs) {
		t.Errorf("dry run applied %d objects, rendered %d:\n%s", n, len(objs), res)
	}
}

// TestTemplateRejects: values that cannot work fail the render, naming the value: what one
// value may be by values.schema.json (helm checks it before rendering: a misspelt key, a wrong
// enum or type), what depends on several values by the templates' fail checks.
func TestTemplateRejects(t *testing.T) {
	for values, want := range map[string]string{
		"rbac: {scope: namespaces}\n":                                  "rbac.scope: namespaces needs the list of watched namespaces",
		"leaderElection: {enabled: false}\n":                           "replicas > 1 needs leaderElection.enabled",
		"metrics: {enabled: false}\nserviceMonitor: {enabled: true}\n": "serviceMonitor.enabled needs metrics.enabled",
		"serviceAccount: {create: false}\n":                            "serviceAccount.name is required",
		// The schema's.
		"rbac: {scope: everywhere}\n":           "at '/rbac/scope': value must be one of",
		"selector: \"\"\n":                      "at '/selector'",
		"workloads: [replicasets]\n":            "at '/workloads/0'",
		"selectr: a=b\n":                        "additional properties 'selectr' not allowed",
		"logLevel: verbose\n":                   "at '/logLevel'",
		"leaderElection: {leaseDuration: 15}\n": "at '/leaderElection/leaseDuration'",
		"resync: 10 minutes\n":                  "at '/resync'",
		"rbac: {job: {discovr: true}}\n":        "additional properties 'discovr' not allowed",
		"image: {digest: latest}\n":             "at '/image/digest'",
		"qps: 0\n":                              "at '/qps'",
		// The scheduling and lifecycle knobs.
		"terminationGracePeriodSeconds: 30s\n":                           "at '/terminationGracePeriodSeconds': got string, want integer",
		"topologySpreadConstraints: [{maxSkew: 1}]\n":                    "at '/topologySpreadConstraints/0': missing properties 'topologyKey', 'whenUnsatisfiable'",
		"extraVolumes: [{configMap: {name: ca}}]\n":                      "at '/extraVolumes/0': missing property 'name'",
		"extraVolumeMounts: [{name: ca}]\n":                              "at '/extraVolumeMounts/0': missing property 'mountPath'",
		"extraObjects: [1]\n":                                            "at '/extraObjects/0': got number, want string or object",
		"deploymentAnnotations: {a: 1}\n":                                "at '/deploymentAnnotations/a': got number, want string",
		"serviceMonitor: {relabelings: {a: b}}\n":                        "at '/serviceMonitor/relabelings': got object, want array",
		"podMonitor: {metricRelabelings: [drop]}\n":                      "at '/podMonitor/metricRelabelings/0': got string, want object",
		"podMonitor: {enabled: \"yes\"}\n":                               "at '/podMonitor/enabled': got string, want boolean",
		"networkPolicy: {metricsPodSelecter: {}}\n":                      "additional properties 'metricsPodSelecter' not allowed",
		"networkPolicy: {egress: {to: []}}\n":                            "at '/networkPolicy/egress': got object, want array",
		"serviceMonitor: {enabled: true}\npodMonitor: {enabled: true}\n": "serviceMonitor.enabled and podMonitor.enabled are mutually exclusive",
		"metrics: {enabled: false}\nprometheusRule: {enabled: true}\n":   "prometheusRule.enabled needs metrics.enabled (the Service a ServiceMonitor scrapes) or podMonitor.enabled",
	} {
		_, _, err := render(t, values)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("values %q: error %v, want one containing %q", values, err, want)
		}
	}
}

var metricName = regexp.MustCompile(`\bconfigmap_attacher_controller_[a-z_]+`)

// queriedMetrics returns every configmap_attacher_controller_ metric name the chart's
// dashboard and alerts query, each with where it is used.
func queriedMetrics(t *testing.T, objs []obj) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	b, err := os.ReadFile(filepath.Join(chartDir(), "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("files/dashboard.json: %v", err)
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			ms := metricName.FindAllString(tg.Expr, -1)
			if len(ms) == 0 {
				t.Errorf("dashboard panel %q: %q queries no configmap_attacher_controller_ metric", p.Title, tg.Expr)
			}
			for _, m := range ms {
				used[m] = append(used[m], "dashboard panel "+p.Title)
			}
		}
	}
	pr := find(objs, "PrometheusRule", releaseNS, "rel-configmap-attacher")
	if pr == nil {
		t.Fatalf("no PrometheusRule rendered")
	}
	rs, _ := get(pr, "spec", "groups", 0, "rules").([]any)
	for _, r := range rs {
		expr, _ := get(r, "expr").(string)
		for _, m := range metricName.FindAllString(expr, -1) {
			used[m] = append(used[m], fmt.Sprintf("alert %s", get(r, "alert")))
		}
	}
	return used
}

// scrapedNames are the metric names of a Prometheus text exposition (sample names, so a
// histogram appears as _bucket, _sum and _count).
func scrapedNames(body []byte) map[string]bool {
	names := map[string]bool{}
	for _, l := range bytes.Split(body, []byte("\n")) {
		if len(l) == 0 || l[0] == '#' {
			continue
		}
		n := l
		if i := bytes.IndexAny(l, "{ "); i >= 0 {
			n = l[:i]
		}
		names[string(n)] = true
	}
	return names
}

// TestNotes: the NOTES helm prints after install name only what exists: the Lease command with
// leader election on, none with it off (there is no Lease to read then); and the exact doctor
// command for the release (its namespace and instance), with `helm test` while the hook is
// rendered.
func TestNotes(t *testing.T) {
	c := cluster.Require(t, shared, sharedErr) // helm install --dry-run=client still reads the cluster's version
	for _, tc := range []struct {
		set   []string
		lease bool
	}{
		{nil, true},
		{[]string{"--set", "replicas=1", "--set", "leaderElection.enabled=false"}, false},
	} {
		out, err := helm(t, c.KubeconfigPath, append([]string{"install", "rel", chartDir(), "-n", releaseNS, "--dry-run=client"}, tc.set...)...)
		if err != nil {
			t.Fatal(err)
		}
		_, notes, ok := strings.Cut(out, "NOTES:")
		if !ok {
			t.Fatalf("helm install --dry-run=client printed no NOTES:\n%s", out)
		}
		if got := strings.Contains(notes, "get lease"); got != tc.lease || !strings.Contains(notes, "rollout status deployment/rel-configmap-attacher") {
			t.Errorf("values %q: NOTES has the Lease command %v, want %v:\n%s", tc.set, got, tc.lease, notes)
		}
		if want := "configmap-attacher doctor -mode controller -controller-namespace " + releaseNS + " -instance rel\n"; !strings.Contains(notes, want) ||
			!strings.Contains(notes, "helm test rel -n "+releaseNS) {
			t.Errorf("values %q: NOTES lack the doctor command %q or helm test:\n%s", tc.set, want, notes)
		}
	}
}

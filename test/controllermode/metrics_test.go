package controllermode

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/plugin/audit"
	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Metrics over HTTP: -dry-run counts what it would add and the unowned gauge shows the
// objects; without -dry-run they are adopted and the gauge goes to 0; deleting an object a
// ReplicaSet requires shows up as lost; optional references do not count.
func TestMetricsOverHTTP(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	ns := e.namespace(t)
	kube := e.c.Client(t)
	sel := "test/metrics=" + ns // not the shared controller's selector
	l := map[string]string{"test/metrics": ns}
	createConfig(t, kube, ns, "cm-a", "sec-a", l)
	createConfig(t, kube, ns, "cm-b", "", l)
	d := holder(t, kube, ns, "web")
	spec := podSpec("cm-a", "sec-a")
	spec.Containers[0].EnvFrom = append(spec.Containers[0].EnvFrom, envFromCM("cm-b"), envFromCM("never-created"), optionalEnvFromCM("optional-missing"))
	rs := directRS(t, kube, d, "h1", spec)
	args := []string{"-kubeconfig", e.kubeconfig, "-selector", sel, "-leader-elect=false"}

	dry, err := startController(e.c.Dir, e.bin, "metrics-dry-"+ns, append(args, "-dry-run")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dry.Stop)
	nsl := fmt.Sprintf(`namespace=%q`, ns)
	waitMetrics(t, dry, "dry run: 3 unowned, 1 lost, 3 would-add", func(m map[string]float64) bool {
		return cluster.Metric(m, prefix+"unowned_objects", nsl) == 3 && cluster.Metric(m, prefix+"lost_references", nsl) == 1 &&
			cluster.Metric(m, prefix+"owner_references_would_add_total", `kind="ConfigMap"`) == 2 &&
			cluster.Metric(m, prefix+"owner_references_would_add_total", `kind="Secret"`) == 1
	})
	m, _ := dry.Scrape()
	sameAsAudit(t, e, ns, sel, m)
	if n := cluster.SumMetric(m, prefix+"api_requests_total", `verb="patch"`); n != 0 {
		t.Errorf("-dry-run sent %v PATCH requests", n)
	}
	if !strings.Contains(dry.Log(), "dry run: would add the ReplicaSets as owners") {
		t.Errorf("-dry-run logged nothing about what it would add")
	}
	dry.Stop()

	live, err := startController(e.c.Dir, e.bin, "metrics-"+ns, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(live.Stop)
	waitOwned(t, kube, ns, rs, 5*time.Second, cluster.ConfigMapRef("cm-a"), cluster.SecretRef("sec-a"), cluster.ConfigMapRef("cm-b"))
	waitMetrics(t, live, "adopted: 0 unowned, 3 references added", func(m map[string]float64) bool {
		return cluster.Metric(m, prefix+"unowned_objects", nsl) == 0 && cluster.Metric(m, prefix+"owner_references_added_total", `kind="ConfigMap"`) == 2 &&
			cluster.Metric(m, prefix+"owner_references_added_total", `kind="Secret"`) == 1 && cluster.Metric(m, prefix+"leader") == 1
	})
	// A new ReplicaSet: one reaction observed.
	rs2 := directRS(t, kube, d, "h2", podSpec("cm-a", ""))
	waitOwned(t, kube, ns, rs2, 2*time.Second, cluster.ConfigMapRef("cm-a"))
	waitMetrics(t, live, "one reaction observed", func(m map[string]float64) bool {
		return cluster.Metric(m, prefix+"reaction_seconds_count") == 1 && m[prefix+`workqueue_adds_total{name="objects"}`] >= 4
	})
	// cm-b deleted while the ReplicaSet still requires it: lost counts it.
	if err := kube.CoreV1().ConfigMaps(ns).Delete(ctxT(t), "cm-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMetrics(t, live, "lost 2", func(m map[string]float64) bool { return cluster.Metric(m, prefix+"lost_references", nsl) == 2 })
	m, _ = live.Scrape()
	sameAsAudit(t, e, ns, sel, m)
	for _, name := range []string{"workqueue_depth", "workqueue_queue_duration_seconds_count", "workqueue_work_duration_seconds_count", "reconciles_total"} {
		if cluster.SumMetric(m, prefix+name) == 0 && name != "workqueue_depth" {
			t.Errorf("%s%s not reported", prefix, name)
		}
	}
	if _, ok := m[prefix+`workqueue_depth{name="objects"}`]; !ok {
		t.Errorf("no workqueue depth")
	}
}

func waitMetrics(t *testing.T, p *cluster.ControllerProcess, what string, cond func(map[string]float64) bool) {
	t.Helper()
	eventually(t, 30*time.Second, what, func() (bool, string) {
		m, err := p.Scrape()
		if err != nil {
			return false, err.Error()
		}
		var state []string
		for k, v := range m {
			if strings.HasPrefix(k, prefix) && !strings.Contains(k, "bucket") && !strings.Contains(k, "api_requests") {
				state = append(state, fmt.Sprintf("%s=%v", k, v))
			}
		}
		return cond(m), strings.Join(state, " ")
	})
}

// sameAsAudit checks that the unowned and lost gauges equal a fresh `audit -o json`'s gaps for
// the namespace (the same plugin.Gaps over the apiserver's state instead of the caches).
func sameAsAudit(t *testing.T, e *env, ns, sel string, m map[string]float64) {
	t.Helper()
	var out, errb strings.Builder
	code := (&cmd.Audit{Stdout: &out, Stderr: &errb}).Main([]string{"-namespace", ns, "-selector", sel, "-o", "json", "-kubeconfig", e.c.KubeconfigPath})
	if code == cmd.ExitUsage {
		t.Fatalf("audit: %s", errb.String())
	}
	var rep audit.Report
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("audit -o json: %v\n%s", err, out.String())
	}
	nsl := fmt.Sprintf(`namespace=%q`, ns)
	gu, gl := cluster.Metric(m, prefix+"unowned_objects", nsl), cluster.Metric(m, prefix+"lost_references", nsl)
	for _, g := range rep.Gaps {
		if g.Namespace == ns {
			if float64(g.UnownedObjects) != gu || float64(g.LostReferences) != gl {
				t.Errorf("gauges unowned=%v lost=%v, audit gaps unowned=%d lost=%d", gu, gl, g.UnownedObjects, g.LostReferences)
			}
			t.Logf("gauges and audit agree: unowned %v, lost %v", gu, gl)
			return
		}
	}
	t.Errorf("audit reports no gaps for namespace %s: %s", ns, out.String())
}

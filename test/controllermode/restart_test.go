package controllermode

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// The apiserver restarted under the controller (a cluster of its own: the shared one keeps
// serving the other tests): the watches recover, and what is created after the restart,
// before the watches are re-established, is not missed. This cluster has no Rollout CRD, so
// the defaulted -workloads also proves the fallback to Deployments only.
func TestAPIServerRestart(t *testing.T) {
	e := sharedEnv(t)
	c := cluster.Start(t, cluster.Options{})
	kube := c.Client(t)
	ns := c.Namespace(t)
	p, err := startController(c.Dir, e.bin, "restart", "-kubeconfig", c.KubeconfigPath, "-leader-elect=false")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	if !strings.Contains(p.Log(), "watching Deployments only") {
		t.Errorf("no warning about the missing Rollout CRD:\n%s", p.LogTail(10))
	}
	l := map[string]string{cluster.LabelRevisioned: "true"}
	d := holder(t, kube, ns, "web")
	createConfig(t, kube, ns, "before", "", l)
	rs := directRS(t, kube, d, "h1", podSpec("before", ""))
	waitOwned(t, kube, ns, rs, 5*time.Second, cluster.ConfigMapRef("before"))

	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("after-%d", i)
		createConfig(t, kube, ns, name, "", l)
		rs := directRS(t, kube, d, fmt.Sprintf("a%d", i), podSpec(name, ""))
		took := waitOwned(t, kube, ns, rs, 30*time.Second, cluster.ConfigMapRef(name))
		t.Logf("%s owned %v after creation (%v after the restart)", name, took.Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	}
	if !p.Running() {
		t.Fatalf("the controller exited:\n%s", p.LogTail(20))
	}
	m, err := p.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	if n := cluster.SumMetric(m, prefix+"api_requests_total", `verb="patch"`); n != 4 {
		t.Errorf("%v PATCH requests, want 4 (one per object)", n)
	}
}

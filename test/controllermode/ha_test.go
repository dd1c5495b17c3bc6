package controllermode

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/kubernetes"
)

// HA: two replicas with short lease settings; one leads, the standby syncs its caches and
// reports ready but sends no PATCH. SIGKILL the leader (no lease release): the standby takes
// over within lease duration + retry period (client-go jitters the retry by up to 1.2×),
// attaches what was created meanwhile, and rewrites nothing already owned (resourceVersions
// unchanged).
func TestHighAvailabilityFailover(t *testing.T) {
	e := sharedEnv(t)
	ns := e.namespace(t)
	kube := e.c.Client(t)
	const lease, renew, retryP = 3 * time.Second, 2 * time.Second, 500 * time.Millisecond
	sel := "test/ha=" + ns // a selector of its own: the shared controller ignores these objects
	l := map[string]string{"test/ha": ns}
	args := []string{"-kubeconfig", e.kubeconfig, "-selector", sel, "-namespaces", ns,
		"-leader-election-namespace", "configmap-attacher", "-leader-election-id", "ha-" + ns,
		"-leader-election-lease-duration", lease.String(), "-leader-election-renew-deadline", renew.String(),
		"-leader-election-retry-period", retryP.String(), "-log-level", "debug"}
	var procs []*cluster.ControllerProcess
	for _, name := range []string{"ha-a-" + ns, "ha-b-" + ns} {
		p, err := startController(e.c.Dir, e.bin, name, args...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Stop)
		procs = append(procs, p)
	}
	var leader, standby *cluster.ControllerProcess
	eventually(t, 20*time.Second, "one leader", func() (bool, string) {
		var leaders []*cluster.ControllerProcess
		var state []string
		for _, p := range procs {
			m, err := p.Scrape()
			if err != nil {
				return false, err.Error()
			}
			if cluster.Metric(m, prefix+"leader") == 1 {
				leaders = append(leaders, p)
			}
			state = append(state, fmt.Sprintf("%s leader=%v ready=%v", p.Name, cluster.Metric(m, prefix+"leader"), cluster.Metric(m, prefix+"ready")))
		}
		if len(leaders) > 1 {
			t.Fatalf("two leaders: %v", state)
		}
		if len(leaders) == 1 {
			leader = leaders[0]
			for _, p := range procs {
				if p != leader {
					standby = p
				}
			}
		}
		return len(leaders) == 1, strings.Join(state, "; ")
	})
	if err := standby.WaitReady(5 * time.Second); err != nil {
		t.Fatalf("standby not ready: %v", err)
	}

	d := holder(t, kube, ns, "web")
	var owned []*appsv1.ReplicaSet
	for i := 1; i <= 3; i++ {
		cm, sec := fmt.Sprintf("cm-%d", i), fmt.Sprintf("sec-%d", i)
		createConfig(t, kube, ns, cm, sec, l)
		rs := directRS(t, kube, d, fmt.Sprintf("h%d", i), podSpec(cm, sec))
		waitOwned(t, kube, ns, rs, 5*time.Second, cluster.ConfigMapRef(cm), cluster.SecretRef(sec))
		owned = append(owned, rs)
	}
	m, err := standby.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	if n := cluster.SumMetric(m, prefix+"api_requests_total", `verb="patch"`); n != 0 {
		t.Errorf("the standby sent %v PATCH requests", n)
	}
	if n := cluster.SumMetric(m, prefix+"api_requests_total", `verb="create"`, `resource="events"`); n != 0 {
		t.Errorf("the standby created %v events", n)
	}
	if cluster.SumMetric(m, prefix+"api_requests_total", `verb="watch"`, `resource="replicasets"`) == 0 {
		t.Errorf("the standby does not watch ReplicaSets (warm caches)")
	}
	rvs := resourceVersions(t, kube, ns, 3)

	killed := time.Now()
	leader.Kill()
	// Created while nobody leads.
	createConfig(t, kube, ns, "cm-gap", "sec-gap", l)
	gap := directRS(t, kube, d, "gap", podSpec("cm-gap", "sec-gap"))
	var takeover time.Duration
	eventually(t, 3*(lease+retryP), "the standby leading", func() (bool, string) {
		m, err := standby.Scrape()
		if err != nil {
			return false, err.Error()
		}
		takeover = time.Since(killed)
		return cluster.Metric(m, prefix+"leader") == 1, ""
	})
	bound := lease + time.Duration(2.2*float64(retryP)) + 300*time.Millisecond // + scrape interval
	t.Logf("takeover %v after SIGKILL (lease %v, retry %v)", takeover.Round(time.Millisecond), lease, retryP)
	if takeover > bound {
		t.Errorf("takeover took %v, more than lease duration + retry period (%v)", takeover, bound)
	}
	waitOwned(t, kube, ns, gap, 5*time.Second, cluster.ConfigMapRef("cm-gap"), cluster.SecretRef("sec-gap"))
	time.Sleep(time.Second) // the new leader's full reconcile has run
	after := resourceVersions(t, kube, ns, 3)
	for k, v := range rvs {
		if after[k] != v {
			t.Errorf("%s rewritten across the failover: resourceVersion %s → %s", k, v, after[k])
		}
	}
	for _, rs := range owned {
		waitOwned(t, kube, ns, rs, time.Second, cluster.ConfigMapRef("cm-"+rs.Name[len(rs.Name)-1:]))
	}
	m, _ = standby.Scrape()
	if n := cluster.SumMetric(m, prefix+"api_requests_total", `verb="patch"`); n != 2 {
		t.Errorf("the new leader sent %v PATCH requests, want 2 (the gap's objects only)", n)
	}

	// A clean shutdown (SIGTERM, as on a rolling update) releases the Lease: a fresh standby
	// takes over at its next retry, not after a lease duration.
	third, err := startController(e.c.Dir, e.bin, "ha-c-"+ns, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(third.Stop)
	stopped := time.Now()
	standby.Stop()
	if code := standby.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	eventually(t, 2*lease, "the third replica leading", func() (bool, string) {
		m, err := third.Scrape()
		if err != nil {
			return false, err.Error()
		}
		takeover = time.Since(stopped)
		return cluster.Metric(m, prefix+"leader") == 1, ""
	})
	t.Logf("handover %v after SIGTERM (lease released)", takeover.Round(time.Millisecond))
	if takeover > lease {
		t.Errorf("handover after SIGTERM took %v: the lease was not released", takeover)
	}
}

func resourceVersions(t *testing.T, kube kubernetes.Interface, ns string, n int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := 1; i <= n; i++ {
		for _, r := range []struct{ kind, name string }{{"ConfigMap", fmt.Sprintf("cm-%d", i)}, {"Secret", fmt.Sprintf("sec-%d", i)}} {
			out[r.kind+"/"+r.name] = getMeta(t, kube, ns, cmOrSecret(r.kind, r.name)).ResourceVersion
		}
	}
	return out
}

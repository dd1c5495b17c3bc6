package controllermode

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// A large cluster split over two installs (docs/controller.md, "Beyond one replica"): each
// its own -namespaces, its own Lease and its own metrics. Each leads its own Lease, writes
// only its namespaces' objects (new ReplicaSets included), and a namespace in neither list is
// left alone. The installs use a selector of their own, so the shared controller (every
// namespace, the default selector) never writes these objects.
func TestSplitInstalls(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	kube := e.c.Client(t)
	const label = "cma-split/revisioned"
	nss := []string{e.namespace(t), e.namespace(t), e.namespace(t)} // a's, b's, neither's
	type ws struct {
		d  *appsv1.Deployment
		rs *appsv1.ReplicaSet
	}
	var w []ws
	for i, ns := range nss {
		cm, sec := fmt.Sprintf("cfg-%d", i), fmt.Sprintf("sec-%d", i)
		createConfig(t, kube, ns, cm, sec, map[string]string{label: "true"})
		d := holder(t, kube, ns, "web")
		w = append(w, ws{d, directRS(t, kube, d, "h1", podSpec(cm, sec))})
	}
	objs := func(i, rev int) []cluster.ConfigRef {
		if rev == 0 {
			return []cluster.ConfigRef{cluster.ConfigMapRef(fmt.Sprintf("cfg-%d", i)), cluster.SecretRef(fmt.Sprintf("sec-%d", i))}
		}
		return []cluster.ConfigRef{cluster.ConfigMapRef(fmt.Sprintf("cfg-%d-%d", i, rev)), cluster.SecretRef(fmt.Sprintf("sec-%d-%d", i, rev))}
	}
	var installs []*cluster.ControllerProcess
	for i, name := range []string{"a", "b"} {
		id := "split-" + name + "-" + nss[0]
		p, err := startController(e.c.Dir, e.bin, id, "-kubeconfig", e.kubeconfig, "-namespaces", nss[i], "-selector", label+"=true",
			"-leader-election-namespace", cluster.ControllerModeNamespace, "-leader-election-id", id,
			"-leader-election-lease-duration", "4s", "-leader-election-renew-deadline", "3s", "-leader-election-retry-period", "1s")
		if p != nil {
			t.Cleanup(p.Stop)
		}
		if err != nil {
			t.Fatal(err)
		}
		installs = append(installs, p)
	}
	// Each install leads its own Lease.
	for i, p := range installs {
		waitMetrics(t, p, fmt.Sprintf("install %d leading", i), func(m map[string]float64) bool { return m[prefix+"leader"] == 1 })
		id := "split-" + []string{"a", "b"}[i] + "-" + nss[0]
		l, err := kube.CoordinationV1().Leases(cluster.ControllerModeNamespace).Get(ctxT(t), id, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("install %d: its Lease %s: %v", i, id, err)
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			t.Errorf("install %d: Lease %s has no holder", i, id)
		}
	}
	// Each install's namespace adopted, the third namespace left alone.
	for i := range installs {
		waitOwned(t, kube, nss[i], w[i].rs, 10*time.Second, objs(i, 0)...)
	}
	// A new revision in b's namespace: b reacts, a does not write.
	createConfig(t, kube, nss[1], "cfg-1-2", "sec-1-2", map[string]string{label: "true"})
	rs2 := directRS(t, kube, w[1].d, "h2", podSpec("cfg-1-2", "sec-1-2"))
	waitOwned(t, kube, nss[1], rs2, 10*time.Second, objs(1, 2)...)
	time.Sleep(2 * time.Second) // give a wrong install time to write the third namespace
	for _, r := range objs(2, 0) {
		m := getMeta(t, kube, nss[2], r)
		if m == nil {
			t.Fatalf("%s in the namespace of no install was deleted", r)
		}
		if len(m.OwnerReferences) != 0 {
			t.Errorf("%s in the namespace of no install: owners %v", r, ownerNames(m.OwnerReferences))
		}
	}
	// Each install's own metrics count only its own patches: 2 for a, 4 for b.
	for i, want := range []float64{2, 4} {
		m, err := installs[i].Scrape()
		if err != nil {
			t.Fatal(err)
		}
		if got := cluster.SumMetric(m, prefix+"owner_references_added_total"); got != want {
			t.Errorf("install %d: %v owner references added, want %v (its namespace's only)", i, got, want)
		}
		if got := cluster.SumMetric(m, prefix+"api_requests_total", `verb="patch"`); got != want {
			t.Errorf("install %d: %v patches, want %v", i, got, want)
		}
	}
}

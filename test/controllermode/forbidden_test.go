package controllermode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A permanent failure: an identity that may not patch Secrets (the namespaced variant of the
// RBAC, minus that verb). The ConfigMap is attached, the Secret is not; a Warning Event on the
// Deployment says why, and the error is counted as forbidden.
func TestForbiddenWarningEvent(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	ns := e.namespace(t)
	kube := e.c.Client(t)
	cfg := e.c.ServiceAccountConfig(t, ns, "limited", []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		// The users' caches (every user counts), as in examples/controller-namespaced.yaml.
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets", "daemonsets"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs", "cronjobs"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"argoproj.io"}, Resources: []string{"rollouts", "experiments"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"controllerrevisions"}, Verbs: []string{"list", "watch", "get", "create", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
	}, nil)
	sel := "test/forbidden=" + ns
	p, err := startController(e.c.Dir, e.bin, "forbidden-"+ns, "-kubeconfig", e.c.WriteKubeconfig(t, cfg), "-namespaces", ns,
		"-selector", sel, "-leader-elect=false", "-workloads", "deployments")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	createConfig(t, kube, ns, "cm", "sec", map[string]string{"test/forbidden": ns})
	d := holder(t, kube, ns, "web")
	rs := directRS(t, kube, d, "h1", podSpec("cm", "sec"))
	waitOwned(t, kube, ns, rs, 5*time.Second, cluster.ConfigMapRef("cm"))
	eventually(t, 20*time.Second, "a Warning Event on the Deployment", func() (bool, string) {
		list, err := kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range list.Items {
			seen = append(seen, ev.Reason+": "+ev.Message)
			if ev.Type == "Warning" && ev.Reason == "OwnerReferenceFailed" && ev.InvolvedObject.Kind == "Deployment" && ev.InvolvedObject.Name == "web" &&
				strings.Contains(ev.Message, "cannot make ReplicaSet "+rs.Name+" an owner of Secret sec") {
				return true, ""
			}
		}
		return false, fmt.Sprint(seen)
	})
	if m := getMeta(t, kube, ns, cluster.SecretRef("sec")); len(m.OwnerReferences) != 0 {
		t.Errorf("the Secret got owners %v", ownerNames(m.OwnerReferences))
	}
	waitMetrics(t, p, "a forbidden reconcile error", func(m map[string]float64) bool {
		return cluster.Metric(m, prefix+"reconcile_errors_total", `reason="forbidden"`) >= 1
	})
}

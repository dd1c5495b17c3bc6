package core

import (
	"strings"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// 1. Attach, then delete the ReplicaSet: the ConfigMap and the Secret are collected.
func TestAttachThenDeleteReplicaSetCollects(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	rs := e.ReplicaSet(ro, "aaa111", realapi.PodSpec([]string{"web-config-1"}, []string{"web-secret-1"}))
	e.ConfigMap("web-config-1")
	e.Secret("web-secret-1")

	res := realapi.Run(t, realapi.NewStep(cfg), ro, "aaa111", map[string]any{"configMaps": []string{"web-config-1"}, "secrets": []string{"web-secret-1"}})
	realapi.MustSucceed(t, res)
	for _, k := range []string{"cm", "secret"} {
		name := map[string]string{"cm": "web-config-1", "secret": "web-secret-1"}[k]
		uids, _, err := e.OwnerUIDs(k, name)
		if err != nil || !uids[string(rs.UID)] || len(uids) != 1 {
			t.Fatalf("%s %s owners %v (%v)", k, name, uids, err)
		}
	}
	e.DeleteRS(rs)
	e.WaitGone("cm", "web-config-1")
	e.WaitGone("secret", "web-secret-1")
}

// 2. An object owned by two ReplicaSets survives the deletion of one, and is collected after
// the other.
func TestTwoOwners(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	// "shared" keeps its name across two revisions (its content did not change).
	rs1 := e.ReplicaSet(ro, "rev1", realapi.PodSpec([]string{"shared", "cfg-1"}, nil))
	rs2 := e.ReplicaSet(ro, "rev2", realapi.PodSpec([]string{"shared", "cfg-2"}, nil))
	for _, n := range []string{"shared", "cfg-1", "cfg-2"} {
		e.ConfigMap(n)
	}
	s := realapi.NewStep(cfg)
	realapi.MustSucceed(t, realapi.Run(t, s, ro, "rev1", map[string]any{"configMaps": []string{"shared", "cfg-1"}}))
	realapi.MustSucceed(t, realapi.Run(t, s, ro, "rev2", map[string]any{"configMaps": []string{"shared", "cfg-2"}}))
	uids, _, _ := e.OwnerUIDs("cm", "shared")
	if !uids[string(rs1.UID)] || !uids[string(rs2.UID)] {
		t.Fatalf("shared owners %v, want both ReplicaSets", uids)
	}
	e.DeleteRS(rs1)
	e.WaitGone("cm", "cfg-1")
	e.StillThere("cm", "shared", 2*time.Second)
	e.StillThere("cm", "cfg-2", 0)
	e.DeleteRS(rs2)
	e.WaitGone("cm", "shared")
	e.WaitGone("cm", "cfg-2")
}

// 3. An object with an owner of another kind keeps that owner, and survives the ReplicaSet.
func TestOtherOwnerKept(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	rs := e.ReplicaSet(ro, "aaa111", realapi.PodSpec([]string{"cfg"}, nil))
	keeper := e.ConfigMap("keeper")
	e.ConfigMap("cfg", metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: keeper.Name, UID: keeper.UID})
	realapi.MustSucceed(t, realapi.Run(t, realapi.NewStep(cfg), ro, "aaa111", map[string]any{"configMaps": []string{"cfg"}}))
	uids, _, _ := e.OwnerUIDs("cm", "cfg")
	if !uids[string(keeper.UID)] || !uids[string(rs.UID)] || len(uids) != 2 {
		t.Fatalf("owners %v, want the keeper and the ReplicaSet", uids)
	}
	e.DeleteRS(rs)
	e.StillThere("cm", "cfg", 3*time.Second)
	uids, _, _ = e.OwnerUIDs("cm", "cfg")
	if !uids[string(keeper.UID)] {
		t.Fatalf("the other owner was lost: %v", uids)
	}
}

// 4. With exactly the RBAC in examples/, every operation works; without patch the step fails
// with the documented message and nothing changes.
func TestExampleRBAC(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	ro := e.Rollout("web")
	e.ReplicaSet(ro, "aaa111", realapi.PodSpec([]string{"cfg"}, []string{"sec"}))
	e.ConfigMap("cfg")
	e.Secret("sec")
	config := map[string]any{"configMaps": []string{"cfg"}, "secrets": []string{"sec"}}

	// The controller's own role only: no patch.
	bare := realapi.ControllerIdentity(t, c, e.NS)
	_, rvBefore, _ := e.OwnerUIDs("cm", "cfg")
	res := realapi.Run(t, realapi.NewStep(bare), ro, "aaa111", config)
	if res.Phase != types.PhaseFailed {
		t.Fatalf("phase %s: %s", res.Phase, res.Message)
	}
	// The controller's role cannot list StatefulSets: not every user of the objects is known,
	// so nothing is written (the example grants that list and the patch).
	for _, want := range []string{"forbidden to list ", "knows every user of the object", plugin.RBACHint} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("message %q lacks %q", res.Message, want)
		}
	}
	if uids, rv, _ := e.OwnerUIDs("cm", "cfg"); len(uids) != 0 || rv != rvBefore {
		t.Errorf("a forbidden step changed the object: owners %v rv %s→%s", uids, rvBefore, rv)
	}
	// Now add examples/rbac-step-plugin.yaml.
	c.ApplyYAMLFile(t, nil, realapi.RepoFile("examples", "rbac-step-plugin.yaml"), e.NS)
	c.WaitForRBAC(t, "system:serviceaccount:"+e.NS+":argo-rollouts", e.NS, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"patch"}}})
	realapi.MustSucceed(t, realapi.Run(t, realapi.NewStep(bare), ro, "aaa111", config))
}

// 5. With OwnerReferencesPermissionEnforcement, the RBAC for such clusters works and the plain
// one fails with the documented message.
func TestOwnerReferencesPermissionEnforcement(t *testing.T) {
	c := cluster.Start(t, cluster.Options{ExtraAPIServerArgs: []string{"--enable-admission-plugins=OwnerReferencesPermissionEnforcement"}})
	if err := cluster.InstallRolloutCRD(c); err != nil {
		t.Fatal(err)
	}
	e := realapi.NewEnv(t, c)
	ro := e.Rollout("web")
	e.ReplicaSet(ro, "aaa111", realapi.PodSpec([]string{"cfg"}, nil))
	e.ConfigMap("cfg")
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	res := realapi.Run(t, realapi.NewStep(cfg), ro, "aaa111", map[string]any{"configMaps": []string{"cfg"}})
	if res.Phase != types.PhaseFailed {
		t.Fatalf("phase %s: %s", res.Phase, res.Message)
	}
	for _, want := range []string{"OwnerReferencesPermissionEnforcement", "delete on configmaps", "examples/rbac-ownerreferences-enforcement.yaml"} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("message %q lacks %q", res.Message, want)
		}
	}
	if uids, _, _ := e.OwnerUIDs("cm", "cfg"); len(uids) != 0 {
		t.Errorf("owners %v after a refused step", uids)
	}
	c.ApplyYAMLFile(t, nil, realapi.RepoFile("examples", "rbac-ownerreferences-enforcement.yaml"), e.NS)
	c.WaitForRBAC(t, "system:serviceaccount:"+e.NS+":argo-rollouts", e.NS, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"delete"}}})
	realapi.MustSucceed(t, realapi.Run(t, realapi.NewStep(cfg), ro, "aaa111", map[string]any{"configMaps": []string{"cfg"}}))
}

// 6. Request counts: a step with N listed objects makes six lists (its namespace's users:
// ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs, Pods) plus N patches, and a repeated
// step changes no resourceVersion.
func TestRequestCounts(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	var cms, secs []string
	for i := 0; i < 20; i++ {
		cms = append(cms, "cfg-"+string(rune('a'+i)))
		e.ConfigMap(cms[i])
	}
	for i := 0; i < 5; i++ {
		secs = append(secs, "sec-"+string(rune('a'+i)))
		e.Secret(secs[i])
	}
	e.ReplicaSet(ro, "old", realapi.PodSpec([]string{"cfg-a"}, nil))
	e.ReplicaSet(ro, "new", realapi.PodSpec(cms, secs))
	counter := cluster.NewCounter()
	s := realapi.NewStep(counter.Wrap(cfg))
	config := map[string]any{"configMaps": cms, "secrets": secs}
	realapi.MustSucceed(t, realapi.Run(t, s, ro, "new", config))
	// The Rollout's own (by selector), then the namespace's (users).
	if got := counter.Count("list", "replicasets"); got != 2 {
		t.Errorf("list replicasets = %d, want 2 (%s)", got, counter)
	}
	if got := counter.Count("patch", "configmaps") + counter.Count("patch", "secrets"); got != 25 {
		t.Errorf("patches = %d, want 25 (%s)", got, counter)
	}
	// + the Lease (no controller) and the ControllerRevisions.
	if got := counter.Total(); got != 34 {
		t.Errorf("total requests = %d, want 34 (%s)", got, counter)
	}
	rvs := map[string]string{}
	for _, n := range cms {
		_, rvs[n], _ = e.OwnerUIDs("cm", n)
	}
	realapi.MustSucceed(t, realapi.Run(t, s, ro, "new", config))
	for _, n := range cms {
		if _, rv, _ := e.OwnerUIDs("cm", n); rv != rvs[n] {
			t.Errorf("a repeated step changed %s: resourceVersion %s → %s", n, rvs[n], rv)
		}
	}
}

package integration

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	rolloutshash "github.com/argoproj/argo-rollouts/utils/hash"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

func RepoFile(parts ...string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(append([]string{filepath.Dir(file), "..", ".."}, parts...)...)
}

// ControllerIdentity returns a client config for a ServiceAccount "argo-rollouts" in the
// test's namespace bound to the controller's ClusterRole plus the example RBAC files given:
// exactly what the plugin process has in a real installation.
func ControllerIdentity(t *testing.T, c *cluster.Cluster, ns string, examples ...string) *rest.Config {
	t.Helper()
	cfg := c.ServiceAccountConfig(t, ns, "argo-rollouts", nil, nil)
	dir, err := cluster.RolloutsModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyYAMLFile(t, nil, filepath.Join(dir, "manifests", "role", "argo-rollouts-clusterrole.yaml"), ns)
	c.ApplyYAML(t, nil, []byte(cluster.RolloutsControllerBinding), ns)
	for _, ex := range examples {
		c.ApplyYAMLFile(t, nil, RepoFile("examples", ex), ns)
	}
	user := "system:serviceaccount:" + ns + ":argo-rollouts"
	c.WaitForRBAC(t, user, ns, []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"list"}}})
	if len(examples) > 0 {
		c.WaitForRBAC(t, user, ns, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"patch"}}})
	}
	return cfg
}

// 1. Attach, then delete the ReplicaSet: the ConfigMap and the Secret are collected.
func TestAttachThenDeleteReplicaSetCollects(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	rs := e.ReplicaSet(ro, "aaa111", PodSpec([]string{"web-config-1"}, []string{"web-secret-1"}))
	e.ConfigMap("web-config-1")
	e.Secret("web-secret-1")

	res := Run(t, NewStep(cfg), ro, "aaa111", map[string]any{"configMaps": []string{"web-config-1"}, "secrets": []string{"web-secret-1"}})
	MustSucceed(t, res)
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
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	// "shared" keeps its name across two revisions (its content did not change).
	rs1 := e.ReplicaSet(ro, "rev1", PodSpec([]string{"shared", "cfg-1"}, nil))
	rs2 := e.ReplicaSet(ro, "rev2", PodSpec([]string{"shared", "cfg-2"}, nil))
	for _, n := range []string{"shared", "cfg-1", "cfg-2"} {
		e.ConfigMap(n)
	}
	s := NewStep(cfg)
	MustSucceed(t, Run(t, s, ro, "rev1", map[string]any{"configMaps": []string{"shared", "cfg-1"}}))
	MustSucceed(t, Run(t, s, ro, "rev2", map[string]any{"configMaps": []string{"shared", "cfg-2"}}))
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
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	rs := e.ReplicaSet(ro, "aaa111", PodSpec([]string{"cfg"}, nil))
	keeper := e.ConfigMap("keeper")
	e.ConfigMap("cfg", metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: keeper.Name, UID: keeper.UID})
	MustSucceed(t, Run(t, NewStep(cfg), ro, "aaa111", map[string]any{"configMaps": []string{"cfg"}}))
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
	c := sharedCluster(t)
	e := NewEnv(t, c)
	ro := e.Rollout("web")
	e.ReplicaSet(ro, "aaa111", PodSpec([]string{"cfg"}, []string{"sec"}))
	e.ConfigMap("cfg")
	e.Secret("sec")
	config := map[string]any{"configMaps": []string{"cfg"}, "secrets": []string{"sec"}}

	// The controller's own role only: no patch.
	bare := ControllerIdentity(t, c, e.NS)
	_, rvBefore, _ := e.OwnerUIDs("cm", "cfg")
	res := Run(t, NewStep(bare), ro, "aaa111", config)
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
	c.ApplyYAMLFile(t, nil, RepoFile("examples", "rbac-step-plugin.yaml"), e.NS)
	c.WaitForRBAC(t, "system:serviceaccount:"+e.NS+":argo-rollouts", e.NS, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"patch"}}})
	MustSucceed(t, Run(t, NewStep(bare), ro, "aaa111", config))
}

// 5. With OwnerReferencesPermissionEnforcement, the RBAC for such clusters works and the plain
// one fails with the documented message.
func TestOwnerReferencesPermissionEnforcement(t *testing.T) {
	c := cluster.Start(t, cluster.Options{ExtraAPIServerArgs: []string{"--enable-admission-plugins=OwnerReferencesPermissionEnforcement"}})
	if err := cluster.InstallRolloutCRD(c); err != nil {
		t.Fatal(err)
	}
	e := NewEnv(t, c)
	ro := e.Rollout("web")
	e.ReplicaSet(ro, "aaa111", PodSpec([]string{"cfg"}, nil))
	e.ConfigMap("cfg")
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	res := Run(t, NewStep(cfg), ro, "aaa111", map[string]any{"configMaps": []string{"cfg"}})
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
	c.ApplyYAMLFile(t, nil, RepoFile("examples", "rbac-ownerreferences-enforcement.yaml"), e.NS)
	c.WaitForRBAC(t, "system:serviceaccount:"+e.NS+":argo-rollouts", e.NS, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"delete"}}})
	MustSucceed(t, Run(t, NewStep(cfg), ro, "aaa111", map[string]any{"configMaps": []string{"cfg"}}))
}

// 6. Request counts: a step with N listed objects makes six lists (its namespace's users:
// ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs, Pods) plus N patches, and a repeated
// step changes no resourceVersion.
func TestRequestCounts(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
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
	e.ReplicaSet(ro, "old", PodSpec([]string{"cfg-a"}, nil))
	e.ReplicaSet(ro, "new", PodSpec(cms, secs))
	counter := cluster.NewCounter()
	s := NewStep(counter.Wrap(cfg))
	config := map[string]any{"configMaps": cms, "secrets": secs}
	MustSucceed(t, Run(t, s, ro, "new", config))
	if got := counter.Count("list", "replicasets"); got != 1 {
		t.Errorf("list replicasets = %d, want 1 (%s)", got, counter)
	}
	if got := counter.Count("patch", "configmaps") + counter.Count("patch", "secrets"); got != 25 {
		t.Errorf("patches = %d, want 25 (%s)", got, counter)
	}
	if got := counter.Total(); got != 31 {
		t.Errorf("total requests = %d, want 31 (%s)", got, counter)
	}
	rvs := map[string]string{}
	for _, n := range cms {
		_, rvs[n], _ = e.OwnerUIDs("cm", n)
	}
	MustSucceed(t, Run(t, s, ro, "new", config))
	for _, n := range cms {
		if _, rv, _ := e.OwnerUIDs("cm", n); rv != rvs[n] {
			t.Errorf("a repeated step changed %s: resourceVersion %s → %s", n, rvs[n], rv)
		}
	}
}

// 7. The command line against the real apiserver: it waits while the status is stale or the
// new ReplicaSet is missing, then attaches to the new ReplicaSet only.
func TestCommandLineWaitsForNewReplicaSet(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	ro := e.Rollout("web")
	old := e.ReplicaSet(ro, "old111", PodSpec([]string{"cfg-old"}, nil))
	e.ConfigMap("cfg-old")
	e.ConfigMap("cfg-new")
	e.Secret("sec-new")
	// The controller has seen generation 1 with the old ReplicaSet.
	ro.Status.ObservedGeneration = "1"
	ro.Status.CurrentPodHash = "old111"
	ro, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(Ctx(t), ro, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A new spec is applied (generation 2); the controller has not caught up yet.
	ro.Spec.Template.Annotations = map[string]string{"rev": "2"}
	ro.Spec.Template.Spec = PodSpec([]string{"cfg-new"}, []string{"sec-new"})
	if ro, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Update(Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ro.Generation != 2 {
		t.Fatalf("generation %d", ro.Generation)
	}

	// The Job's identity with exactly examples/job.yaml's RBAC.
	jobCfg := c.ServiceAccountConfig(t, e.NS, "configmap-attacher-job", nil, nil)
	c.ApplyYAMLFile(t, nil, RepoFile("examples", "job.yaml"), e.NS)
	user := "system:serviceaccount:" + e.NS + ":configmap-attacher-job"
	c.WaitForRBAC(t, user, e.NS, []rbacv1.PolicyRule{{APIGroups: []string{"argoproj.io"}, Resources: []string{"rollouts"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"patch"}}})
	kubeconfig := c.WriteKubeconfig(t, jobCfg)

	done := make(chan struct{})
	var code int
	var stdout, stderr strings.Builder
	go func() {
		defer close(done)
		cli := &cmd.Job{Stdout: &stdout, Stderr: &stderr, PollInterval: 200 * time.Millisecond}
		code = cli.Main([]string{"-rollout", "web", "-namespace", e.NS, "-configmaps", "cfg-new", "-secrets", "sec-new", "-kubeconfig", kubeconfig, "-timeout", "60s"})
	}()
	// Let it see the stale status for a while.
	time.Sleep(1500 * time.Millisecond)
	select {
	case <-done:
		t.Fatalf("the command line finished before the controller caught up: exit %d, %s %s", code, stdout.String(), stderr.String())
	default:
	}
	if uids, _, _ := e.OwnerUIDs("cm", "cfg-new"); len(uids) != 0 {
		t.Fatalf("attached before the new ReplicaSet existed: %v", uids)
	}
	// The controller catches up: status first (with the computed hash), then the ReplicaSet.
	ro.Status.ObservedGeneration = "2"
	ro.Status.CurrentPodHash = rolloutshash.ComputePodTemplateHash(&ro.Spec.Template, nil)
	if _, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	newRS := e.ReplicaSetOf(ro)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the command line did not finish")
	}
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "attached 1 ConfigMap and 1 Secret to ReplicaSet "+newRS.Name) {
		t.Errorf("stdout %q", stdout.String())
	}
	for _, k := range []string{"cm", "secret"} {
		name := map[string]string{"cm": "cfg-new", "secret": "sec-new"}[k]
		uids, _, _ := e.OwnerUIDs(k, name)
		if !uids[string(newRS.UID)] || uids[string(old.UID)] || len(uids) != 1 {
			t.Errorf("%s owners %v, want only the new ReplicaSet", name, uids)
		}
	}
	if !strings.Contains(stderr.String(), "waiting for the Rollouts controller to observe generation 2") {
		t.Errorf("stderr does not show the wait: %s", stderr.String())
	}
	_ = errors.New
	_ = context.Background
}

package cli

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	rolloutshash "github.com/argoproj/argo-rollouts/utils/hash"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCommandLineStaleStatusImageOnly: the controller recorded observedGeneration for a new
// spec but could not create its ReplicaSet (status.currentPodHash still names the previous
// one, as after FailedRSCreate); the change is image-only, so the previous ReplicaSet uses the
// same config. The command line must wait for the new ReplicaSet, not attach to the old one.
func TestCommandLineStaleStatusImageOnly(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	ro := e.Rollout("web")
	ro.Spec.Template.Spec = realapi.PodSpec([]string{"cfg"}, nil)
	ro, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Update(realapi.Ctx(t), ro, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := e.ReplicaSetOf(ro)
	e.ConfigMap("cfg")
	// Image-only change; the controller observes it but its ReplicaSet create is denied.
	ro.Spec.Template.Spec.Containers[0].Image = "nginx:2"
	if ro, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Update(realapi.Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ro.Status.ObservedGeneration = strconv.FormatInt(ro.Generation, 10)
	ro.Status.CurrentPodHash = old.Labels[plugin.PodTemplateHashLabel]
	if ro, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(realapi.Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	run := realapi.StartCLI("-rollout", "web", "-namespace", e.NS, "-configmaps", "cfg", "-kubeconfig", realapi.JobKubeconfig(t, c, e.NS), "-timeout", "60s")
	time.Sleep(2 * time.Second)
	run.Running(t, "the status is stale")
	if uids, _, _ := e.OwnerUIDs("cm", "cfg"); len(uids) != 0 {
		t.Fatalf("attached to the previous ReplicaSet: %v", uids)
	}
	if !strings.Contains(run.Stderr.String(), "to create the ReplicaSet of the current pod template") {
		t.Errorf("the wait is not explained: %s", run.Stderr.String())
	}
	// The quota is lifted: the controller creates the new ReplicaSet.
	ro.Status.CurrentPodHash = rolloutshash.ComputePodTemplateHash(&ro.Spec.Template, nil)
	newRS := e.ReplicaSetOf(ro)
	if code := run.ExitCode(t); code != 0 {
		t.Fatalf("exit %d: %s", code, run.Stderr.String())
	}
	uids, _, _ := e.OwnerUIDs("cm", "cfg")
	if !uids[string(newRS.UID)] {
		t.Errorf("owners %v lack the new ReplicaSet %s", uids, newRS.UID)
	}
	if !strings.Contains(run.Stdout.String(), "to ReplicaSet "+newRS.Name) {
		t.Errorf("stdout %q", run.Stdout.String())
	}
}

// TestCommandLineDecidesAtOnce: once the ReplicaSet of the current spec exists, an
// unreferenced name fails at once (not after -timeout), and so does InvalidSpec=True.
func TestCommandLineDecidesAtOnce(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	ro, _ := e.SettledRollout(corev1.PodTemplateSpec{Spec: realapi.PodSpec([]string{"cfg"}, nil)})
	e.ConfigMap("cfg")
	e.ConfigMap("typo")
	kubeconfig := realapi.JobKubeconfig(t, c, e.NS)
	cli := func(names string) (int, string, time.Duration) {
		var stdout, stderr cluster.SyncBuffer
		start := time.Now()
		code := (&cmd.Job{Stdout: &stdout, Stderr: &stderr, PollInterval: 200 * time.Millisecond}).Main(
			[]string{"-rollout", "web", "-namespace", e.NS, "-configmaps", names, "-kubeconfig", kubeconfig, "-timeout", "5m"})
		return code, stderr.String(), time.Since(start)
	}
	code, stderr, took := cli("cfg,typo")
	if code != cmd.ExitFail || !strings.Contains(stderr, "refusing to attach ConfigMap typo") || took > 10*time.Second {
		t.Errorf("unreferenced: exit %d after %s: %s", code, took, stderr)
	}
	if uids, _, _ := e.OwnerUIDs("cm", "cfg"); len(uids) != 0 {
		t.Errorf("a refused run wrote cfg: %v", uids)
	}
	t.Logf("unreferenced name refused in %s", took.Round(time.Millisecond))
	ro.Status.Conditions = []v1alpha1.RolloutCondition{{Type: v1alpha1.InvalidSpec, Status: corev1.ConditionTrue, Reason: "InvalidSpec",
		Message: "The Rollout \"web\" is invalid: spec.strategy.canary.steps[0]: bad", LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(realapi.Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, stderr, took = cli("cfg")
	if code != cmd.ExitFail || !strings.Contains(stderr, "InvalidSpec=True") || !strings.Contains(stderr, "steps[0]: bad") || took > 10*time.Second {
		t.Errorf("InvalidSpec: exit %d after %s: %s", code, took, stderr)
	}
}

// TestCommandLineExpectTemplateAnnotation: with -expect-template-annotation the command line
// waits until the applied template carries the release's value (a Sync hook that started
// before the apply), then attaches.
func TestCommandLineExpectTemplateAnnotation(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	ro, _ := e.SettledRollout(corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"example.com/release": "41"}},
		Spec: realapi.PodSpec([]string{"cfg-41"}, nil)})
	e.ConfigMap("cfg-41")
	e.ConfigMap("cfg-42")
	run := realapi.StartCLI("-rollout", "web", "-namespace", e.NS, "-configmaps", "cfg-42", "-expect-template-annotation", "example.com/release=42",
		"-kubeconfig", realapi.JobKubeconfig(t, c, e.NS), "-timeout", "60s")
	time.Sleep(1500 * time.Millisecond)
	run.Running(t, "release 42 is not applied yet")
	var err error
	// The sync applies release 42; the controller observes it and creates its ReplicaSet.
	ro.Spec.Template.Annotations["example.com/release"] = "42"
	ro.Spec.Template.Spec = realapi.PodSpec([]string{"cfg-42"}, nil)
	if ro, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Update(realapi.Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rs := e.ReplicaSetOf(ro)
	ro.Status.ObservedGeneration = strconv.FormatInt(ro.Generation, 10)
	if _, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(realapi.Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code := run.ExitCode(t); code != 0 {
		t.Fatalf("exit %d: %s", code, run.Stderr.String())
	}
	if uids, _, _ := e.OwnerUIDs("cm", "cfg-42"); !uids[string(rs.UID)] {
		t.Errorf("cfg-42 owners %v", uids)
	}
	if !strings.Contains(run.Stderr.String(), "to carry annotation example.com/release=42") {
		t.Errorf("the wait is not logged: %s", run.Stderr.String())
	}
}

// 7. The command line against the real apiserver: it waits while the status is stale or the
// new ReplicaSet is missing, then attaches to the new ReplicaSet only.
func TestCommandLineWaitsForNewReplicaSet(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	ro := e.Rollout("web")
	old := e.ReplicaSet(ro, "old111", realapi.PodSpec([]string{"cfg-old"}, nil))
	e.ConfigMap("cfg-old")
	e.ConfigMap("cfg-new")
	e.Secret("sec-new")
	// The controller has seen generation 1 with the old ReplicaSet.
	ro.Status.ObservedGeneration = "1"
	ro.Status.CurrentPodHash = "old111"
	ro, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(realapi.Ctx(t), ro, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A new spec is applied (generation 2); the controller has not caught up yet.
	ro.Spec.Template.Annotations = map[string]string{"rev": "2"}
	ro.Spec.Template.Spec = realapi.PodSpec([]string{"cfg-new"}, []string{"sec-new"})
	if ro, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Update(realapi.Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ro.Generation != 2 {
		t.Fatalf("generation %d", ro.Generation)
	}

	// The Job's identity with exactly examples/job.yaml's RBAC.
	jobCfg := c.ServiceAccountConfig(t, e.NS, "configmap-attacher-job", nil, nil)
	c.ApplyYAMLFile(t, nil, realapi.RepoFile("examples", "job.yaml"), e.NS)
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
	if _, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(realapi.Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
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

// TestWorkloadRefCommandLine: a Rollout that takes its pod template from a Deployment
// (spec.workloadRef, no selector of its own). The command line reads the selector from the
// Deployment, waits until the controller has observed the Deployment's generation, then
// attaches; the step, given the Rollout with the selector the controller resolved, attaches too.
func TestWorkloadRefCommandLine(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	zero := int32(0)
	labels := map[string]string{"app": "web"}
	d, err := e.Admin.AppsV1().Deployments(e.NS).Create(realapi.Ctx(t), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: realapi.PodSpec([]string{"cfg"}, []string{"sec"})}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Raw JSON: the typed client would send an empty spec.template, which the CRD rejects;
	// workloadRef Rollouts have none.
	ro := &v1alpha1.Rollout{}
	body := `{"apiVersion":"argoproj.io/v1alpha1","kind":"Rollout","metadata":{"name":"web"},
		"spec":{"workloadRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"strategy":{"canary":{}}}}`
	if err := e.Rollouts.ArgoprojV1alpha1().RESTClient().Post().Namespace(e.NS).Resource("rollouts").
		Body([]byte(body)).Do(realapi.Ctx(t)).Into(ro); err != nil {
		t.Fatal(err)
	}
	rs := e.ReplicaSet(ro, "wr1111", realapi.PodSpec([]string{"cfg"}, []string{"sec"}))
	e.ConfigMap("cfg")
	e.Secret("sec")
	// The controller has seen the Rollout but not yet the Deployment's generation.
	ro.Status.ObservedGeneration = "1"
	ro.Status.CurrentPodHash = "wr1111"
	ro.Status.WorkloadObservedGeneration = "0"
	if ro, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(realapi.Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	jobCfg := c.ServiceAccountConfig(t, e.NS, "configmap-attacher-job", nil, nil)
	c.ApplyYAMLFile(t, nil, realapi.RepoFile("examples", "job.yaml"), e.NS)
	c.WaitForRBAC(t, "system:serviceaccount:"+e.NS+":configmap-attacher-job", e.NS, []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get"}}})
	kubeconfig := c.WriteKubeconfig(t, jobCfg)

	done := make(chan int)
	var stdout, stderr strings.Builder
	go func() {
		done <- (&cmd.Job{Stdout: &stdout, Stderr: &stderr, PollInterval: 100 * time.Millisecond}).Main(
			[]string{"-rollout", "web", "-namespace", e.NS, "-configmaps", "cfg", "-secrets", "sec", "-kubeconfig", kubeconfig, "-timeout", "30s"})
	}()
	time.Sleep(800 * time.Millisecond)
	if uids, _, _ := e.OwnerUIDs("cm", "cfg"); len(uids) != 0 {
		t.Fatalf("attached before the controller observed the Deployment: %v", uids)
	}
	ro.Status.WorkloadObservedGeneration = "1"
	if d.Generation != 1 {
		t.Fatalf("deployment generation %d", d.Generation)
	}
	if _, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(realapi.Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "observe generation 1 of Deployment") {
		t.Errorf("the wait for the Deployment's generation is not logged: %s", stderr.String())
	}
	for _, k := range []string{"cm", "secret"} {
		name := map[string]string{"cm": "cfg", "secret": "sec"}[k]
		// The Rollout's ReplicaSet, and (every user counts) the Deployment's own ReplicaSet,
		// which the deployment controller made from the same template, scaled to zero.
		if uids, _, _ := e.OwnerUIDs(k, name); !uids[string(rs.UID)] || len(uids) != 1+len(realapi.DeploymentReplicaSets(t, e, d)) {
			t.Errorf("%s owners %v, want %s and the Deployment's ReplicaSets", name, uids, rs.Name)
		}
	}

	// Step mode: the controller resolves the template and selector from the Deployment into
	// the Rollout it passes to the plugin.
	e.ConfigMap("cfg-2")
	rs2 := e.ReplicaSet(ro, "wr2222", realapi.PodSpec([]string{"cfg-2"}, nil))
	resolved := ro.DeepCopy()
	resolved.Spec.Selector = d.Spec.Selector
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	realapi.MustSucceed(t, realapi.Run(t, realapi.NewStep(cfg), resolved, "wr2222", map[string]any{"configMaps": []string{"cfg-2"}}))
	if uids, _, _ := e.OwnerUIDs("cm", "cfg-2"); !uids[string(rs2.UID)] {
		t.Errorf("cfg-2 owners %v", uids)
	}
}

package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
)

// TestWorkloadRefCommandLine: a Rollout that takes its pod template from a Deployment
// (spec.workloadRef, no selector of its own). The command line reads the selector from the
// Deployment, waits until the controller has observed the Deployment's generation, then
// attaches; the step, given the Rollout with the selector the controller resolved, attaches too.
func TestWorkloadRefCommandLine(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	zero := int32(0)
	labels := map[string]string{"app": "web"}
	d, err := e.Admin.AppsV1().Deployments(e.NS).Create(Ctx(t), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: PodSpec([]string{"cfg"}, []string{"sec"})}},
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
		Body([]byte(body)).Do(Ctx(t)).Into(ro); err != nil {
		t.Fatal(err)
	}
	rs := e.ReplicaSet(ro, "wr1111", PodSpec([]string{"cfg"}, []string{"sec"}))
	e.ConfigMap("cfg")
	e.Secret("sec")
	// The controller has seen the Rollout but not yet the Deployment's generation.
	ro.Status.ObservedGeneration = "1"
	ro.Status.CurrentPodHash = "wr1111"
	ro.Status.WorkloadObservedGeneration = "0"
	if ro, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	jobCfg := c.ServiceAccountConfig(t, e.NS, "configmap-attacher-job", nil, nil)
	c.ApplyYAMLFile(t, nil, RepoFile("examples", "job.yaml"), e.NS)
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
	if _, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
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
		if uids, _, _ := e.OwnerUIDs(k, name); !uids[string(rs.UID)] || len(uids) != 1+len(DeploymentReplicaSets(t, e, d)) {
			t.Errorf("%s owners %v, want %s and the Deployment's ReplicaSets", name, uids, rs.Name)
		}
	}

	// Step mode: the controller resolves the template and selector from the Deployment into
	// the Rollout it passes to the plugin.
	e.ConfigMap("cfg-2")
	rs2 := e.ReplicaSet(ro, "wr2222", PodSpec([]string{"cfg-2"}, nil))
	resolved := ro.DeepCopy()
	resolved.Spec.Selector = d.Spec.Selector
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	MustSucceed(t, Run(t, NewStep(cfg), resolved, "wr2222", map[string]any{"configMaps": []string{"cfg-2"}}))
	if uids, _, _ := e.OwnerUIDs("cm", "cfg-2"); !uids[string(rs2.UID)] {
		t.Errorf("cfg-2 owners %v", uids)
	}
}

// DeploymentReplicaSets are the ReplicaSets the deployment controller made for d.
func DeploymentReplicaSets(t *testing.T, e *Env, d *appsv1.Deployment) []string {
	t.Helper()
	l, err := e.Admin.AppsV1().ReplicaSets(e.NS).List(Ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rs := range l.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.UID == d.UID {
			out = append(out, rs.Name)
		}
	}
	return out
}

package rollouts

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// The kubectl-argo-rollouts commands, as the argo-rollouts module implements them in
// pkg/kubectl-argo-rollouts/cmd/{promote,abort,retry,undo} (v1.10.2): merge patches on the
// status subresource (and spec.paused on the spec), and for undo a JSON patch that replaces
// spec.template with an older ReplicaSet's template. ReplicaSets are never edited.

func (a *app) patchStatus(patch string) {
	a.t.Helper()
	if _, err := a.ro.ArgoprojV1alpha1().Rollouts(a.ns).Patch(context.Background(), a.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		a.t.Fatalf("patch status %s: %v", patch, err)
	}
}

func (a *app) patchSpec(pt types.PatchType, patch []byte) {
	a.t.Helper()
	if _, err := a.ro.ArgoprojV1alpha1().Rollouts(a.ns).Patch(context.Background(), a.name, pt, patch, metav1.PatchOptions{}); err != nil {
		a.t.Fatalf("patch spec %s: %v", patch, err)
	}
}

// promote is `kubectl argo rollouts promote` (no flags): clear the pause conditions, or, when
// there are none, move to the next step; unpause spec.paused.
func (a *app) promote() {
	a.t.Helper()
	ro := a.get()
	if patch := cluster.PromotePatch(ro); patch != "" {
		a.patchStatus(patch)
	}
	if ro.Spec.Paused {
		a.patchSpec(types.MergePatchType, []byte(`{"spec":{"paused":false}}`))
	}
}

// promoteFull is `kubectl argo rollouts promote --full`.
func (a *app) promoteFull() {
	a.t.Helper()
	ro := a.get()
	if ro.Status.CurrentPodHash != ro.Status.StableRS {
		a.patchStatus(`{"status":{"promoteFull":true}}`)
	}
	if ro.Spec.Paused {
		a.patchSpec(types.MergePatchType, []byte(`{"spec":{"paused":false}}`))
	}
}

// abort is `kubectl argo rollouts abort`.
func (a *app) abort() { a.t.Helper(); a.patchStatus(`{"status":{"abort":true}}`) }

// retry is `kubectl argo rollouts retry rollout`.
func (a *app) retry() { a.t.Helper(); a.patchStatus(`{"status":{"abort":false}}`) }

// undo is `kubectl argo rollouts undo --to-revision=N`: the pod template of the ReplicaSet
// with annotation rollout.argoproj.io/revision=N, without its hash label, replaces
// spec.template. Nothing else changes (the steps stay the newer revision's).
func (a *app) undo(toRevision int) {
	a.t.Helper()
	for _, rs := range a.replicaSets() {
		if rs.Annotations["rollout.argoproj.io/revision"] != strconv.Itoa(toRevision) {
			continue
		}
		tpl := rs.Spec.Template.DeepCopy()
		delete(tpl.Labels, cluster.RolloutsHashLabel)
		patch, err := json.Marshal([]any{map[string]any{"op": "replace", "path": "/spec/template", "value": tpl}})
		if err != nil {
			a.t.Fatal(err)
		}
		a.patchSpec(types.JSONPatchType, patch)
		return
	}
	a.t.Fatalf("undo: no ReplicaSet of %s with revision %d", a.name, toRevision)
}

// jobRBAC is examples/job.yaml without the Job: the ServiceAccount, Role and RoleBinding.
func jobRBAC(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "examples", "job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, doc := range strings.Split(string(b), "\n---") {
		var m struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("examples/job.yaml: %v", err)
		}
		if m.Kind != "" && m.Kind != "Job" {
			keep = append(keep, doc)
		}
	}
	if len(keep) != 3 {
		t.Fatalf("examples/job.yaml: want ServiceAccount, Role and RoleBinding besides the Job, got %d documents", len(keep))
	}
	return []byte(strings.Join(keep, "\n---\n"))
}

// jobKubeconfigFor returns a kubeconfig for ServiceAccount configmap-attacher-job in the app's
// namespace with exactly the RBAC of examples/job.yaml (created once per app).
func (a *app) jobKubeconfigFor() string {
	a.t.Helper()
	if a.jobKubeconfig != "" {
		return a.jobKubeconfig
	}
	c := a.e.c
	c.ApplyYAML(a.t, nil, jobRBAC(a.t), a.ns)
	user := "system:serviceaccount:" + a.ns + ":configmap-attacher-job"
	c.WaitForRBAC(a.t, user, a.ns, []rbacv1.PolicyRule{
		{APIGroups: []string{"argoproj.io"}, Resources: []string{"rollouts"}, Verbs: []string{"get"}},
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"patch"}},
	})
	path, err := cluster.ServiceAccountKubeconfig(testCtx(a.t), c, a.kube, a.ns, "configmap-attacher-job", a.t.TempDir())
	if err != nil {
		a.t.Fatal(err)
	}
	a.jobKubeconfig = path
	return path
}

// jobRun is a started command-line run.
type jobRun struct {
	cmd            *exec.Cmd
	stdout, stderr cluster.SyncBuffer
	done           chan error
}

// startJob starts the plugin binary in command-line mode, as examples/job.yaml runs it, to
// attach revision rev's objects, with the Job's ServiceAccount.
func (a *app) startJob(rev int) *jobRun {
	a.t.Helper()
	kc := a.jobKubeconfigFor()
	j := &jobRun{done: make(chan error, 1)}
	j.cmd = exec.Command(a.e.plugin, "-rollout", a.name, "-namespace", a.ns, "-configmaps", a.cm(rev),
		"-secrets", a.secret(rev), "-timeout", "90s", "-kubeconfig", kc)
	j.cmd.Env = append(os.Environ(), "JOB_NAME=configmap-attacher-"+a.name, "VERSION="+strconv.Itoa(rev), "KUBECONFIG=/nonexistent")
	j.cmd.Stdout, j.cmd.Stderr = &j.stdout, &j.stderr
	if err := j.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	go func() { j.done <- j.cmd.Wait() }()
	a.t.Cleanup(func() {
		// The Job's exit status is the test's to read (wait); here it only must not outlive it.
		select {
		case err := <-j.done:
			j.done <- err // keep it for a later wait
		default:
			_ = j.cmd.Process.Kill()
			a.t.Logf("command line still running at cleanup, killed: %v", <-j.done)
		}
	})
	return j
}

// wait waits for the run to succeed and returns its stdout.
func (j *jobRun) wait(t *testing.T) string {
	t.Helper()
	select {
	case err := <-j.done:
		j.done <- err
		if err != nil {
			t.Fatalf("command line failed: %v\nstdout: %s\nstderr: %s", err, j.stdout.String(), j.stderr.String())
		}
	case <-time.After(100 * time.Second):
		t.Fatalf("command line still running after 100s\nstderr: %s", j.stderr.String())
	}
	return strings.TrimSpace(j.stdout.String())
}

// attachWithJob runs the command line for revision rev (the revision must be current) and
// checks the objects are owned by its ReplicaSet.
func (a *app) attachWithJob(rev int) string {
	a.t.Helper()
	out := a.startJob(rev).wait(a.t)
	rs := a.rsFor(rev)
	if rs == nil {
		a.t.Fatalf("no ReplicaSet for revision %d", rev)
	}
	a.waitOwned(rev, rs)
	return out
}

// stepRun finds the plugin's Run status at index in the Rollout's status.
func stepRun(ro *v1alpha1.Rollout, index int32) *v1alpha1.StepPluginStatus {
	for i, s := range ro.Status.Canary.StepPluginStatuses {
		if s.Index == index && s.Operation == v1alpha1.StepPluginOperationRun {
			return &ro.Status.Canary.StepPluginStatuses[i]
		}
	}
	return nil
}

// jobRBACGrants reports whether the Role in examples/job.yaml allows verb on group/resource.
func jobRBACGrants(t *testing.T, group, resource, verb string) bool {
	t.Helper()
	for _, doc := range strings.Split(string(jobRBAC(t)), "\n---") {
		var role rbacv1.Role
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		if role.Kind != "Role" {
			continue
		}
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && (slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) {
				return true
			}
		}
	}
	return false
}

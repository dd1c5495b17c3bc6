package rollouts

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// 7. The command-line mode as a process (the built binary), with a kubeconfig for a
// ServiceAccount bound to exactly the Job RBAC of examples/job.yaml, attaches the objects of a
// Rollout's first revision (where no step runs). Started before the Rollout exists, as an
// Argo CD Sync hook may be, it waits for the Rollout and its ReplicaSet.
func TestCommandLineJobFirstRevision(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "web", stepsPluginFirst)
	a.createConfig(1)
	a.jobKubeconfigFor()
	job := a.startJob(1)
	waiting := "waiting for Rollout " + a.ns + "/web to exist"
	eventually(t, 30*time.Second, "the command line waiting for the Rollout", func() (bool, string) {
		return strings.Contains(job.stderr.String(), waiting), job.stderr.String()
	})
	a.deploy(1)
	out := job.wait(t)
	rs := a.waitHealthy(1)
	a.waitOwned(1, rs)
	want := fmt.Sprintf("attached 1 ConfigMap and 1 Secret to ReplicaSet %s of Rollout %s/web", rs.Name, a.ns)
	if out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	stderr := job.stderr.String()
	if s := a.get().Status.Canary.StepPluginStatuses; len(s) != 0 {
		t.Errorf("steps ran on the initial deploy: %+v", s)
	}
	// The command line records an Event on the Rollout; examples/job.yaml must grant it.
	if jobRBACGrants(t, "", "events", "create") {
		a.waitEvent("ConfigAttached", out)
	} else if !strings.Contains(stderr, "could not record an event on the Rollout") {
		t.Errorf("examples/job.yaml grants no create on events, yet no warning about the event:\n%s", stderr)
	} else {
		t.Logf("FINDING: examples/job.yaml grants no create on events, so every run logs a 403 warning and records no Event")
	}
	t.Logf("command line: %s\nstderr:\n%s", out, stderr)
}

func containsLine(log, sub string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

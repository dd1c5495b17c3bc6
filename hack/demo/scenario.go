package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// The demo's story, stage by stage: revision 1 attached by the controller mode, canary
// revisions attached by the plugin step, a stable pod replaced mid-canary after an Argo CD
// prune, and the last promotion with the garbage collector removing the oldest revision's
// objects. The helpers it calls live in objects.go (what it creates), kube.go (API calls),
// wait.go (waiting for the controllers) and print.go (narration and the tree).

const (
	namespace    = "default"
	appName      = "web"
	replicas     = int32(2)
	historyLimit = int32(2)
	revisions    = 4
	// spotRevision is the revision during whose canary a stable pod is replaced.
	spotRevision = 3

	labelRevision = "demo/revision"
	revisionAnnot = "rollout.argoproj.io/revision"

	stepTimeout = 60 * time.Second
	waitTimeout = 60 * time.Second
)

// scenario is the demo proper, stage by stage.
func (d *demo) scenario() error {
	if err := d.revision1(); err != nil {
		return err
	}
	for n := 2; n <= revisions; n++ {
		if err := d.canaryRevision(n); err != nil {
			return err
		}
		if err := d.finishRevision(n); err != nil {
			return err
		}
	}
	return nil
}

// revision1 creates the Rollout; the controller mode attaches revision 1 (steps do not run on
// a first deploy, and no Job is needed).
func (d *demo) revision1() error {
	r := newRevision(1)
	stage("revision 1: ConfigMap %s, Secret %s and Rollout %s/%s (canary, %d replicas, revisionHistoryLimit %d)",
		r.cm, r.secret, namespace, appName, replicas, historyLimit)
	if err := d.createConfig(r); err != nil {
		return err
	}
	t0 := time.Now()
	if err := d.createRollout(r); err != nil {
		return err
	}
	say("steps do not run on a first deploy: the controller mode (configmap-attacher controller) attaches revision 1 — no Job, no step")
	if err := d.waitHealthy(r); err != nil {
		return err
	}
	say("Rollout Healthy at revision 1 in %v", since(t0))
	if err := d.checkOwned(r); err != nil {
		return err
	}
	say("revision 1's ConfigMap and Secret owned by ReplicaSet %s %v after the Rollout was created", r.rs.Name, since(t0))
	return d.printTree("after revision 1 (controller mode)")
}

// canaryRevision applies revision n (new objects, then pod template and step config in one
// update, as a GitOps sync does) and waits for the step and the pause after setWeight 50.
func (d *demo) canaryRevision(n int) error {
	r := newRevision(n)
	stage("revision %d: new ConfigMap %s and Secret %s; Rollout updated (pod template + step config in one apply)", n, r.cm, r.secret)
	if err := d.createConfig(r); err != nil {
		return err
	}
	// The controller prunes history by ReplicaSet creationTimestamp (whole seconds), ties broken
	// by name, not by revision: two ReplicaSets created within one second may be pruned
	// newer-first. Real revisions are minutes apart; here, start the next one in a new second so
	// that revisionHistoryLimit removes the oldest.
	if prev := d.revs[n-1]; prev != nil && prev.rs != nil {
		if wait := time.Until(prev.rs.CreationTimestamp.Add(time.Second + 50*time.Millisecond)); wait > 0 {
			select {
			case <-d.ctx.Done():
				return d.ctx.Err()
			case <-time.After(wait):
			}
		}
	}
	t0 := time.Now()
	if err := d.updateRollout(func(ro *v1alpha1.Rollout) {
		ro.Spec.Template = r.template()
		ro.Spec.Strategy.Canary.Steps = r.steps()
	}); err != nil {
		return err
	}
	msg, err := d.waitStep(r)
	if err != nil {
		return err
	}
	say("step 0 (plugin %s): Successful %v after the update: %s", cluster.PluginName, since(t0), msg)
	if err := d.checkOwned(r); err != nil {
		return err
	}
	if err := d.waitPaused(r, 2); err != nil {
		return err
	}
	say("step 1 setWeight 50, step 2 pause {}: paused with 1 canary and 1 stable pod")
	return d.printTree(fmt.Sprintf("after revision %d (step: %s)", n, msg))
}

// promote is `kubectl argo rollouts promote`: clear the pause; wait until Healthy.
func (d *demo) promote(n int) error {
	r := d.revs[n]
	t0 := time.Now()
	if err := d.patchStatus(`{"status":{"pauseConditions":null}}`); err != nil {
		return err
	}
	if err := d.waitHealthy(r); err != nil {
		return err
	}
	say("promoted: Healthy at revision %d in %v (stable %s)", n, since(t0), r.rs.Name)
	return nil
}

// spotReplacement shows a stable pod replaced mid-canary finding its (old) config, after an
// Argo CD-style prune of the objects no longer in Git.
func (d *demo) spotReplacement(n int) error {
	stable := d.revs[n-1]
	stage("spot replacement mid-canary: a pod of the stable ReplicaSet %s (revision %d) goes away", stable.rs.Name, n-1)
	if d.argo == nil {
		// Without -argocd the prune is simulated; with it, Argo CD's sync of revision n pruned.
		kept, deleted, err := cluster.PruneUnowned(d.ctx, d.kube, namespace, appName, labelRevision, n)
		if err != nil {
			return err
		}
		say("Argo CD sync of revision %d prunes objects of revisions 1-%d (no longer in Git) unless they have an owner reference:", n, n-1)
		say("  kept (owned by a ReplicaSet): %s", listOrNone(kept))
		say("  deleted: %s", listOrNone(deleted))
		for _, o := range stable.objects() {
			if slices.Contains(deleted, o.String()) {
				return fmt.Errorf("the prune deleted %s, which the stable ReplicaSet %s uses: it should have been owned", o, stable.rs.Name)
			}
		}
	}
	sel := labels.SelectorFromSet(map[string]string{cluster.RolloutsHashLabel: stable.rs.Labels[cluster.RolloutsHashLabel]}).String()
	var old corev1.Pod
	if err := d.waitFor(waitTimeout, "one running pod of the stable ReplicaSet", func() (bool, string, error) {
		pods, err := d.livePods(sel)
		if err != nil || len(pods) != 1 {
			return false, fmt.Sprintf("%d pods (%v)", len(pods), err), nil
		}
		old = pods[0]
		return true, "", nil
	}); err != nil {
		return err
	}
	t0 := time.Now()
	if err := d.kube.CoreV1().Pods(namespace).Delete(d.ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete pod %s: %w", old.Name, err)
	}
	say("deleted stable pod %s; the replicaset controller creates a replacement", old.Name)
	var repl *corev1.Pod
	if err := d.waitFor(waitTimeout, "the replacement pod of the stable ReplicaSet Ready", func() (bool, string, error) {
		pods, err := d.livePods(sel)
		if err != nil {
			return false, err.Error(), nil
		}
		for i := range pods {
			if p := &pods[i]; p.UID != old.UID {
				repl = p
				if cluster.PodReady(p) {
					return true, "", nil
				}
				return false, fmt.Sprintf("pod %s phase %s, not Ready %s", p.Name, p.Status.Phase, d.kubelet.ConfigError(namespace, p.Name)), nil
			}
		}
		return false, "no replacement pod yet", nil
	}); err != nil {
		return err
	}
	say("replacement pod %s Ready in %v: it mounts ConfigMap %s and reads Secret %s,", repl.Name, since(t0), stable.cm, stable.secret)
	say("  still there because ReplicaSet %s owns them", stable.rs.Name)
	if err := d.checkOwned(stable); err != nil {
		return err
	}
	say("(without the owner references the prune deletes them and the pod stays in CreateContainerConfigError:")
	if d.argo != nil {
		say(" test/gitops TestProblemWithoutAttacher, with the real Argo CD)")
	} else {
		say(" test/rollouts TestSpotReplacementMidCanary/without-plugin)")
	}
	return nil
}

// promoteAndCollect promotes the last revision and prints, as it happens, the controller
// deleting the oldest ReplicaSet (revisionHistoryLimit) and the garbage collector deleting
// its ConfigMap and Secret.
func (d *demo) promoteAndCollect(n int) error {
	r := d.revs[n]
	var oldest *revision
	for i := 1; i < n; i++ {
		if d.revs[i].rs != nil {
			oldest = d.revs[i]
			break
		}
	}
	stage("promote revision %d: the controller keeps the stable ReplicaSet and revisionHistoryLimit (%d) older ones", n, historyLimit)
	t0 := time.Now()
	if err := d.patchStatus(`{"status":{"pauseConditions":null}}`); err != nil {
		return err
	}
	events := []*milestone{{what: fmt.Sprintf("Rollout Healthy at revision %d", n), how: "(ReplicaSet " + r.rs.Name + " stable)", done: func() (bool, error) {
		ok, _, err := d.healthy(r)
		return ok, err
	}}}
	if oldest != nil {
		collected := fmt.Sprintf("collected by the garbage collector (its only owner, ReplicaSet %s, is gone)", oldest.rs.Name)
		events = append(events,
			&milestone{what: fmt.Sprintf("ReplicaSet %s (revision %d)", oldest.rs.Name, oldest.n), how: fmt.Sprintf("deleted by the Rollouts controller (revisionHistoryLimit %d)", historyLimit),
				done: d.gone("ReplicaSet", oldest.rs.Name)},
			&milestone{what: "ConfigMap " + oldest.cm, how: collected, done: d.gone("ConfigMap", oldest.cm)},
			&milestone{what: "Secret    " + oldest.secret, how: collected, done: d.gone("Secret", oldest.secret)})
	}
	// Only the oldest may go.
	guard := func() error {
		for i := 1; i <= n; i++ {
			if rv := d.revs[i]; rv != oldest && rv.rs != nil {
				if g, err := d.gone("ReplicaSet", rv.rs.Name)(); err == nil && g {
					return fmt.Errorf("ReplicaSet %s of revision %d was deleted, not the oldest one", rv.rs.Name, i)
				}
			}
		}
		return nil
	}
	if err := d.waitMilestones(t0, "the promotion and the collection of the oldest revision", guard, events); err != nil {
		if oldest != nil {
			if rs, _ := d.kube.AppsV1().ReplicaSets(namespace).Get(d.ctx, oldest.rs.Name, metav1.GetOptions{}); rs != nil && rs.Name != "" {
				err = fmt.Errorf("%w (oldest ReplicaSet %s: %d replicas, deletionTimestamp %v)", err, rs.Name, rs.Status.Replicas, rs.DeletionTimestamp)
			}
		}
		return err
	}
	// Everything still in history keeps its objects.
	for i := 1; i <= n; i++ {
		rv := d.revs[i]
		if rv == oldest {
			continue
		}
		if err := d.checkOwned(rv); err != nil {
			return fmt.Errorf("revision %d is still in history: %w", i, err)
		}
	}
	note := "promoted"
	if oldest != nil {
		note = fmt.Sprintf("promoted; revision %d collected", oldest.n)
	}
	return d.printTree(fmt.Sprintf("after revision %d (%s)", n, note))
}

// finishRevision ends canary revision n: a spot replacement of a stable pod at spotRevision,
// then the promotion (for the last revision, the promotion and the collection of the oldest).
func (d *demo) finishRevision(n int) error {
	if n == spotRevision {
		if err := d.spotReplacement(n); err != nil {
			return err
		}
	}
	if n == revisions {
		return d.promoteAndCollect(n)
	}
	return d.promote(n)
}

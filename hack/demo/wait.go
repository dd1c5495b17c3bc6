package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// errTimeout marks a wait that did not end in time.
var errTimeout = errors.New("timed out")

// waitFor polls cond every 100 ms until it reports done, returns an error (fatal), ctx ends or
// timeout passes; the error then names what was awaited and cond's last description.
func (d *demo) waitFor(timeout time.Duration, what string, cond func() (done bool, state string, err error)) error {
	return d.waitEvery(timeout, 100*time.Millisecond, what, cond)
}

// waitEvery is waitFor polling every interval.
func (d *demo) waitEvery(timeout, interval time.Duration, what string, cond func() (done bool, state string, err error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, state, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %v waiting for %s; last state: %s", errTimeout, timeout, what, state)
		}
		select {
		case <-d.ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, d.ctx.Err())
		case <-time.After(interval):
		}
	}
}

// revisionRS reads the Rollout and the ReplicaSet of revision r, recording it in r.rs; with
// no ReplicaSet (yet), state says why.
func (d *demo) revisionRS(r *revision) (ro *v1alpha1.Rollout, rs *appsv1.ReplicaSet, state string) {
	ro, err := d.rollout()
	if err != nil {
		return nil, nil, err.Error()
	}
	rss, err := d.replicaSets(ro)
	if err != nil {
		return ro, nil, err.Error()
	}
	if rs = findRS(rss, r); rs == nil {
		return ro, nil, cluster.RolloutState(ro) + "; no ReplicaSet for the revision yet"
	}
	r.rs = rs
	return ro, rs, ""
}

// healthy reports whether r is fully rolled out (and records its ReplicaSet).
func (d *demo) healthy(r *revision) (bool, string, error) {
	ro, rs, state := d.revisionRS(r)
	if rs == nil {
		return false, state, nil
	}
	return cluster.RolloutHealthyAt(ro, rs, replicas), fmt.Sprintf("%s; ReplicaSet %s available %d", cluster.RolloutState(ro), rs.Name, rs.Status.AvailableReplicas), nil
}

func (d *demo) waitHealthy(r *revision) error {
	return d.waitFor(waitTimeout, fmt.Sprintf("Rollout %s Healthy at revision %d", appName, r.n), func() (bool, string, error) {
		return d.healthy(r)
	})
}

// waitStep waits until the plugin step (index 0) has run Successful for r's ReplicaSet and
// returns its message; a Failed or Error phase fails at once.
func (d *demo) waitStep(r *revision) (string, error) {
	var msg string
	err := d.waitFor(stepTimeout, fmt.Sprintf("the plugin step to succeed for revision %d", r.n), func() (bool, string, error) {
		ro, rs, state := d.revisionRS(r)
		if rs == nil {
			return false, state, nil
		}
		for _, s := range ro.Status.Canary.StepPluginStatuses {
			if s.Index != 0 || s.Operation != v1alpha1.StepPluginOperationRun || s.Name != cluster.PluginName {
				continue
			}
			var st struct {
				ReplicaSet string `json:"replicaSet"`
			}
			_ = json.Unmarshal(s.Status, &st)
			switch {
			case s.Phase == v1alpha1.StepPluginPhaseFailed || s.Phase == v1alpha1.StepPluginPhaseError:
				return false, "", fmt.Errorf("the step ended %s: %s (%s)", s.Phase, s.Message, cluster.RolloutState(ro))
			case s.Phase == v1alpha1.StepPluginPhaseSuccessful && st.ReplicaSet == rs.Name:
				msg = s.Message
				return true, "", nil
			}
		}
		return false, cluster.RolloutState(ro), nil
	})
	return msg, err
}

// waitPaused waits until the Rollout is paused at step index with one Ready canary pod and
// one Ready stable pod, and the controller has finished writing the pause (Paused condition,
// resourceVersion unchanged for 300 ms: a promote landing between two of the controller's
// own status writes can go unseen until its resync).
func (d *demo) waitPaused(r *revision, index int32) error {
	var rv string
	var since time.Time
	return d.waitFor(waitTimeout, fmt.Sprintf("Rollout %s paused at step %d with 1 canary and 1 stable pod", appName, index), func() (bool, string, error) {
		ro, err := d.rollout()
		if err != nil {
			return false, err.Error(), nil
		}
		rss, err := d.replicaSets(ro)
		if err != nil {
			return false, err.Error(), nil
		}
		var canaryReady, stableReady int32 = -1, -1
		for _, rs := range rss {
			switch h := rs.Labels[cluster.RolloutsHashLabel]; {
			case h == ro.Status.StableRS:
				stableReady = rs.Status.ReadyReplicas
			case h == ro.Status.CurrentPodHash:
				canaryReady = rs.Status.ReadyReplicas
			}
		}
		paused := false
		for _, c := range ro.Status.Conditions {
			paused = paused || c.Type == v1alpha1.RolloutPaused && c.Status == corev1.ConditionTrue
		}
		ok := cluster.RolloutObserved(ro) && ro.Status.CurrentStepIndex != nil && *ro.Status.CurrentStepIndex == index &&
			len(ro.Status.PauseConditions) > 0 && paused && canaryReady == 1 && stableReady == 1
		state := fmt.Sprintf("%s; canary ready %d, stable ready %d", cluster.RolloutState(ro), canaryReady, stableReady)
		if !ok || ro.ResourceVersion != rv {
			rv, since = ro.ResourceVersion, time.Now()
			return false, state, nil
		}
		return time.Since(since) >= 300*time.Millisecond, state, nil
	})
}

// checkOwned fails unless r's ConfigMap and Secret exist and carry r's ReplicaSet as owner.
func (d *demo) checkOwned(r *revision) error {
	if r.rs == nil {
		return fmt.Errorf("revision %d has no ReplicaSet", r.n)
	}
	for _, o := range r.objects() {
		err := d.waitFor(10*time.Second, fmt.Sprintf("%s owned by ReplicaSet %s", o, r.rs.Name), func() (bool, string, error) {
			m, err := d.meta(o)
			switch {
			case err != nil:
				return false, err.Error(), nil
			case m == nil:
				return false, "", fmt.Errorf("%s does not exist", o)
			}
			return ownedBy(m.OwnerReferences, r.rs), fmt.Sprintf("owner references %+v", m.OwnerReferences), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// milestone is one thing waitMilestones waits for: printed, with the time since the start,
// once done reports it.
type milestone struct {
	what, how string
	done      func() (bool, error)
	seen      bool
}

// waitMilestones polls every 20 ms until every milestone is done, printing each as it happens;
// guard failing ends the wait at once.
func (d *demo) waitMilestones(t0 time.Time, what string, guard func() error, events []*milestone) error {
	return d.waitEvery(waitTimeout, 20*time.Millisecond, what, func() (bool, string, error) {
		if err := guard(); err != nil {
			return false, "", err
		}
		var pending []string
		for _, e := range events {
			if e.seen {
				continue
			}
			ok, err := e.done()
			if err != nil && !apierrors.IsNotFound(err) {
				pending = append(pending, fmt.Sprintf("%s (%v)", e.what, err))
				continue
			}
			if !ok {
				pending = append(pending, e.what)
				continue
			}
			e.seen = true
			fmt.Printf("   %7s  %s %s\n", fmt.Sprintf("+%.2fs", time.Since(t0).Seconds()), e.what, e.how)
		}
		return len(pending) == 0, "still waiting for: " + strings.Join(pending, "; "), nil
	})
}

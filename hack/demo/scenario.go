package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/configmap-attacher/configmap-attacher/test/cluster"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

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

// revision is one version of the app's configuration: a ConfigMap and a Secret whose names
// carry a hash of their content (as Kustomize's configMapGenerator or a Helm template makes).
type revision struct {
	n                  int
	cm, secret         string
	cmData, secretData map[string]string
	rs                 *appsv1.ReplicaSet // once the controller has created it
}

func newRevision(n int) *revision {
	colors := []string{"blue", "green", "orange", "purple", "teal"}
	r := &revision{n: n,
		cmData:     map[string]string{"app.properties": fmt.Sprintf("color=%s\nlog.level=info\nfeature.checkout=%v\n", colors[(n-1)%len(colors)], n >= 3)},
		secretData: map[string]string{"API_TOKEN": fmt.Sprintf("demo-token-%d", n*7919)},
	}
	r.cm = appName + "-config-" + contentHash(r.cmData)
	r.secret = appName + "-secret-" + contentHash(r.secretData)
	return r
}

// contentHash is the first 5 hex digits of a SHA-256 over the sorted data.
func contentHash(data map[string]string) string {
	h := sha256.New()
	for _, k := range sortedKeys(data) {
		fmt.Fprintf(h, "%s=%s\x00", k, data[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:5]
}

func (r *revision) objects() []cluster.ConfigRef {
	return []cluster.ConfigRef{{Kind: "ConfigMap", Name: r.cm}, {Kind: "Secret", Name: r.secret}}
}

func (r *revision) template() corev1.PodTemplateSpec {
	no := false
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{cluster.LabelApp: appName}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name: "web", Image: "nginx:1.27",
				EnvFrom:      []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: r.secret}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/web", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: r.cm}}}}},
		},
	}
}

// steps: the plugin step first (naming this revision's objects), setWeight 50, pause {}.
func (r *revision) steps() []v1alpha1.CanaryStep {
	cfg, _ := json.Marshal(map[string]any{"configMaps": []string{r.cm}, "secrets": []string{r.secret}})
	w := int32(50)
	return []v1alpha1.CanaryStep{
		{Plugin: &v1alpha1.PluginStep{Name: cluster.PluginName, Config: cfg}},
		{SetWeight: &w},
		{Pause: &v1alpha1.RolloutPause{}},
	}
}

// scenario is the demo proper, stage by stage.
func (d *demo) scenario() error {
	if err := d.revision1(); err != nil {
		return err
	}
	for n := 2; n <= revisions; n++ {
		if err := d.canaryRevision(n); err != nil {
			return err
		}
		if n == spotRevision {
			if err := d.spotReplacement(n); err != nil {
				return err
			}
		}
		if n == revisions {
			return d.promoteAndCollect(n)
		}
		if err := d.promote(n); err != nil {
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
	lim, n := historyLimit, replicas
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: appName, Namespace: namespace},
		Spec: v1alpha1.RolloutSpec{
			Replicas: &n, RevisionHistoryLimit: &lim,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.LabelApp: appName}},
			Template: r.template(),
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: r.steps()}},
		},
	}
	t0 := time.Now()
	if _, err := d.ro.ArgoprojV1alpha1().Rollouts(namespace).Create(d.ctx, ro, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Rollout: %w", err)
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
	kept, deleted, err := d.pruneLikeArgoCD(n)
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
				if podReady(p) {
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
	say(" test/e2e TestSpotReplacementMidCanary/without-plugin)")
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
	type watched struct {
		what, how string
		done      func() (bool, error)
		seen      bool
	}
	// gone returns a check that kind/name no longer exists.
	gone := func(kind, name string) func() (bool, error) {
		return func() (bool, error) {
			var err error
			switch kind {
			case "ReplicaSet":
				_, err = d.kube.AppsV1().ReplicaSets(namespace).Get(d.ctx, name, metav1.GetOptions{})
			case "ConfigMap":
				_, err = d.kube.CoreV1().ConfigMaps(namespace).Get(d.ctx, name, metav1.GetOptions{})
			default:
				_, err = d.kube.CoreV1().Secrets(namespace).Get(d.ctx, name, metav1.GetOptions{})
			}
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		}
	}
	events := []*watched{{what: fmt.Sprintf("Rollout Healthy at revision %d", n), how: "(ReplicaSet " + r.rs.Name + " stable)", done: func() (bool, error) {
		ok, _, err := d.healthy(r)
		return ok, err
	}}}
	if oldest != nil {
		collected := fmt.Sprintf("collected by the garbage collector (its only owner, ReplicaSet %s, is gone)", oldest.rs.Name)
		events = append(events,
			&watched{what: fmt.Sprintf("ReplicaSet %s (revision %d)", oldest.rs.Name, oldest.n), how: fmt.Sprintf("deleted by the Rollouts controller (revisionHistoryLimit %d)", historyLimit),
				done: gone("ReplicaSet", oldest.rs.Name)},
			&watched{what: "ConfigMap " + oldest.cm, how: collected, done: gone("ConfigMap", oldest.cm)},
			&watched{what: "Secret    " + oldest.secret, how: collected, done: gone("Secret", oldest.secret)})
	}
	if err := d.waitEvery(waitTimeout, 20*time.Millisecond, "the promotion and the collection of the oldest revision", func() (bool, string, error) {
		// Only the oldest may go.
		for i := 1; i <= n; i++ {
			if rv := d.revs[i]; rv != oldest && rv.rs != nil {
				if g, err := gone("ReplicaSet", rv.rs.Name)(); err == nil && g {
					return false, "", fmt.Errorf("ReplicaSet %s of revision %d was deleted, not the oldest one", rv.rs.Name, i)
				}
			}
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
	}); err != nil {
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

// createConfig creates revision r's ConfigMap and Secret.
func (d *demo) createConfig(r *revision) error {
	l := map[string]string{cluster.LabelRevisioned: "true", cluster.LabelApp: appName, labelRevision: strconv.Itoa(r.n)}
	if _, err := d.kube.CoreV1().ConfigMaps(namespace).Create(d.ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: r.cm, Labels: l}, Data: r.cmData}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ConfigMap %s: %w", r.cm, err)
	}
	if _, err := d.kube.CoreV1().Secrets(namespace).Create(d.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: r.secret, Labels: l}, StringData: r.secretData}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Secret %s: %w", r.secret, err)
	}
	d.revs[r.n] = r
	return nil
}

func (d *demo) updateRollout(change func(*v1alpha1.Rollout)) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ro, err := d.ro.ArgoprojV1alpha1().Rollouts(namespace).Get(d.ctx, appName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(ro)
		_, err = d.ro.ArgoprojV1alpha1().Rollouts(namespace).Update(d.ctx, ro, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("update Rollout: %w", err)
	}
	return nil
}

// patchStatus patches the Rollout's status subresource, as kubectl-argo-rollouts does.
func (d *demo) patchStatus(patch string) error {
	if _, err := d.ro.ArgoprojV1alpha1().Rollouts(namespace).Patch(d.ctx, appName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch Rollout status %s: %w", patch, err)
	}
	return nil
}

func (d *demo) rollout() (*v1alpha1.Rollout, error) {
	return d.ro.ArgoprojV1alpha1().Rollouts(namespace).Get(d.ctx, appName, metav1.GetOptions{})
}

// replicaSets lists the ReplicaSets whose controller is the Rollout.
func (d *demo) replicaSets(ro *v1alpha1.Rollout) ([]appsv1.ReplicaSet, error) {
	list, err := d.kube.AppsV1().ReplicaSets(namespace).List(d.ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(map[string]string{cluster.LabelApp: appName}).String()})
	if err != nil {
		return nil, err
	}
	var out []appsv1.ReplicaSet
	for _, rs := range list.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.UID == ro.UID {
			out = append(out, rs)
		}
	}
	slices.SortFunc(out, func(a, b appsv1.ReplicaSet) int {
		return atoi(b.Annotations[revisionAnnot]) - atoi(a.Annotations[revisionAnnot])
	})
	return out, nil
}

// findRS returns the ReplicaSet whose pod template uses r's ConfigMap (nil if none).
func findRS(rss []appsv1.ReplicaSet, r *revision) *appsv1.ReplicaSet {
	for i := range rss {
		for _, ref := range cluster.PodConfigRefs(&rss[i].Spec.Template.Spec) {
			if ref.Kind == "ConfigMap" && ref.Name == r.cm {
				return &rss[i]
			}
		}
	}
	return nil
}

func observed(ro *v1alpha1.Rollout) bool {
	return ro.Status.ObservedGeneration == strconv.FormatInt(ro.Generation, 10)
}

func rolloutState(ro *v1alpha1.Rollout) string {
	idx := "none"
	if ro.Status.CurrentStepIndex != nil {
		idx = strconv.Itoa(int(*ro.Status.CurrentStepIndex))
	}
	var steps []string
	for _, s := range ro.Status.Canary.StepPluginStatuses {
		steps = append(steps, fmt.Sprintf("{step %d %s %s: %q}", s.Index, s.Operation, s.Phase, s.Message))
	}
	return fmt.Sprintf("phase %s (%q), generation %d observed %s, currentPodHash %s, stableRS %s, step %s, pauseConditions %d, plugin steps %v",
		ro.Status.Phase, ro.Status.Message, ro.Generation, ro.Status.ObservedGeneration, ro.Status.CurrentPodHash,
		ro.Status.StableRS, idx, len(ro.Status.PauseConditions), steps)
}

// healthy reports whether r is fully rolled out (and records its ReplicaSet).
func (d *demo) healthy(r *revision) (bool, string, error) {
	ro, err := d.rollout()
	if err != nil {
		return false, err.Error(), nil
	}
	rss, err := d.replicaSets(ro)
	if err != nil {
		return false, err.Error(), nil
	}
	rs := findRS(rss, r)
	if rs == nil {
		return false, rolloutState(ro) + "; no ReplicaSet for the revision yet", nil
	}
	r.rs = rs
	h := rs.Labels[cluster.RolloutsHashLabel]
	ok := observed(ro) && ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == h &&
		ro.Status.CurrentPodHash == h && rs.Status.AvailableReplicas == replicas
	return ok, fmt.Sprintf("%s; ReplicaSet %s available %d", rolloutState(ro), rs.Name, rs.Status.AvailableReplicas), nil
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
		ro, err := d.rollout()
		if err != nil {
			return false, err.Error(), nil
		}
		rss, err := d.replicaSets(ro)
		if err != nil {
			return false, err.Error(), nil
		}
		rs := findRS(rss, r)
		if rs == nil {
			return false, rolloutState(ro) + "; no ReplicaSet for the revision yet", nil
		}
		r.rs = rs
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
				return false, "", fmt.Errorf("the step ended %s: %s (%s)", s.Phase, s.Message, rolloutState(ro))
			case s.Phase == v1alpha1.StepPluginPhaseSuccessful && st.ReplicaSet == rs.Name:
				msg = s.Message
				return true, "", nil
			}
		}
		return false, rolloutState(ro), nil
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
		ok := observed(ro) && ro.Status.CurrentStepIndex != nil && *ro.Status.CurrentStepIndex == index &&
			len(ro.Status.PauseConditions) > 0 && paused && canaryReady == 1 && stableReady == 1
		state := fmt.Sprintf("%s; canary ready %d, stable ready %d", rolloutState(ro), canaryReady, stableReady)
		if !ok || ro.ResourceVersion != rv {
			rv, since = ro.ResourceVersion, time.Now()
			return false, state, nil
		}
		return time.Since(since) >= 300*time.Millisecond, state, nil
	})
}

// meta returns the metadata of a ConfigMap or Secret (nil when it does not exist).
func (d *demo) meta(ref cluster.ConfigRef) (*metav1.ObjectMeta, error) {
	var m *metav1.ObjectMeta
	var err error
	if ref.Kind == "Secret" {
		var s *corev1.Secret
		if s, err = d.kube.CoreV1().Secrets(namespace).Get(d.ctx, ref.Name, metav1.GetOptions{}); err == nil {
			m = &s.ObjectMeta
		}
	} else {
		var cm *corev1.ConfigMap
		if cm, err = d.kube.CoreV1().ConfigMaps(namespace).Get(d.ctx, ref.Name, metav1.GetOptions{}); err == nil {
			m = &cm.ObjectMeta
		}
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return m, err
}

// ownedBy reports whether refs has exactly the reference the plugin writes for rs.
func ownedBy(refs []metav1.OwnerReference, rs *appsv1.ReplicaSet) bool {
	for _, r := range refs {
		if r.UID == rs.UID {
			return r.APIVersion == "apps/v1" && r.Kind == "ReplicaSet" && r.Name == rs.Name &&
				(r.Controller == nil || !*r.Controller)
		}
	}
	return false
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

// pruneLikeArgoCD deletes the app's revisioned ConfigMaps and Secrets of revisions before
// current ("no longer in Git") that carry no owner reference: Argo CD does not prune objects
// with owner references. It returns what it kept and what it deleted.
func (d *demo) pruneLikeArgoCD(current int) (kept, deleted []string, err error) {
	sel := labels.SelectorFromSet(map[string]string{cluster.LabelRevisioned: "true", cluster.LabelApp: appName}).String()
	cms, err := d.kube.CoreV1().ConfigMaps(namespace).List(d.ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, nil, err
	}
	secs, err := d.kube.CoreV1().Secrets(namespace).List(d.ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, nil, err
	}
	type obj struct {
		ref  cluster.ConfigRef
		meta metav1.ObjectMeta
	}
	var objs []obj
	for _, cm := range cms.Items {
		objs = append(objs, obj{cluster.ConfigRef{Kind: "ConfigMap", Name: cm.Name}, cm.ObjectMeta})
	}
	for _, s := range secs.Items {
		objs = append(objs, obj{cluster.ConfigRef{Kind: "Secret", Name: s.Name}, s.ObjectMeta})
	}
	for _, o := range objs {
		if rev := atoi(o.meta.Labels[labelRevision]); rev >= current {
			continue
		}
		if len(o.meta.OwnerReferences) > 0 {
			kept = append(kept, o.ref.String())
			continue
		}
		var err error
		if o.ref.Kind == "Secret" {
			err = d.kube.CoreV1().Secrets(namespace).Delete(d.ctx, o.ref.Name, metav1.DeleteOptions{})
		} else {
			err = d.kube.CoreV1().ConfigMaps(namespace).Delete(d.ctx, o.ref.Name, metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("prune %s: %w", o.ref, err)
		}
		deleted = append(deleted, o.ref.String())
	}
	return kept, deleted, nil
}

func (d *demo) livePods(selector string) ([]corev1.Pod, error) {
	list, err := d.kube.CoreV1().Pods(namespace).List(d.ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// printTree prints the heading and the current tree.
func (d *demo) printTree(heading string) error {
	s, err := d.snapshot()
	if err != nil {
		return fmt.Errorf("read the state for the tree: %w", err)
	}
	d.notePluginPIDs()
	stage("%s", heading)
	fmt.Print(render(s))
	return nil
}

// snapshot reads the Rollout, its ReplicaSets and the app's revisioned objects.
func (d *demo) snapshot() (snapshot, error) {
	ro, err := d.rollout()
	if err != nil {
		return snapshot{}, err
	}
	rss, err := d.replicaSets(ro)
	if err != nil {
		return snapshot{}, err
	}
	s := snapshot{Rollout: namespace + "/" + appName}
	rsName := func(hash string) string { return appName + "-" + hash }
	switch {
	case ro.Status.CurrentPodHash == ro.Status.StableRS:
		s.Summary = fmt.Sprintf("%s, stable %s", ro.Status.Phase, rsName(ro.Status.StableRS))
	default:
		s.Summary = fmt.Sprintf("stable %s, canary %s", rsName(ro.Status.StableRS), rsName(ro.Status.CurrentPodHash))
		if len(ro.Status.PauseConditions) > 0 && ro.Status.CurrentStepIndex != nil {
			s.Summary += fmt.Sprintf(", paused at step %d", *ro.Status.CurrentStepIndex)
		} else {
			s.Summary += ", " + string(ro.Status.Phase)
		}
	}
	for i := range rss {
		rs := &rss[i]
		v := rsView{Name: rs.Name, Revision: rs.Annotations[revisionAnnot], Ready: rs.Status.ReadyReplicas}
		if rs.Spec.Replicas != nil {
			v.Replicas = *rs.Spec.Replicas
		}
		switch h := rs.Labels[cluster.RolloutsHashLabel]; {
		case h == ro.Status.StableRS:
			v.Role = "stable"
		case h == ro.Status.CurrentPodHash:
			v.Role = "canary"
		default:
			v.Role = "old"
		}
		for _, ref := range cluster.PodConfigRefs(&rs.Spec.Template.Spec) {
			m, err := d.meta(ref)
			if err != nil {
				return snapshot{}, err
			}
			o := objView{Kind: ref.Kind, Name: ref.Name, State: stateOwned}
			switch {
			case m == nil:
				o.State = stateMissing
			case !ownedBy(m.OwnerReferences, rs):
				o.State = stateNotOwned
			}
			v.Objects = append(v.Objects, o)
		}
		s.RSs = append(s.RSs, v)
	}
	// Revisioned objects of the app that no ReplicaSet owns.
	for n := 1; n <= revisions; n++ {
		r := d.revs[n]
		if r == nil {
			continue
		}
		for _, ref := range r.objects() {
			m, err := d.meta(ref)
			if err != nil {
				return snapshot{}, err
			}
			if m != nil && !slices.ContainsFunc(m.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "ReplicaSet" }) {
				s.Unowned = append(s.Unowned, objView{Kind: ref.Kind, Name: ref.Name, State: fmt.Sprintf("(revision %d)", n)})
			}
		}
	}
	// What the demo created that is gone.
	for n := 1; n <= revisions; n++ {
		r := d.revs[n]
		if r == nil {
			continue
		}
		var gone []string
		if r.rs != nil && findRSByUID(rss, r.rs.UID) == nil {
			gone = append(gone, "ReplicaSet "+r.rs.Name)
		}
		for _, ref := range r.objects() {
			m, err := d.meta(ref)
			if err != nil {
				return snapshot{}, err
			}
			if m == nil {
				gone = append(gone, ref.Kind+" "+ref.Name)
			}
		}
		if len(gone) > 0 {
			s.Collected = append(s.Collected, fmt.Sprintf("rev %d: %s", n, strings.Join(gone, ", ")))
		}
	}
	return s, nil
}

func findRSByUID(rss []appsv1.ReplicaSet, uid types.UID) *appsv1.ReplicaSet {
	for i := range rss {
		if rss[i].UID == uid {
			return &rss[i]
		}
	}
	return nil
}

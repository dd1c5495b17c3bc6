package rollouts

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// labelRevision is the revision label of the revisioned objects (the others are test/support/cluster's).
const labelRevision = "e2e/revision"

// app is one Rollout in a test namespace whose revision N uses ConfigMap <name>-config-N
// (volume) and Secret <name>-secret-N (envFrom).
type app struct {
	t        *testing.T
	e        *env
	ns, name string
	kube     kubernetes.Interface
	ro       rolloutsclient.Interface
	// steps returns the canary steps of revision rev (the plugin step names rev's objects).
	steps         func(a *app, rev int) []v1alpha1.CanaryStep
	replicas      int32
	historyLimit  *int32
	jobKubeconfig string
	// discover adds discover: {} to the plugin step's config.
	discover bool
}

func newApp(t *testing.T, e *env, ns, name string, steps func(a *app, rev int) []v1alpha1.CanaryStep) *app {
	t.Helper()
	rc, err := rolloutsclient.NewForConfig(e.c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &app{t: t, e: e, ns: ns, name: name, kube: e.c.Client(t), ro: rc, steps: steps, replicas: 2}
}

func (a *app) cm(rev int) string     { return fmt.Sprintf("%s-config-%d", a.name, rev) }
func (a *app) secret(rev int) string { return fmt.Sprintf("%s-secret-%d", a.name, rev) }
func (a *app) objects(rev int) []cluster.ConfigRef {
	return []cluster.ConfigRef{cluster.ConfigMapRef(a.cm(rev)), cluster.SecretRef(a.secret(rev))}
}

// pluginStep is the plugin step attaching revision rev's objects.
func (a *app) pluginStep(rev int) v1alpha1.CanaryStep {
	m := map[string]any{"configMaps": []string{a.cm(rev)}, "secrets": []string{a.secret(rev)}}
	if a.discover {
		m["discover"] = map[string]any{}
	}
	cfg, _ := json.Marshal(m)
	return v1alpha1.CanaryStep{Plugin: &v1alpha1.PluginStep{Name: cluster.PluginName, Config: cfg}}
}

// Step lists used by the tests.
func stepsPluginFirst(a *app, rev int) []v1alpha1.CanaryStep { // plugin, setWeight 50, pause {}
	w := int32(50)
	return []v1alpha1.CanaryStep{a.pluginStep(rev), {SetWeight: &w}, {Pause: &v1alpha1.RolloutPause{}}}
}

func stepsNoPlugin(a *app, rev int) []v1alpha1.CanaryStep { // setWeight 50, pause {}
	w := int32(50)
	return []v1alpha1.CanaryStep{{SetWeight: &w}, {Pause: &v1alpha1.RolloutPause{}}}
}

func stepsPluginAuto(a *app, rev int) []v1alpha1.CanaryStep { // plugin, setWeight 50, pause 1s
	w := int32(50)
	return []v1alpha1.CanaryStep{a.pluginStep(rev), {SetWeight: &w}, {Pause: &v1alpha1.RolloutPause{Duration: v1alpha1.DurationFromString("1s")}}}
}

func stepsPauseFirst(a *app, rev int) []v1alpha1.CanaryStep { // pause {}, plugin, setWeight 50, pause {}
	w := int32(50)
	return []v1alpha1.CanaryStep{{Pause: &v1alpha1.RolloutPause{}}, a.pluginStep(rev), {SetWeight: &w}, {Pause: &v1alpha1.RolloutPause{}}}
}

// createConfig creates revision rev's ConfigMap and Secret, labelled as revisioned.
func (a *app) createConfig(rev int) {
	a.t.Helper()
	l := map[string]string{cluster.LabelRevisioned: "true", cluster.LabelApp: a.name, labelRevision: strconv.Itoa(rev)}
	ctx := testCtx(a.t)
	if _, err := a.kube.CoreV1().ConfigMaps(a.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: a.cm(rev), Labels: l},
		Data: map[string]string{"app.conf": fmt.Sprintf("revision %d\n", rev)}}, metav1.CreateOptions{}); err != nil {
		a.t.Fatalf("create ConfigMap: %v", err)
	}
	if _, err := a.kube.CoreV1().Secrets(a.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: a.secret(rev), Labels: l},
		StringData: map[string]string{"TOKEN": fmt.Sprintf("token-%d", rev)}}, metav1.CreateOptions{}); err != nil {
		a.t.Fatalf("create Secret: %v", err)
	}
}

func (a *app) template(rev int) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{cluster.LabelApp: a.name}},
		Spec:       fixtures.RunnablePodSpec(a.cm(rev), a.secret(rev)),
	}
}

// deploy creates the Rollout at revision 1, or applies revision rev (pod template and steps
// in one update, as a GitOps sync does).
func (a *app) deploy(rev int) {
	a.t.Helper()
	ctx := testCtx(a.t)
	if rev == 1 {
		ro := &v1alpha1.Rollout{
			ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: a.ns},
			Spec: v1alpha1.RolloutSpec{
				Replicas:             &a.replicas,
				RevisionHistoryLimit: a.historyLimit,
				Selector:             &metav1.LabelSelector{MatchLabels: map[string]string{cluster.LabelApp: a.name}},
				Template:             a.template(rev),
				Strategy:             v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: a.steps(a, rev)}},
			},
		}
		if _, err := a.ro.ArgoprojV1alpha1().Rollouts(a.ns).Create(ctx, ro, metav1.CreateOptions{}); err != nil {
			a.t.Fatalf("create Rollout: %v", err)
		}
		return
	}
	a.update(func(ro *v1alpha1.Rollout) {
		ro.Spec.Template = a.template(rev)
		ro.Spec.Strategy.Canary.Steps = a.steps(a, rev)
	})
}

// update changes the Rollout's spec (retrying on conflicts).
func (a *app) update(change func(*v1alpha1.Rollout)) {
	a.t.Helper()
	if err := cluster.UpdateRollout(context.Background(), a.ro, a.ns, a.name, change); err != nil {
		a.t.Fatal(err)
	}
}

func (a *app) get() *v1alpha1.Rollout {
	a.t.Helper()
	ro, err := a.ro.ArgoprojV1alpha1().Rollouts(a.ns).Get(context.Background(), a.name, metav1.GetOptions{})
	if err != nil {
		a.t.Fatalf("get Rollout: %v", err)
	}
	return ro
}

// replicaSets lists the ReplicaSets whose controller is the Rollout.
func (a *app) replicaSets() []appsv1.ReplicaSet {
	a.t.Helper()
	rss, err := cluster.ControlledReplicaSets(context.Background(), a.kube, a.ns, a.name, a.get().UID)
	if err != nil {
		a.t.Fatal(err)
	}
	return rss
}

// rsFor returns the ReplicaSet whose pod template uses revision rev's ConfigMap (nil if none).
func (a *app) rsFor(rev int) *appsv1.ReplicaSet {
	a.t.Helper()
	return cluster.ReplicaSetUsingConfigMap(a.replicaSets(), a.cm(rev))
}

// eventually polls cond every 100 ms until it returns true; after timeout it fails the test
// with cond's last description.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last state: %s", timeout, what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (a *app) waitHealthy(rev int) *appsv1.ReplicaSet {
	a.t.Helper()
	var rs *appsv1.ReplicaSet
	eventually(a.t, 60*time.Second, fmt.Sprintf("Rollout %s Healthy at revision %d", a.name, rev), func() (bool, string) {
		ro := a.get()
		rs = a.rsFor(rev)
		if rs == nil {
			return false, cluster.RolloutState(ro) + "; no ReplicaSet for the revision yet"
		}
		return cluster.RolloutHealthyAt(ro, rs, a.replicas), fmt.Sprintf("%s; rs %s available %d", cluster.RolloutState(ro), rs.Name, rs.Status.AvailableReplicas)
	})
	return rs
}

// waitPaused waits until the Rollout is paused (pause condition) at step index and the
// controller has finished writing the pause (Paused condition True, resourceVersion unchanged
// for 300 ms). Promoting earlier races the controller's own status patches: v1.9.1 writes its
// patched Rollout back into its informer cache (rollout/controller.go writeBackToInformer), so
// a promote landing between two of its patches can go unseen until the 15-minute resync.
func (a *app) waitPaused(index int32) *v1alpha1.Rollout {
	a.t.Helper()
	var ro *v1alpha1.Rollout
	var rv string
	var since time.Time
	eventually(a.t, 60*time.Second, fmt.Sprintf("Rollout %s paused at step %d", a.name, index), func() (bool, string) {
		ro = a.get()
		ok := cluster.RolloutObserved(ro) && ro.Status.CurrentStepIndex != nil && *ro.Status.CurrentStepIndex == index && len(ro.Status.PauseConditions) > 0
		paused := false
		for _, c := range ro.Status.Conditions {
			paused = paused || c.Type == v1alpha1.RolloutPaused && c.Status == corev1.ConditionTrue
		}
		ok = ok && paused
		if !ok || ro.ResourceVersion != rv {
			rv, since = ro.ResourceVersion, time.Now()
			return false, cluster.RolloutState(ro)
		}
		return time.Since(since) >= 300*time.Millisecond, cluster.RolloutState(ro)
	})
	return ro
}

// stepStatus decodes the plugin's Status.
type stepStatus struct {
	ReplicaSet    string `json:"replicaSet"`
	ReplicaSetUID string `json:"replicaSetUID"`
	ConfigMaps    []string
	Secrets       []string
	Skipped       []struct {
		Kind   string
		Name   string
		UsedBy []string
	}
	Discovered []struct {
		Kind        string
		Name        string
		ReplicaSets []string
	}
}

// waitStep waits until the Run of the plugin step at index has ended Successful for the
// ReplicaSet of revision rev, and returns it.
func (a *app) waitStep(index int32, rev int) (v1alpha1.StepPluginStatus, stepStatus) {
	a.t.Helper()
	var got v1alpha1.StepPluginStatus
	var st stepStatus
	eventually(a.t, 60*time.Second, fmt.Sprintf("plugin step %d Successful for revision %d of %s", index, rev, a.name), func() (bool, string) {
		ro := a.get()
		rs := a.rsFor(rev)
		if rs == nil {
			return false, cluster.RolloutState(ro) + "; no ReplicaSet for the revision yet"
		}
		for _, s := range ro.Status.Canary.StepPluginStatuses {
			if s.Index != index || s.Operation != v1alpha1.StepPluginOperationRun || s.Name != cluster.PluginName {
				continue
			}
			if s.Phase == v1alpha1.StepPluginPhaseFailed || s.Phase == v1alpha1.StepPluginPhaseError {
				a.t.Fatalf("plugin step failed: %s", cluster.RolloutState(ro))
			}
			st = stepStatus{}
			_ = json.Unmarshal(s.Status, &st)
			if s.Phase == v1alpha1.StepPluginPhaseSuccessful && st.ReplicaSet == rs.Name {
				if st.ReplicaSetUID != string(rs.UID) {
					a.t.Fatalf("step status names ReplicaSet %s with UID %s, want %s", st.ReplicaSet, st.ReplicaSetUID, rs.UID)
				}
				got = s
				return true, ""
			}
		}
		return false, cluster.RolloutState(ro)
	})
	return got, st
}

// owners returns the owner references of a ConfigMap or Secret (notFound when it is gone).
func (a *app) owners(r cluster.ConfigRef) ([]metav1.OwnerReference, bool, error) {
	var meta metav1.ObjectMeta
	var err error
	if r.Kind == "Secret" {
		var s *corev1.Secret
		if s, err = a.kube.CoreV1().Secrets(a.ns).Get(context.Background(), r.Name, metav1.GetOptions{}); err == nil {
			meta = s.ObjectMeta
		}
	} else {
		var cm *corev1.ConfigMap
		if cm, err = a.kube.CoreV1().ConfigMaps(a.ns).Get(context.Background(), r.Name, metav1.GetOptions{}); err == nil {
			meta = cm.ObjectMeta
		}
	}
	if apierrors.IsNotFound(err) {
		return nil, true, nil
	}
	return meta.OwnerReferences, false, err
}

// ownedBy reports whether refs has exactly the reference the plugin writes for rs.
func ownedBy(refs []metav1.OwnerReference, rs *appsv1.ReplicaSet) bool {
	for _, r := range refs {
		if r.UID == rs.UID {
			return r.APIVersion == "apps/v1" && r.Kind == "ReplicaSet" && r.Name == rs.Name &&
				r.Controller == nil && r.BlockOwnerDeletion == nil
		}
	}
	return false
}

// waitOwned waits until revision rev's objects carry rs's owner reference.
func (a *app) waitOwned(rev int, rs *appsv1.ReplicaSet) {
	a.t.Helper()
	for _, r := range a.objects(rev) {
		eventually(a.t, 30*time.Second, fmt.Sprintf("%s owned by ReplicaSet %s", r, rs.Name), func() (bool, string) {
			refs, gone, err := a.owners(r)
			if gone {
				a.t.Fatalf("%s was deleted", r)
			}
			return err == nil && ownedBy(refs, rs), fmt.Sprintf("owners %+v err %v", refs, err)
		})
	}
}

// waitGone waits until the garbage collector has deleted revision rev's objects.
func (a *app) waitGone(rev int) {
	a.t.Helper()
	for _, r := range a.objects(rev) {
		eventually(a.t, 30*time.Second, fmt.Sprintf("%s garbage-collected", r), func() (bool, string) {
			refs, gone, err := a.owners(r)
			return gone, fmt.Sprintf("owners %+v err %v", refs, err)
		})
	}
}

// audit checks every ReplicaSet still in the Rollout's history: each ConfigMap and Secret
// its pod template uses must exist (else: lost) and be owned by it (else: unowned).
func (a *app) audit() (lost, unowned []string) {
	a.t.Helper()
	for _, rs := range a.replicaSets() {
		for _, r := range cluster.PodConfigRefs(&rs.Spec.Template.Spec) {
			refs, gone, err := a.owners(r)
			switch {
			case err != nil:
				a.t.Fatalf("get %s: %v", r, err)
			case gone:
				lost = append(lost, fmt.Sprintf("%s (used by ReplicaSet %s)", r, rs.Name))
			case !ownedBy(refs, &rs):
				unowned = append(unowned, fmt.Sprintf("%s (used by ReplicaSet %s, owners %d)", r, rs.Name, len(refs)))
			}
		}
	}
	sort.Strings(lost)
	sort.Strings(unowned)
	return lost, unowned
}

// pruneLikeArgoCD deletes the revisioned ConfigMaps and Secrets of this app that are no longer
// "in Git" (revision < current) and carry no owner reference (cluster.PruneLikeArgoCD). It
// returns what it deleted.
func (a *app) pruneLikeArgoCD(current int) []string {
	return cluster.PruneLikeArgoCD(a.t, testCtx(a.t), a.kube, a.ns, a.name, labelRevision, current)
}

// pods lists the live pods of a ReplicaSet.
func (a *app) pods(rs *appsv1.ReplicaSet) []corev1.Pod {
	a.t.Helper()
	pods, err := cluster.LivePods(context.Background(), a.kube, a.ns,
		labels.SelectorFromSet(map[string]string{cluster.RolloutsHashLabel: rs.Labels[cluster.RolloutsHashLabel]}).String())
	if err != nil {
		a.t.Fatal(err)
	}
	return pods
}

// waitLog waits until a line of the controller log contains every substring.
func waitLog(t *testing.T, ctl *cluster.RolloutsController, subs ...string) string {
	t.Helper()
	var found string
	eventually(t, 20*time.Second, fmt.Sprintf("a controller log line with %q", subs), func() (bool, string) {
		for _, l := range strings.Split(ctl.Log(), "\n") {
			ok := true
			for _, s := range subs {
				ok = ok && strings.Contains(l, s)
			}
			if ok {
				found = l
				return true, ""
			}
		}
		return false, "no such line in " + ctl.LogPath
	})
	return found
}

// waitEvent waits for an Event on the Rollout with the given reason and message, written by
// configmap-attacher, and returns it.
func (a *app) waitEvent(reason, message string) corev1.Event {
	a.t.Helper()
	var ev corev1.Event
	eventually(a.t, 20*time.Second, fmt.Sprintf("a %s Event on Rollout %s: %q", reason, a.name, message), func() (bool, string) {
		list, err := a.kube.CoreV1().Events(a.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.Source.Component != "configmap-attacher" {
				continue
			}
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && e.Message == message && e.InvolvedObject.Kind == "Rollout" && e.InvolvedObject.Name == a.name {
				ev = e
				return true, ""
			}
		}
		return false, fmt.Sprintf("configmap-attacher events: %q", seen)
	})
	return ev
}

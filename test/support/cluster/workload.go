package cluster

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"testing"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Labels on the workloads and revisioned objects that the tests and hack/demo create. They are
// spelled out here rather than taken from the plugin, so that a renamed label fails the tests.
const (
	// LabelRevisioned opts a ConfigMap or Secret in (the plugin's --require-opt-in, the
	// controller mode's default selector).
	LabelRevisioned = "configmap-attacher/revisioned"
	// LabelApp names the workload an object belongs to.
	LabelApp = "app"
	// RolloutsHashLabel is the pod-template hash label the Rollouts controller puts on its
	// ReplicaSets and pods.
	RolloutsHashLabel = v1alpha1.DefaultRolloutUniqueLabelKey
)

// PruneLikeArgoCD deletes app's opted-in ConfigMaps and Secrets (LabelRevisioned=true,
// LabelApp=app) in ns that are no longer "in Git" — their revisionLabel is below current — and
// carry no owner reference: Argo CD does not prune objects with owner references, which is
// what the plugin relies on. It returns what it deleted as sorted "Kind/name"; an API error
// fails the test.
func PruneLikeArgoCD(t testing.TB, ctx context.Context, kube kubernetes.Interface, ns, app, revisionLabel string, current int) []string {
	t.Helper()
	_, deleted, err := PruneUnowned(ctx, kube, ns, app, revisionLabel, current)
	if err != nil {
		t.Fatal(err)
	}
	return deleted
}

// PruneUnowned is PruneLikeArgoCD without a test (for hack/demo): it returns the objects of
// earlier revisions it kept because they have an owner, and those it deleted, each sorted
// "Kind/name". An object already gone counts as deleted.
func PruneUnowned(ctx context.Context, kube kubernetes.Interface, ns, app, revisionLabel string, current int) (kept, deleted []string, err error) {
	opts := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(map[string]string{LabelRevisioned: "true", LabelApp: app}).String()}
	type object struct {
		ref  ConfigRef
		meta metav1.ObjectMeta
	}
	var objects []object
	cms, err := kube.CoreV1().ConfigMaps(ns).List(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	for _, cm := range cms.Items {
		objects = append(objects, object{ConfigMapRef(cm.Name), cm.ObjectMeta})
	}
	secs, err := kube.CoreV1().Secrets(ns).List(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range secs.Items {
		objects = append(objects, object{SecretRef(s.Name), s.ObjectMeta})
	}
	for _, o := range objects {
		if rev, _ := strconv.Atoi(o.meta.Labels[revisionLabel]); rev >= current {
			continue
		}
		if len(o.meta.OwnerReferences) > 0 {
			kept = append(kept, o.ref.String())
			continue
		}
		if o.ref.Kind == "Secret" {
			err = kube.CoreV1().Secrets(ns).Delete(ctx, o.ref.Name, metav1.DeleteOptions{})
		} else {
			err = kube.CoreV1().ConfigMaps(ns).Delete(ctx, o.ref.Name, metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("prune %s: %w", o.ref, err)
		}
		deleted = append(deleted, o.ref.String())
	}
	sort.Strings(kept)
	sort.Strings(deleted)
	return kept, deleted, nil
}

// RolloutObserved reports whether the Rollouts controller has seen the Rollout's current
// generation.
func RolloutObserved(ro *v1alpha1.Rollout) bool {
	return ro.Status.ObservedGeneration == strconv.FormatInt(ro.Generation, 10)
}

// RolloutState describes a Rollout's status in one line, for wait descriptions and failures.
func RolloutState(ro *v1alpha1.Rollout) string {
	idx := "nil"
	if ro.Status.CurrentStepIndex != nil {
		idx = strconv.Itoa(int(*ro.Status.CurrentStepIndex))
	}
	var steps []string
	for _, s := range ro.Status.Canary.StepPluginStatuses {
		steps = append(steps, fmt.Sprintf("{index %d %s %s: %q}", s.Index, s.Operation, s.Phase, s.Message))
	}
	return fmt.Sprintf("phase=%s message=%q gen=%d observed=%s currentPodHash=%s stableRS=%s stepIndex=%s pauseConditions=%d abort=%v steps=%v",
		ro.Status.Phase, ro.Status.Message, ro.Generation, ro.Status.ObservedGeneration, ro.Status.CurrentPodHash, ro.Status.StableRS,
		idx, len(ro.Status.PauseConditions), ro.Status.Abort, steps)
}

// UpdateRollout applies change to Rollout ns/name and writes it back, retrying on conflicts
// (the Rollouts controller writes the same object).
func UpdateRollout(ctx context.Context, rc rolloutsclient.Interface, ns, name string, change func(*v1alpha1.Rollout)) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ro, err := rc.ArgoprojV1alpha1().Rollouts(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(ro)
		_, err = rc.ArgoprojV1alpha1().Rollouts(ns).Update(ctx, ro, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("update Rollout: %w", err)
	}
	return nil
}

// ControlledReplicaSets lists the ReplicaSets in ns labelled LabelApp=app whose controller
// reference is uid (the workload's own, not another workload's with the same label).
func ControlledReplicaSets(ctx context.Context, kube kubernetes.Interface, ns, app string, uid types.UID) ([]appsv1.ReplicaSet, error) {
	list, err := kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(map[string]string{LabelApp: app}).String()})
	if err != nil {
		return nil, fmt.Errorf("list ReplicaSets: %w", err)
	}
	var out []appsv1.ReplicaSet
	for _, rs := range list.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.UID == uid {
			out = append(out, rs)
		}
	}
	return out, nil
}

// ReplicaSetUsingConfigMap returns the ReplicaSet of rss whose pod template uses ConfigMap
// name (nil if none): how a test finds the ReplicaSet of a revision.
func ReplicaSetUsingConfigMap(rss []appsv1.ReplicaSet, name string) *appsv1.ReplicaSet {
	for i := range rss {
		for _, ref := range PodConfigRefs(&rss[i].Spec.Template.Spec) {
			if ref.Kind == "ConfigMap" && ref.Name == name {
				return &rss[i]
			}
		}
	}
	return nil
}

// RolloutHealthyAt reports whether the Rollout is Healthy (and observed) with rs as both its
// stable and current ReplicaSet and replicas pods available.
func RolloutHealthyAt(ro *v1alpha1.Rollout, rs *appsv1.ReplicaSet, replicas int32) bool {
	h := rs.Labels[RolloutsHashLabel]
	return RolloutObserved(ro) && ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == h &&
		ro.Status.CurrentPodHash == h && rs.Status.AvailableReplicas == replicas
}

// LivePods lists the pods in ns matching selector that are not being deleted.
func LivePods(ctx context.Context, kube kubernetes.Interface, ns, selector string) ([]corev1.Pod, error) {
	list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
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

// PromotePatch is the status patch of `kubectl argo rollouts promote` (no flags) for ro: clear
// the pause conditions or, when there are none, move a canary to its next step; "" when there
// is nothing to patch (a blue-green Rollout without pause conditions). The command also sets
// spec.paused to false.
func PromotePatch(ro *v1alpha1.Rollout) string {
	switch {
	case len(ro.Status.PauseConditions) > 0:
		return `{"status":{"pauseConditions":null}}`
	case ro.Spec.Strategy.Canary != nil:
		idx := int32(0)
		if ro.Status.CurrentStepIndex != nil {
			idx = *ro.Status.CurrentStepIndex
		}
		if idx < int32(len(ro.Spec.Strategy.Canary.Steps)) {
			idx++
		}
		return fmt.Sprintf(`{"status":{"pauseConditions":null,"currentStepIndex":%d}}`, idx)
	}
	return ""
}

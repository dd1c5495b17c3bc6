package main

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

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

// createRollout creates the Rollout at revision r.
func (d *demo) createRollout(r *revision) error {
	if _, err := d.ro.ArgoprojV1alpha1().Rollouts(namespace).Create(d.ctx, r.rollout(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Rollout: %w", err)
	}
	return nil
}

func (d *demo) updateRollout(change func(*v1alpha1.Rollout)) error {
	return cluster.UpdateRollout(d.ctx, d.ro, namespace, appName, change)
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
	out, err := cluster.ControlledReplicaSets(d.ctx, d.kube, namespace, appName, ro.UID)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b appsv1.ReplicaSet) int {
		return atoi(b.Annotations[revisionAnnot]) - atoi(a.Annotations[revisionAnnot])
	})
	return out, nil
}

// findRS returns the ReplicaSet whose pod template uses r's ConfigMap (nil if none).
func findRS(rss []appsv1.ReplicaSet, r *revision) *appsv1.ReplicaSet {
	return cluster.ReplicaSetUsingConfigMap(rss, r.cm)
}

func findRSByUID(rss []appsv1.ReplicaSet, uid types.UID) *appsv1.ReplicaSet {
	for i := range rss {
		if rss[i].UID == uid {
			return &rss[i]
		}
	}
	return nil
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

func (d *demo) livePods(selector string) ([]corev1.Pod, error) {
	return cluster.LivePods(d.ctx, d.kube, namespace, selector)
}

// gone returns a check that kind/name (ReplicaSet, ConfigMap or Secret) no longer exists.
func (d *demo) gone(kind, name string) func() (bool, error) {
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

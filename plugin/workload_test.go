package plugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

// ResolveWorkloadRef follows the Rollouts controller: the Deployment's template always, its
// selector only when the Rollout has none; no request without a workloadRef.
func TestResolveWorkloadRef(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS, Generation: 4},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "from-deployment"}},
			Template: corev1.PodTemplateSpec{Spec: fixtures.PodSpec([]string{"cfg"}, nil)}}}
	gets := 0
	get := func(_ context.Context, ns, name string) (*appsv1.Deployment, error) {
		gets++
		if ns != testNS || name != "web" {
			return nil, apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "deployments"}, name)
		}
		return d, nil
	}

	plain := fixtures.Rollout("h1")
	res, err := ResolveWorkloadRef(t.Context(), get, plain)
	if err != nil || gets != 0 || res.Rollout != plain || res.Deployment != nil || res.Workload.Selector != plain.Spec.Selector || res.Workload.UID != fixtures.RolloutUID || res.Workload.Kind != KindRollout {
		t.Errorf("no workloadRef: %+v %v, %d gets", res, err, gets)
	}

	ref := fixtures.Rollout("h1")
	ref.Spec.Selector = nil
	ref.Spec.WorkloadRef = &v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	res, err = ResolveWorkloadRef(t.Context(), get, ref)
	if err != nil || gets != 1 || res.Deployment != d || res.Workload.Selector != d.Spec.Selector || res.Rollout.Spec.Selector != d.Spec.Selector {
		t.Fatalf("workloadRef without selector: %+v %v", res, err)
	}
	if res.Rollout == ref || len(res.Rollout.Spec.Template.Spec.Volumes) != 1 || len(ref.Spec.Template.Spec.Volumes) != 0 {
		t.Error("the template is not the Deployment's, or the Rollout itself was changed")
	}

	own := ref.DeepCopy()
	own.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "own"}}
	if res, err = ResolveWorkloadRef(t.Context(), get, own); err != nil || res.Workload.Selector.MatchLabels["app"] != "own" || len(res.Rollout.Spec.Template.Spec.Volumes) != 1 {
		t.Errorf("workloadRef with its own selector: %+v %v", res, err)
	}

	missing := ref.DeepCopy()
	missing.Spec.WorkloadRef.Name = "gone"
	if _, err = ResolveWorkloadRef(t.Context(), get, missing); !apierrors.IsNotFound(err) {
		t.Errorf("missing Deployment: %v, want the getter's 404", err)
	}

	sts := ref.DeepCopy()
	sts.Spec.WorkloadRef.Kind = "StatefulSet"
	gets = 0
	if _, err = ResolveWorkloadRef(t.Context(), get, sts); !IsPermanent(err) || !strings.Contains(err.Error(), `spec.workloadRef.kind "StatefulSet" is not supported`) || gets != 0 {
		t.Errorf("unsupported kind: %v (%d gets)", err, gets)
	}
}

// OwnReplicaSets keeps, from one list, the workload's own: its selector and its controller
// UID, oldest first.
func TestOwnReplicaSets(t *testing.T) {
	newer := fixtures.Aged("h2", "uid-h2", 0, fixtures.PodSpec(nil, nil))
	older := fixtures.Aged("h1", "uid-h1", -time.Hour, fixtures.PodSpec(nil, nil))
	impostor := fixtures.ReplicaSet("imp", "uid-imp", "someone-else", fixtures.PodSpec(nil, nil))
	other := fixtures.ReplicaSet("x", "uid-x", fixtures.RolloutUID, fixtures.PodSpec(nil, nil))
	other.Labels = map[string]string{"app": "other"}
	items := []appsv1.ReplicaSet{*newer, *impostor, *older, *other}
	w := Workload{Kind: KindRollout, Namespace: testNS, Name: "web", UID: fixtures.RolloutUID, Selector: fixtures.Rollout("h1").Spec.Selector}
	rss, err := OwnReplicaSets(items, w)
	if err != nil || len(rss) != 2 || rss[0].Name != "web-h1" || rss[1].Name != "web-h2" {
		t.Errorf("own ReplicaSets %v %v", rss, err)
	}
	w.Selector = nil
	if _, err := OwnReplicaSets(items, w); !IsPermanent(err) || !strings.Contains(err.Error(), "has no spec.selector") {
		t.Errorf("no selector: %v", err)
	}
	w.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}
	if _, err := OwnReplicaSets(items, w); !IsPermanent(err) || !strings.Contains(err.Error(), "spec.selector is invalid") {
		t.Errorf("invalid selector: %v", err)
	}
}

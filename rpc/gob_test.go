package rpc_test

import (
	"bytes"
	"encoding/gob"
	"testing"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutshash "github.com/argoproj/argo-rollouts/utils/hash"
	corev1 "k8s.io/api/core/v1"
)

// TestRolloutTemplateIsLossyOverRPC records why the step finds its target by
// status.currentPodHash and not by FindNewReplicaSet on the Rollout it receives: net/rpc's gob
// drops zero values, pointers to them included, so a template with
// automountServiceAccountToken: false arrives without it and hashes differently from the
// ReplicaSet the controller created.
func TestRolloutTemplateIsLossyOverRPC(t *testing.T) {
	no := false
	ro := v1alpha1.Rollout{Spec: v1alpha1.RolloutSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "app", Image: "web:1"}}}}}}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(&ro); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.Rollout
	if err := gob.NewDecoder(&buf).Decode(&got); err != nil {
		t.Fatal(err)
	}
	before, after := rolloutshash.ComputePodTemplateHash(&ro.Spec.Template, nil), rolloutshash.ComputePodTemplateHash(&got.Spec.Template, nil)
	if before == after {
		t.Fatalf("the template survived gob (hash %s): FindNewReplicaSet could be used in step mode", before)
	}
	t.Logf("hash before gob %s, after %s (automountServiceAccountToken %v → %v)", before, after, *ro.Spec.Template.Spec.AutomountServiceAccountToken, got.Spec.Template.Spec.AutomountServiceAccountToken)
}

package cluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The pieces of FakeKubelet.RunImage that turn a pod's container into a command line, as the
// kubelet does: $(VAR) from the container's env, $$ for a literal $, unknown references kept.
func TestPodRunnerExpansion(t *testing.T) {
	env := map[string]string{"POD_NAMESPACE": "team-a", "X": "1"}
	for in, want := range map[string]string{
		"$(POD_NAMESPACE)":    "team-a",
		"-n=$(POD_NAMESPACE)": "-n=team-a",
		"$(UNKNOWN)":          "$(UNKNOWN)",
		"$$(X)":               "$(X)",
		"a$(X)b$(X)":          "a1b1",
		"$(X":                 "$(X",
		"plain":               "plain",
	} {
		if got := expandVars(in, env); got != want {
			t.Errorf("expandVars(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"ghcr.io/configmap-attacher/configmap-attacher:v0.1.0":     "ghcr.io/configmap-attacher/configmap-attacher",
		"ghcr.io/configmap-attacher/configmap-attacher@sha256:abc": "ghcr.io/configmap-attacher/configmap-attacher",
		"localhost:5000/img":     "localhost:5000/img",
		"localhost:5000/img:tag": "localhost:5000/img",
	} {
		if got := imageRepository(in); got != want {
			t.Errorf("imageRepository(%q) = %q, want %q", in, got, want)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team-a",
		Labels: map[string]string{"batch.kubernetes.io/job-name": "j"}}}
	for path, want := range map[string]string{
		"metadata.namespace": "team-a", "metadata.name": "p",
		"metadata.labels['batch.kubernetes.io/job-name']": "j", "metadata.labels['missing']": "",
	} {
		if got := fieldValue(pod, path); got != want {
			t.Errorf("fieldValue(%q) = %q, want %q", path, got, want)
		}
	}
}

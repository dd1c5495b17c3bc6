// Package newrs finds the ReplicaSet the Rollouts controller itself calls new for a Rollout
// read from the API, with argo-rollouts' own helper. It is apart from the core because that
// helper links k8s.io/kubernetes/pkg/controller (and its informers and scheme registrations),
// which the step plugin, told the ReplicaSet by the controller (status.currentPodHash), must not
// carry into the Rollouts controller's pod; the command line and audit import it.
package newrs

import (
	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	replicasetutil "github.com/argoproj/argo-rollouts/utils/replicaset"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// OfRollout is the ReplicaSet the Rollouts controller itself calls new for the Rollout as
// read from the API (the command line, audit): argo-rollouts' FindNewReplicaSet (the template
// hash with status.collisionCount, then the old hash, then template equality, which is what
// finds a re-used ReplicaSet after undo). A Rollout without a template (an unresolved
// workloadRef) falls back to the ReplicaSet that status.currentPodHash names.
func OfRollout(ro *v1alpha1.Rollout, rss []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	if len(ro.Spec.Template.Spec.Containers) == 0 {
		return plugin.ByPodHash(rss, ro.Status.CurrentPodHash)
	}
	return replicasetutil.FindNewReplicaSet(ro, rss)
}

package controller

// Adoption: which objects are the controller's candidates. An opted-in object is adopted when
// a live user of a kind -workloads names uses it; once adopted, every user owns it.

import (
	"github.com/configmap-attacher/configmap-attacher/plugin"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// adopts reports whether a user of this kind adopts the objects it uses (Config.Adopting).
func (c *Controller) adopts(kind string) bool {
	return c.cfg.Adopting == nil || c.cfg.Adopting[kind]
}

// watchedUser reports whether a live user of a kind -workloads names uses k: only then is the
// object adopted, the controller's candidate (-workloads picks whose config is adopted; every
// user of an adopted object owns it, whatever its kind, when the core decides the owners).
func (c *Controller) watchedUser(k Key) bool {
	sc := c.scopeOf(k.Namespace)
	if sc == nil {
		return false
	}
	items, _ := sc.rs.GetIndexer().ByIndex(byRef, k.String())
	for _, it := range items {
		if rs, ok := it.(*cachedReplicaSet); ok && rs.DeletionTimestamp == nil && c.workloadOf(rs.OwnerReferences) != nil {
			return true
		}
	}
	// Every other kind of user adopts too: a StatefulSet's or DaemonSet's revision, a Job, a
	// CronJob, a bare Pod, a Deployment's current template (every user owns).
	if sc.revisions != nil {
		items, _ := sc.revisions.GetIndexer().ByIndex(byRef, k.String())
		for _, it := range items {
			if r, ok := it.(*cachedRevision); ok {
				if ref := metav1.GetControllerOfNoCopy(r); ref != nil && c.adopts(ref.Kind) {
					return true
				}
			}
		}
	}
	for _, inf := range sc.templates {
		items, _ := inf.GetIndexer().ByIndex(byRef, k.String())
		for _, it := range items {
			if t, ok := it.(*cachedTemplate); ok && t.DeletionTimestamp == nil && (t.Kind != "Pod" || t.Controller == nil) && c.adopts(t.Kind) {
				return true
			}
		}
	}
	for _, w := range sc.templatedWorkloads() {
		if w.kind == plugin.KindDeployment && !c.cfg.Deployments || w.kind == plugin.KindRollout && !c.cfg.Rollouts {
			continue
		}
		if items, _ := w.inf.GetIndexer().ByIndex(byRef, k.String()); len(items) > 0 {
			return true
		}
	}
	return false
}

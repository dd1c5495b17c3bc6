package controller

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// Crowds: the anchor that stands for one object's Jobs and bare Pods while they are more than
// plugin.MaxUserOwners (plugin.CrowdAnchor), so that its owner list stays bounded. One sync
// per object (a queue key of kind "workload", Name "Crowd/<kind>.<name>"): create the crowd
// while the rule calls for it, delete it when plugin.AnchorVerdict lets it go (once its Jobs
// and Pods are few again and each owns the object itself, or the object is gone).

// crowdNeeded reports whether object k, opted in and adopted, has more Jobs and Pods than may
// own it one by one.
func (c *Controller) crowdNeeded(k Key) bool {
	m := c.object(k)
	return c.optedIn(m) && c.watchedUser(k) && plugin.CrowdNeeded(view{c, k.Namespace}.UsersOf(k.object()))
}

// syncCrowd creates or deletes the crowd anchor of the object the name stands for.
func (c *Controller) syncCrowd(ctx context.Context, k Key, name string) (string, error) {
	ns := k.Namespace
	sc := c.scopeOf(ns)
	o, ok := plugin.CrowdObject(name)
	if sc == nil || sc.revisions == nil || !ok {
		return "noop", nil
	}
	log := c.log.WithFields(logrus.Fields{"namespace": ns, "object": o.String()})
	needed := c.crowdNeeded(Key{ns, o.Kind, o.Name})
	cur := plugin.CrowdAnchor(o)
	result := "noop"
	if needed && sc.anchor(ns, cur) == nil && !c.cfg.DryRun {
		created, err := c.createAnchor(ctx, ns, cur)
		if err != nil {
			return "error", err
		}
		if created {
			log.WithField("anchor", cur.ObjectName()).Infof("created the anchor that stands for the object's Jobs and Pods (more than %d)", plugin.MaxUserOwners)
			result = "patched"
		}
	}
	items, _ := sc.revisions.GetIndexer().ByIndex(byAnchorOf, ns+"/"+cur.Workload())
	for _, it := range items {
		r, ok := it.(*cachedRevision)
		if !ok || r.Anchor == nil || r.DeletionTimestamp != nil {
			continue
		}
		st := plugin.AnchorState{Crowd: true, Current: needed && r.Anchor.Equal(cur), WorkloadExists: true}
		if !st.Current {
			st.Foreign = c.foreignRefs(ns, r)
			st.Unsettled = c.unsettled(sc, ns, r)
		}
		del, after := plugin.AnchorVerdict(st, c.cfg.AnchorGrace)
		if !del {
			if after > 0 {
				c.enqueueWorkload(ns, plugin.CrowdKind, name, after)
			}
			continue
		}
		if c.cfg.DryRun {
			log.WithField("anchor", r.Name).Info("dry run: would delete the crowd anchor")
			continue
		}
		if err := c.deleteAnchor(ctx, ns, r); err != nil {
			return "error", err
		}
		log.WithField("anchor", r.Name).Info("deleted the crowd anchor: the object's Jobs and Pods own it one by one, or it is gone")
		result = "patched"
	}
	return result, nil
}

// crowdLook is how long after an object's reconcile its existing crowd anchor is looked at:
// the reconciles of a busy object (every Job that comes or goes) share one look, and a sync
// that finds the object unsettled and queues it again cannot spin.
const crowdLook = time.Second

// crowdDue queues the crowd sync of object k when its crowd anchor is due: at once when the
// reconcile waits for it to be created, a moment later when it exists (it may go).
func (c *Controller) crowdDue(k Key, waiting bool) {
	sc := c.scopeOf(k.Namespace)
	if sc == nil || sc.revisions == nil {
		return
	}
	name := plugin.CrowdName(k.object())
	switch {
	case sc.anchor(k.Namespace, plugin.CrowdAnchor(k.object())) != nil:
		c.enqueueWorkload(k.Namespace, plugin.CrowdKind, name, crowdLook)
	case waiting && c.crowdNeeded(k):
		c.enqueueWorkload(k.Namespace, plugin.CrowdKind, name, 0)
	}
}

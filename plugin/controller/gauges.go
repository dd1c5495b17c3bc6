package controller

import (
	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// The unowned and lost gauges, recomputed from the caches every GaugeInterval on the leader:
// the same counts as audit's gaps (plugin.Gaps), without a request.

// UpdateGauges recomputes the unowned and lost gauges from the caches (no request).
func (c *Controller) UpdateGauges() {
	unowned, lost := c.gaps()
	c.mu.Lock()
	defer c.mu.Unlock()
	for ns := range unowned {
		c.gaugeNamespaces[ns] = true
	}
	for ns := range lost {
		c.gaugeNamespaces[ns] = true
	}
	for ns := range c.gaugeNamespaces {
		c.m.Unowned.WithLabelValues(ns).Set(float64(unowned[ns]))
		c.m.Lost.WithLabelValues(ns).Set(float64(lost[ns]))
	}
}

// gaps counts, per namespace, the unowned objects (opted in, referenced by a live watched
// ReplicaSet, owned by no ReplicaSet) and the lost references (a live watched ReplicaSet
// requires an object that does not exist), with plugin.Gaps: the figures of audit's summary.
// Scopes whose caches have not synced are not counted.
func (c *Controller) gaps() (unowned, lost map[string]int) {
	unowned, lost = map[string]int{}, map[string]int{}
	for _, sc := range c.scopes {
		if !scopeSynced(sc) {
			continue // incomplete caches: every object would look missing
		}
		byNS := map[string][]plugin.GapReplicaSet{}
		for _, it := range sc.rs.GetIndexer().List() {
			rs, ok := it.(*cachedReplicaSet)
			if !ok || len(rs.Refs) == 0 || c.workloadOf(rs.OwnerReferences) == nil || c.controllerState(sc, rs) != plugin.ControllerLive {
				// No watched workload controls it, or its workload is gone (audit counts the
				// ReplicaSets of workloads that exist): the garbage collector deletes it.
				continue
			}
			byNS[rs.Namespace] = append(byNS[rs.Namespace], plugin.GapReplicaSet{Live: rs.DeletionTimestamp == nil, Refs: rs.Refs, Required: rs.Required})
		}
		for ns, rss := range byNS {
			u, l := plugin.Gaps(rss, func(o plugin.Object) plugin.GapObject {
				m := c.object(Key{ns, o.Kind, o.Name})
				if m == nil {
					return plugin.GapObject{}
				}
				return plugin.GapObject{Exists: true, OptedIn: c.optedIn(m), ReplicaSetOwned: m.RSOwned}
			})
			if u > 0 {
				unowned[ns] = u
			}
			if l > 0 {
				lost[ns] = l
			}
		}
	}
	return unowned, lost
}

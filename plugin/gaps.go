package plugin

// The two continuous-audit figures, unowned and lost, for audit's summary and the
// controller's gauges. Pure: no request.

// GapReplicaSet is what Gaps needs of one ReplicaSet of a watched or audited workload.
type GapReplicaSet struct {
	Live bool
	// Refs are the objects its pod template references, Required those its pods cannot start
	// without (RequiredReferences).
	Refs, Required []Object
}

// GapObject is an object's state as Gaps needs it.
type GapObject struct {
	Exists, OptedIn, ReplicaSetOwned bool
}

// Gaps counts one namespace's two continuous-audit figures, for audit's summary and the
// controller mode's gauges alike: unowned, the distinct opted-in objects that a live
// ReplicaSet references and that no ReplicaSet owns (never collected; a prune deletes them);
// and lost, the references from a live ReplicaSet to a required object that does not exist
// (each is a revision whose pods, or a rollback to it, would fail).
func Gaps(rss []GapReplicaSet, lookup func(Object) GapObject) (unowned, lost int) {
	seen := map[Object]bool{}
	for _, rs := range rss {
		if !rs.Live {
			continue
		}
		for _, o := range rs.Refs {
			if seen[o] {
				continue
			}
			seen[o] = true
			if g := lookup(o); g.Exists && g.OptedIn && !g.ReplicaSetOwned {
				unowned++
			}
		}
		for _, o := range rs.Required {
			if !lookup(o).Exists {
				lost++
			}
		}
	}
	return unowned, lost
}

package audit

import (
	"fmt"
	"sort"
	"strings"

	"github.com/configmap-attacher/configmap-attacher/plugin"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// findings are the problems of one classified object: lost, unowned, and one stray or
// legacy finding per owner reference to a live ReplicaSet of the workload, each with the
// command that repairs it by hand.
func (a *Auditor) findings(c classified, aw auditedWorkload, h *history) []Finding {
	ns, o, m := aw.w.Namespace, c.obj, c.meta
	var fs []Finding
	if len(c.lostBy) > 0 {
		fs = append(fs, lostFinding(ns, c))
	}
	if c.candidate && !plugin.HasReplicaSetOwner(m.owners) {
		why := "named in a configmap-attacher step"
		if c.view.OptedIn {
			why = "opted in (" + a.optInLabel(m, aw.stepSels) + ")"
		}
		msg := fmt.Sprintf("%s, but no ReplicaSet owns it: it will never be garbage-collected%s", why, otherOwners(m.owners))
		if len(c.missing) > 0 {
			msg += fmt.Sprintf("; -fix adds %s, which %s it", joinNames(rsNames(c.missing)), verb(len(c.missing), "uses", "use"))
		} else {
			msg += fmt.Sprintf("; no ReplicaSet of %s uses it: if nothing else does, delete it by hand", aw.w)
		}
		fs = append(fs, Finding{Type: FindingUnowned, Namespace: ns, Kind: o.Kind, Name: o.Name, index: -1, Message: msg})
	}
	for i, ref := range m.owners {
		li, ok := h.byUID[ref.UID]
		if !ok || ref.Kind != "ReplicaSet" {
			continue
		}
		if f, ok := ownerFinding(ns, c, i, ref, h.live[li]); ok {
			fs = append(fs, f)
		}
	}
	return fs
}

func lostFinding(ns string, c classified) Finding {
	n := len(c.lostBy)
	consequence := fmt.Sprintf("a rollback to %s, or a restart of %s pods, would fail with CreateContainerConfigError", verb(n, "that ReplicaSet", "those ReplicaSets"), verb(n, "its", "their"))
	if c.lostCurrent {
		consequence = "pods of the current ReplicaSet cannot start (CreateContainerConfigError)"
	}
	return Finding{Type: FindingLost, Namespace: ns, Kind: c.obj.Kind, Name: c.obj.Name, index: -1,
		Message: fmt.Sprintf("%s %s it, but it does not exist: %s. Recreate it from that revision's manifests",
			strings.Join(c.lostBy, ", "), verb(n, "references", "reference"), consequence)}
}

// ownerFinding judges owner reference i, to the live ReplicaSet l: legacy (controller: true),
// stray (l does not use the object), or nothing.
func ownerFinding(ns string, c classified, i int, ref metav1.OwnerReference, l rsRefs) (Finding, bool) {
	o, rs := c.obj, l.rs
	uses := l.refs.Has(o)
	others := otherUsers(c.view.UsedBy, rs.Name)
	f := Finding{Namespace: ns, Kind: o.Kind, Name: o.Name, ReplicaSet: rs.Name, index: i}
	switch {
	case ref.Controller != nil && *ref.Controller && uses:
		f.Type = FindingLegacy
		f.Message = fmt.Sprintf("owner reference %d is the original tool's controller reference to ReplicaSet %s (which uses it): configmap-attacher writes controller: false, so that several ReplicaSets can own an object. Turn it into a plain owner reference by hand", i, rs.Name)
		f.Command = ownerRefCommand(o, ns, i, ref.UID, `{"op":"replace","path":"/metadata/ownerReferences/%d/controller","value":false}`)
	case ref.Controller != nil && *ref.Controller:
		f.Type = FindingLegacy
		f.Message = fmt.Sprintf("owner reference %d is the original tool's controller reference to ReplicaSet %s, which does not use it (the wrong ReplicaSet)", i, rs.Name)
		f.Message += removalAdvice(others, c.view, rs.Name)
		f.Command = ownerRefCommand(o, ns, i, ref.UID, `{"op":"remove","path":"/metadata/ownerReferences/%d"}`)
	case !uses:
		f.Type = FindingStray
		f.Message = fmt.Sprintf("owner reference %d is ReplicaSet %s, which does not use it: it keeps the object until that ReplicaSet is deleted", i, rs.Name)
		f.Message += removalAdvice(others, c.view, rs.Name)
		f.Command = ownerRefCommand(o, ns, i, ref.UID, `{"op":"remove","path":"/metadata/ownerReferences/%d"}`)
	default:
		return f, false
	}
	return f, true
}

// removalAdvice warns, for a reference about to be removed by hand, when the object would
// then be left without a ReplicaSet owner although other ReplicaSets use it.
func removalAdvice(others []string, oa Object, rs string) string {
	var missing []string
	for _, n := range oa.MissingOwners {
		if n != rs {
			missing = append(missing, n)
		}
	}
	switch {
	case len(missing) > 0 && oa.Fixable:
		return fmt.Sprintf(". %s %s it without owning it: run audit -fix first (it adds them), then remove the reference by hand", joinNames(missing), verb(len(missing), "uses", "use"))
	case len(missing) > 0:
		return fmt.Sprintf(". %s %s it without owning it, and it is not opted in: the object is deleted with its other owners. Label it %s=true and run audit -fix first, then remove the reference by hand", joinNames(missing), verb(len(missing), "uses", "use"), plugin.DefaultDiscoverLabel)
	case len(others) == 0:
		return ". No ReplicaSet of the Rollout uses it: remove the reference by hand only if the object is to be kept (without it, nothing collects the object)"
	default:
		return ". Remove it by hand"
	}
}

func otherUsers(usedBy []string, rs string) []string {
	var out []string
	for _, n := range usedBy {
		if n != rs {
			out = append(out, n)
		}
	}
	return out
}

// ownerRefCommand is a kubectl JSON patch that first tests that owner reference i is still
// uid (the garbage collector edits the list too), then applies op.
func ownerRefCommand(o plugin.Object, ns string, i int, uid types.UID, op string) string {
	resource := "configmap"
	if o.Kind == plugin.KindSecret {
		resource = "secret"
	}
	return fmt.Sprintf(`kubectl patch %s %s -n %s --type=json -p '[{"op":"test","path":"/metadata/ownerReferences/%d/uid","value":"%s"},%s]'`,
		resource, o.Name, ns, i, uid, fmt.Sprintf(op, i))
}

func otherOwners(owners []metav1.OwnerReference) string {
	var s []string
	for _, r := range owners {
		if r.Kind != "ReplicaSet" {
			s = append(s, r.Kind+" "+r.Name)
		}
	}
	if len(s) == 0 {
		return ""
	}
	return " with the Rollout's history (only with its other owners: " + strings.Join(s, ", ") + ")"
}

func rsNames(rss []*appsv1.ReplicaSet) []string {
	out := make([]string, len(rss))
	for i, rs := range rss {
		out[i] = rs.Name
	}
	return out
}

func joinNames(names []string) string {
	if len(names) == 1 {
		return "ReplicaSet " + names[0]
	}
	return "ReplicaSets " + strings.Join(names, ", ")
}

func rsLabel(rs, current *appsv1.ReplicaSet) string {
	var notes []string
	if rs == current {
		notes = append(notes, "current")
	}
	if r := rs.Annotations[plugin.RevisionAnnotation]; r != "" {
		notes = append(notes, "revision "+r)
	}
	if len(notes) == 0 {
		return "ReplicaSet " + rs.Name
	}
	return fmt.Sprintf("ReplicaSet %s (%s)", rs.Name, strings.Join(notes, ", "))
}

func verb(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// sortFindings orders findings by object, lost and unowned first, then the owner-reference
// findings by descending index: their commands can then be run in the order shown, since
// removing a later entry does not move an earlier one.
func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		x, y := fs[i], fs[j]
		if x.Namespace != y.Namespace {
			return x.Namespace < y.Namespace
		}
		if x.Kind != y.Kind {
			return x.Kind < y.Kind
		}
		if x.Name != y.Name {
			return x.Name < y.Name
		}
		rank := func(f Finding) int {
			switch f.Type {
			case FindingLost:
				return 0
			case FindingUnowned:
				return 1
			}
			return 2
		}
		if rank(x) != rank(y) {
			return rank(x) < rank(y)
		}
		return x.index > y.index
	})
}

package audit

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

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
	if (c.candidate || c.refused != "") && !plugin.HasReplicaSetOwner(m.owners) {
		why := "named in a configmap-attacher step"
		if c.view.OptedIn {
			why = "opted in (" + a.optInLabel(m, aw.stepSels) + ")"
		}
		msg := fmt.Sprintf("%s, but no ReplicaSet owns it: it will never be garbage-collected%s", why, otherOwners(m.owners))
		if c.refused != "" {
			msg += "; -fix leaves it alone: " + c.refused
		} else if len(c.missing) > 0 {
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
		return fmt.Sprintf(". %s %s it without owning it, and it is not opted in: the object is deleted with its other owners. Label it %s=true and run audit -fix first, then remove the reference by hand", joinNames(missing), verb(len(missing), "uses", "use"), plugin.OptInLabel)
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

// AddShared adds to the report the findings that the namespaces' other users make (every user
// counts, plugin/users.go): per namespace one read of its users (plugin.Attacher.ReadUsage,
// the same read Fix makes before it writes), then, for each object of a workload that
// configmap-attacher is concerned with (opted in, named in a step, or owned by a ReplicaSet),
// a FindingShared when a user that cannot own it (a StatefulSet, DaemonSet, Job, CronJob, bare
// Pod, or a ReplicaSet of a controller kind whose existence is not checked) also uses it. Such
// an object is not fixable: the core writes nothing to it. A namespace whose users cannot be
// read gets a warning (rep.Warnings) instead. Without clients (an Auditor built without New)
// it does nothing. Run calls it last (so that the report shows the state after -fix).
func (a *Auditor) AddShared(ctx context.Context, rep *Report) {
	at := a.Attacher
	if at == nil || at.Client == nil || at.Meta == nil {
		return
	}
	usage := map[string]*plugin.NamespaceUsage{}
	failed := map[string]bool{}
	changed := false
	// The controllers' Leases, read once, when some object is shared beyond its workload.
	var leases []plugin.ControllerLease
	read := false
	now := time.Now()
	maintained := func(kind, ns string, lbl map[string]string) (string, []string) {
		if !read {
			var warnings []string
			leases, warnings = at.ReadLeases(ctx, a.ControllerLeases)
			rep.Warnings = append(rep.Warnings, warnings...)
			read = true
		}
		return plugin.MaintainedBy(leases, kind, ns, lbl, now)
	}
	for _, list := range [][]Workload{rep.Rollouts, rep.Deployments} {
		for wi := range list {
			w := &list[wi]
			if w.Error != "" || failed[w.Namespace] {
				continue
			}
			u := usage[w.Namespace]
			if u == nil {
				var err error
				if u, err = at.ReadUsage(ctx, w.Namespace); err != nil {
					failed[w.Namespace] = true
					msg := fmt.Sprintf("namespace %s: objects also used by StatefulSets, DaemonSets, Jobs, CronJobs or bare Pods are not reported (-fix writes nothing there): %v", w.Namespace, err)
					a.log().Warn(msg)
					rep.Warnings = append(rep.Warnings, msg)
					continue
				}
				usage[w.Namespace] = u
			}
			changed = markShared(w, u, maintained) || changed
		}
	}
	// An unattributed object (no audited workload uses it) that another user does use must not
	// be called deletable.
	for i := range rep.Unattributed {
		f := &rep.Unattributed[i]
		u := usage[f.Namespace]
		if u == nil {
			continue
		}
		if users := blockers(u.UsersOf(plugin.Object{Kind: f.Kind, Name: f.Name})); len(users) > 0 {
			f.Message = fmt.Sprintf("opted in, and nothing owns it, but %s %s it: keep it. The controller (configmap-attacher controller) makes %s owners of it; the step, the Job and -fix leave %s to the controller",
				strings.Join(users, ", "), verb(len(users), "uses", "use"), verb(len(users), "that user's revision, Job or Pod", "those users' revisions, Jobs or Pods"), verb(len(users), "that user", "those users"))
			changed = true
		}
	}
	if changed {
		rep.Summary = Counts{}
		rep.summarize()
	}
}

// markShared adds the shared findings of one workload, and marks its shared objects (and
// their edges) not fixable.
func markShared(w *Workload, u *plugin.NamespaceUsage, maintained func(kind, ns string, lbl map[string]string) (string, []string)) bool {
	changed := false
	wl := plugin.Workload{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name, UID: w.UID}
	for i := range w.Objects {
		o := &w.Objects[i]
		if !o.Exists || !(o.OptedIn || o.NamedInStep || o.Fixable || hasReplicaSetOwner(o.Owners)) {
			continue
		}
		users := u.UsersOf(o.Object())
		b := plugin.Blocked{Object: o.Object(), Users: blockers(users)}
		if sh := plugin.SharingOf(users, wl); len(sh.Unownable) == 0 {
			// Users outside the workload: a live controller maintains their owners, or nothing
			// does (the step, the Job and -fix refuse it).
			if len(sh.Others) == 0 {
				continue
			}
			lease, why := maintained(w.Kind, w.Namespace, o.labels)
			if lease != "" {
				continue
			}
			b = plugin.Blocked{Object: o.Object(), Users: sh.Others, Unmaintained: why, Workload: wl.String()}
		}
		changed = true
		o.SharedWith = b.Users
		o.Fixable = false
		msg := b.Message() + "; -fix leaves it alone"
		if hasReplicaSetOwner(o.Owners) {
			msg += ". It has ReplicaSet owners already: the garbage collector deletes it with the last of them although those users still use it; stop sharing it (give them an object of their own), or remove its ReplicaSet owner references by hand"
		}
		w.Findings = append(w.Findings, Finding{Type: FindingShared, Namespace: w.Namespace, Kind: o.Kind, Name: o.Name, index: -1, Message: msg})
		for fi := range w.Findings {
			f := &w.Findings[fi]
			if f.Type == FindingUnowned && f.Kind == o.Kind && f.Name == o.Name {
				if before, _, ok := strings.Cut(f.Message, "; -fix adds "); ok {
					f.Message = before + "; -fix leaves it alone: it is shared (see " + strings.ToUpper(FindingShared) + ")"
				}
			}
		}
		for ri := range w.ReplicaSets {
			for ei := range w.ReplicaSets[ri].Objects {
				e := &w.ReplicaSets[ri].Objects[ei]
				if e.Kind == o.Kind && e.Name == o.Name && e.Status == EdgeMissingOwner {
					e.Fixable, e.Shared = false, true
				}
			}
		}
	}
	if changed {
		sortFindings(w.Findings)
	}
	return changed
}

// blockers are the users of an object that cannot own it, named as the core names them.
func blockers(u plugin.Users) []string { return plugin.Blockers(u) }

func hasReplicaSetOwner(owners []Owner) bool {
	for _, o := range owners {
		if o.Kind == "ReplicaSet" && strings.HasPrefix(o.APIVersion, "apps/") {
			return true
		}
	}
	return false
}

package plugin

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Every user-facing message of the core: what a run attached, skipped, discovered or
// refused, and why, with the fix.

// forbiddenMessage says which rule refused the patch: an admission webhook, the
// OwnerReferencesPermissionEnforcement admission plugin, or RBAC.
func forbiddenMessage(objs []Object, apiMsg, ns, rbacHint string) string {
	if name, ok := webhookName(apiMsg); ok {
		return fmt.Sprintf("the admission webhook %q denied the owner reference on %s: %s (this is the webhook's policy, not RBAC: ask its owner to allow metadata.ownerReferences changes by this service account)", name, joinObjects(objs), apiMsg)
	}
	if strings.Contains(apiMsg, "can't delete") || strings.Contains(apiMsg, "cannot set blockOwnerDeletion") {
		// The OwnerReferencesPermissionEnforcement admission plugin (OpenShift has it on) lets
		// only users who may delete an object change its owner references.
		return fmt.Sprintf("forbidden to change the owner references of %s: the OwnerReferencesPermissionEnforcement admission plugin requires verb delete on %s in namespace %s in addition to patch (apply examples/rbac-ownerreferences-enforcement.yaml): %s",
			joinObjects(objs), resourcesOf(objs), ns, apiMsg)
	}
	return fmt.Sprintf("forbidden to patch %s: %s; the service account needs verb patch on %s in namespace %s (apply %s; on clusters with the OwnerReferencesPermissionEnforcement admission plugin, such as OpenShift, also delete: examples/rbac-ownerreferences-enforcement.yaml)",
		joinObjects(objs), apiMsg, resourcesOf(objs), ns, rbacHint)
}

// webhookName finds the webhook in an apiserver denial: `admission webhook "x.y" denied the request: ...`.
func webhookName(msg string) (string, bool) {
	const prefix = `admission webhook "`
	i := strings.Index(msg, prefix)
	if i < 0 {
		return "", false
	}
	rest := msg[i+len(prefix):]
	j := strings.Index(rest, `"`)
	if j < 0 {
		return "", false
	}
	return rest[:j], true
}

// describeAPIError words an error for a warning about an object nobody listed.
func describeAPIError(err error) string {
	switch {
	case isNotFound(err):
		return "it no longer exists (the garbage collector or a prune removed it after the list)"
	case isForbidden(err):
		return "forbidden: " + apiMessage(err)
	default:
		return apiMessage(err)
	}
}

// message says what was attached, skipped and discovered.
func (r Result) message() string {
	var msg string
	if r.Target != nil {
		msg = successMessage(r.Target.Name, append([]Object(nil), r.Listed...), r.Skipped)
	}
	var disc []Write
	for _, w := range r.Added {
		if !w.Listed {
			disc = append(disc, w)
		}
	}
	if len(disc) > 0 || r.Owned > 0 || (r.Target == nil) {
		d := discoverMessage(disc, r.Owned)
		if msg == "" {
			msg = d
		} else {
			msg += "; " + d
		}
	}
	msg += r.handedText() + r.blockedText()
	for _, w := range r.Warnings {
		msg += "; warning: " + w
	}
	return msg
}

// blockedText reports the objects left alone because a user cannot own them.
func (r Result) blockedText() string {
	var s string
	for _, b := range r.Blocked {
		s += "; left alone: " + b.Message()
	}
	return s
}

func discoverMessage(disc []Write, owned int) string {
	if len(disc) == 0 {
		return fmt.Sprintf("discover: every opted-in object in use already has its owners (%d)", owned)
	}
	return fmt.Sprintf("discover: added %d owner reference(s): %s", countRefs(disc), writesString(disc))
}

func (r Result) dryRunMessage() string {
	msg := "dry run, nothing written: "
	var listed, disc []Write
	for _, w := range r.Added {
		if w.Listed {
			listed = append(listed, w)
		} else {
			disc = append(disc, w)
		}
	}
	switch {
	case len(listed) > 0:
		msg += "would add " + writesString(listed)
	case r.Target != nil:
		msg += "no listed object lacks an owner it needs (target ReplicaSet " + r.Target.Name + ")"
	default:
		msg += "nothing listed"
	}
	if len(r.NotFound) > 0 {
		msg += fmt.Sprintf("; not found (the run would fail): %s", joinObjects(r.NotFound))
	}
	if len(disc) > 0 {
		msg += fmt.Sprintf("; discover would add %d owner reference(s): %s", countRefs(disc), writesString(disc))
	}
	target := ""
	if r.Target != nil {
		target = r.Target.Name
	}
	for _, sk := range r.Skipped {
		msg += "; " + skipMessage(sk, target)
	}
	return msg + r.handedText() + r.blockedText()
}

func countRefs(ws []Write) int {
	n := 0
	for _, w := range ws {
		n += len(w.Owners)
	}
	return n
}

// writesString summarises writes, e.g. "ConfigMap a ← web-1, web-2; Secret b ← web-1".
func writesString(ws []Write) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprintf("%s ← %s", w.Object, strings.Join(w.Names(), ", "))
	}
	return strings.Join(parts, "; ")
}

func skipMessage(sk Skip, target string) string {
	switch sk.Reason {
	case SkipRollback:
		return fmt.Sprintf("skipped %s: not used by %s but by %s, created after it (a rollback re-ran a newer step list)", sk.Object, target, strings.Join(sk.UsedBy, ", "))
	case SkipOlder:
		return fmt.Sprintf("skipped %s: not used by %s but only by the older %s (an older revision's object in the list; left as it is)", sk.Object, target, strings.Join(sk.UsedBy, ", "))
	case SkipOptIn:
		return fmt.Sprintf("skipped %s: it does not match the opt-in selector %s the administrator requires (--require-opt-in)", sk.Object, sk.optIn())
	default:
		who := target
		if who == "" {
			who = strings.Join(sk.UsedBy, ", ")
		}
		return fmt.Sprintf("skipped %s: %s uses it only as a credential (imagePullSecrets or a volume's secretRef), which is shared by nature; give it a label matching the opt-in selector %s if it is revisioned", sk.Object, who, sk.optIn())
	}
}

// SkipMessage words a skip for a report without a target (audit -fix).
func SkipMessage(sk Skip) string { return skipMessage(sk, "") }

func (sk Skip) optIn() string {
	if sk.OptIn == "" {
		return OptInSelector().String()
	}
	return sk.OptIn
}

// blockedMessage refuses an object that a user that cannot own it also uses.
func blockedMessage(b Blocked) string {
	if b.Unmaintained != nil {
		return unmaintainedMessage(b)
	}
	return fmt.Sprintf("%s is also used by %s; configmap-attacher only manages config used by ReplicaSets alone (an owner reference would let the garbage collector delete it under %s)",
		b.Object, strings.Join(b.Users, ", "), verb(len(b.Users), "that user", "those users"))
}

// unmaintainedMessage refuses a shared object that no live controller maintains, e.g.
// "ConfigMap app-config-7f9c2 is also used by ReplicaSet worker-5d4f (of Deployment worker),
// outside Rollout shop/api: no live configmap-attacher controller maintains it (Lease
// configmap-attacher/configmap-attacher: not found …), and owner references from Rollout
// shop/api's ReplicaSets alone would let the garbage collector delete it under that user once
// that history moves on. Fix: …".
func unmaintainedMessage(b Blocked) string {
	who := b.Workload
	if who == "" {
		who = "one workload"
	}
	return fmt.Sprintf("%s is also used by %s, outside %s: no live configmap-attacher controller maintains it (%s), and owner references "+
		"from %s's ReplicaSets alone would let the garbage collector delete it under %s once that history moves on. "+
		"Fix: run the controller mode with leader election over this namespace, with %s matching its -selector, "+
		"name its Lease in -controller-lease and grant get on that Lease; or give each workload its own config",
		b.Object, strings.Join(b.Users, ", "), who, strings.Join(b.Unmaintained, "; "), who,
		verb(len(b.Users), "that user", "those users"), b.Object)
}

// leaseForbiddenWarning names the grant a run lacks to find the controller.
func leaseForbiddenWarning(ref LeaseRef, rbacHint string) string {
	return fmt.Sprintf("may not get Lease %s: config shared with other workloads is refused as if no controller ran; grant get on leases.coordination.k8s.io %s in namespace %s (resourceNames) to this service account (%s)",
		ref, ref.Name, ref.Namespace, rbacHint)
}

// revisionsForbiddenWarning names the grant a run lacks to read StatefulSets' and DaemonSets'
// revisions: it reads their Pods' specs instead, which costs more in a busy namespace.
func revisionsForbiddenWarning(ns, rbacHint string) string {
	return fmt.Sprintf("may not list controllerrevisions.apps in namespace %s: the specs of the StatefulSets' and DaemonSets' Pods are read instead (more to read in a busy namespace); grant list on controllerrevisions.apps to this service account (%s)", ns, rbacHint)
}

// handedText names the shared objects whose other users a live controller maintains.
func (r Result) handedText() string {
	var s string
	unread := map[string][]string{}
	var leases []string
	for _, h := range r.Handed {
		if len(h.Users) == 0 {
			if _, ok := unread[h.Lease]; !ok {
				leases = append(leases, h.Lease)
			}
			unread[h.Lease] = append(unread[h.Lease], h.Object.String())
			continue
		}
		s += fmt.Sprintf("; %s is also used by %s: the controller of Lease %s maintains those owners", h.Object, strings.Join(h.Users, ", "), h.Lease)
	}
	for _, l := range leases {
		s += fmt.Sprintf("; the controller of Lease %s maintains %s: any other users are its to keep (not read)", l, strings.Join(unread[l], ", "))
	}
	return s
}

// successMessage says what was attached and what was skipped, e.g.
// "attached 2 ConfigMaps and 1 Secret to ReplicaSet web-7f9c2d".
func successMessage(rs string, attached []Object, skipped []Skip) string {
	var cms, secs int
	for _, o := range attached {
		if o.Kind == KindSecret {
			secs++
		} else {
			cms++
		}
	}
	var counts []string
	if cms > 0 {
		counts = append(counts, plural(cms, "ConfigMap"))
	}
	if secs > 0 {
		counts = append(counts, plural(secs, "Secret"))
	}
	msg := "attached nothing to ReplicaSet " + rs
	if len(counts) > 0 {
		msg = fmt.Sprintf("attached %s to ReplicaSet %s", strings.Join(counts, " and "), rs)
	}
	for _, sk := range skipped {
		msg += "; " + skipMessage(sk, rs)
	}
	return msg
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// optInRefusal says that the policy refuses objects without the opt-in label, and how to label
// them.
func optInRefusal(objs []Object, optIn labels.Selector, ns string) string {
	key, val := optInLabel(optIn)
	var cmds []string
	for _, o := range objs {
		cmds = append(cmds, fmt.Sprintf("kubectl label %s %s -n %s %s=%s", strings.ToLower(string(o.Kind)), o.Name, ns, key, val))
	}
	return fmt.Sprintf("refusing to attach %s: the administrator requires opt-in (--require-opt-in) and %s not match %s; nothing was written. "+
		"Label the objects at their source (Kustomize generatorOptions.labels, a label in the Helm chart) or now: %s",
		joinObjects(objs), verb(len(objs), "it does", "they do"), optIn, strings.Join(cmds, "; "))
}

// optInLabel returns one key=value that satisfies sel, for messages.
func optInLabel(sel labels.Selector) (string, string) {
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		if r.Operator() == selection.Equals || r.Operator() == selection.DoubleEquals || r.Operator() == selection.In {
			if v := r.Values().List(); len(v) > 0 {
				return r.Key(), v[0]
			}
		}
	}
	return OptInLabel, "true"
}

func joinObjects(objs []Object) string {
	s := make([]string, len(objs))
	for i, o := range objs {
		s[i] = o.String()
	}
	return strings.Join(s, ", ")
}

func pronoun(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// verb picks the singular or plural form for n.
func verb(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func resourcesOf(objs []Object) string {
	var cm, sec bool
	for _, o := range objs {
		cm = cm || o.Kind == KindConfigMap
		sec = sec || o.Kind == KindSecret
	}
	switch {
	case cm && sec:
		return "configmaps and secrets"
	case sec:
		return "secrets"
	default:
		return "configmaps"
	}
}

// targetDeleting refuses a target ReplicaSet that is being deleted.
func targetDeleting(rs string) string {
	return fmt.Sprintf("ReplicaSet %s is being deleted: attaching to it would get the objects collected with it; nothing was written", rs)
}

// unreferencedRefusal refuses listed objects that no ReplicaSet of the workload references.
func unreferencedRefusal(objs []Object, req Request) string {
	n := len(objs)
	return fmt.Sprintf("refusing to attach %s: no ReplicaSet of %s references %s in its pod template (ReplicaSet %s is being rolled out). "+
		"Attaching would let the garbage collector delete %s when that ReplicaSet goes; nothing was written. Fix the name in %s, or set allowUnreferenced: true (-allow-unreferenced) if this is intended",
		joinObjects(objs), req.Workload, pronoun(n), req.Target.Name, pronoun(n), req.listName())
}

// staleListRefusal refuses a list whose objects only older ReplicaSets use.
func staleListRefusal(older []Skip, req Request) string {
	var parts []string
	for _, s := range older {
		parts = append(parts, fmt.Sprintf("%s (used by %s)", s.Object, strings.Join(s.UsedBy, ", ")))
	}
	return fmt.Sprintf("the list is stale: ReplicaSet %s, being rolled out, uses none of the listed objects; only older ReplicaSets use %s; nothing was written. "+
		"Update %s to the new revision's names (kubectl get rs %s -n %s -o yaml shows which ConfigMaps and Secrets it uses)",
		req.Target.Name, strings.Join(parts, ", "), req.listName(), req.Target.Name, req.Workload.Namespace)
}

// targetCannotOwn refuses a listed object whose target's controller is gone.
func targetCannotOwn(rs string, o Object) string {
	return fmt.Sprintf("ReplicaSet %s cannot own %s: its controller is gone or being deleted (the garbage collector deletes the ReplicaSet, and what only it owns with it)", rs, o)
}

// refusals joins the refusals of listed objects.
func refusals(parts []string) string { return strings.Join(parts, "; ") + "; nothing was written" }

// lateCredentialRefusal refuses a credential that appeared after the label check without
// the opt-in label.
func lateCredentialRefusal(o Object, optIn fmt.Stringer) string {
	return fmt.Sprintf("refusing to attach %s: it was created after the check, and the target uses it only as a credential (imagePullSecrets or a volume's secretRef) without the opt-in label %s", o, optIn)
}

// discoverWriteWarning words a failed write of an object that discovery found.
func discoverWriteWarning(w Write, err error) string {
	return fmt.Sprintf("could not add owner %s to %s: %s", strings.Join(w.Names(), ", "), w.Object, describeAPIError(err))
}

// notFoundMessage names listed objects still missing after the grace.
func notFoundMessage(objs []Object, ns, source string) string {
	return fmt.Sprintf("not found in namespace %s: %s (create %s, or fix the name in %s)", ns, joinObjects(objs), pronoun(len(objs)), source)
}

// rejectedMessage quotes the apiserver's rejection of a patch.
func rejectedMessage(o Object, apiMsg string) string {
	return fmt.Sprintf("the apiserver rejected the owner reference on %s: %s", o, apiMsg)
}

// writtenBefore says what went through before a failure.
func writtenBefore(added []Write) string {
	if len(added) == 0 {
		return " (nothing was written)"
	}
	return fmt.Sprintf(" (written before the failure, and correct: %s)", writesString(added))
}

// Message is the refusal, e.g. "ConfigMap web-config-7f9c2 is also used by StatefulSet cache;
// configmap-attacher only manages config used by ReplicaSets alone".
func (b Blocked) Message() string { return blockedMessage(b) }

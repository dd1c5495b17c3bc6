package plugin

import (
	"fmt"
	"strings"
)

// The messages a run reports: what was attached, skipped, discovered or refused, and why.

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
	msg += r.blockedText()
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
	return msg + r.blockedText()
}

func countRefs(ws []Write) int {
	n := 0
	for _, w := range ws {
		n += len(w.ReplicaSets)
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
	return fmt.Sprintf("%s is also used by %s; configmap-attacher only manages config used by ReplicaSets alone (an owner reference would let the garbage collector delete it under %s)",
		b.Object, strings.Join(b.Users, ", "), verb(len(b.Users), "that user", "those users"))
}

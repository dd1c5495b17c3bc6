package plugin

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// The rules of an explicit list (the rule table of docs/step.md) and the labels it needs.

// classify applies the rule table to the explicit list:
//
//	referenced by the target's template  → a candidate: the target and every other user own it
//	used only by ReplicaSets created after the target → skip: a rollback
//	used only by older ReplicaSets       → skip if something listed attaches, else fail: stale list
//	used by no ReplicaSet                → fail, unless allowUnreferenced (then: the target)
//
// Creation times are compared as the controller's isRollbackWithinWindow does: strictly, so
// a ReplicaSet created in the same second as the target is not newer.
func classify(req Request, rss []*appsv1.ReplicaSet, refs []References) (Plan, []candidate, error) {
	p := Plan{Target: req.Target}
	var cands []candidate
	if len(req.Objects) == 0 {
		return p, nil, nil
	}
	target := TemplateReferences(&req.Target.Spec.Template.Spec)
	var older []Skip
	for _, o := range req.Objects {
		if target.Has(o) {
			cands = append(cands, candidate{Candidate: Candidate{Object: o}, listed: true})
			p.Listed = append(p.Listed, o)
			continue
		}
		var newer, old []string
		for i, rs := range rss {
			if rs.UID == req.Target.UID || !refs[i].Has(o) {
				continue
			}
			if req.Target.CreationTimestamp.Before(&rs.CreationTimestamp) {
				newer = append(newer, rs.Name)
			} else {
				old = append(old, rs.Name)
			}
		}
		switch {
		case len(newer) > 0:
			p.Skipped = append(p.Skipped, Skip{Object: o, Reason: SkipRollback, UsedBy: append(newer, old...)})
		case len(old) > 0:
			older = append(older, Skip{Object: o, Reason: SkipOlder, UsedBy: old})
		case req.AllowUnreferenced:
			cands = append(cands, candidate{Candidate: Candidate{Object: o}, listed: true, forced: req.Target})
			p.Listed = append(p.Listed, o)
			p.Unreferenced = append(p.Unreferenced, o)
		default:
			p.Unreferenced = append(p.Unreferenced, o)
		}
	}
	if len(p.Unreferenced) > 0 && !req.AllowUnreferenced {
		n := len(p.Unreferenced)
		return p, nil, &FailError{fmt.Sprintf("refusing to attach %s: no ReplicaSet of %s references %s in its pod template (ReplicaSet %s is being rolled out). "+
			"Attaching would let the garbage collector delete %s when that ReplicaSet goes; nothing was written. Fix the name in %s, or set allowUnreferenced: true (-allow-unreferenced) if this is intended",
			joinObjects(p.Unreferenced), req.Workload, pronoun(n), req.Target.Name, pronoun(n), req.listName())}
	}
	if len(older) > 0 && len(p.Listed) == 0 && !anyRollback(p.Skipped) {
		var parts []string
		for _, s := range older {
			parts = append(parts, fmt.Sprintf("%s (used by %s)", s.Object, strings.Join(s.UsedBy, ", ")))
		}
		return p, nil, &FailError{fmt.Sprintf("the list is stale: ReplicaSet %s, being rolled out, uses none of the listed objects; only older ReplicaSets use %s; nothing was written. "+
			"Update %s to the new revision's names (kubectl get rs %s -n %s -o yaml shows which ConfigMaps and Secrets it uses)",
			req.Target.Name, strings.Join(parts, ", "), req.listName(), req.Target.Name, req.Workload.Namespace)}
	}
	p.Skipped = append(p.Skipped, older...)
	return p, cands, nil
}

func anyRollback(skips []Skip) bool {
	for _, s := range skips {
		if s.Reason == SkipRollback {
			return true
		}
	}
	return false
}

// labelRule is a rule on the labels of a listed object, for one that did not exist when the
// labels were checked and appears during the grace: it is read and checked before its patch.
type labelRule struct {
	optIn        labels.Selector
	requireOptIn bool // the administrator's policy
	credential   bool // the target uses it only as a credential
	ns           string
}

// check returns the refusal for an object with these labels ("" when it may be attached).
func (r *labelRule) check(o Object, l map[string]string) string {
	if r == nil || r.optIn.Matches(labels.Set(l)) {
		return ""
	}
	if r.requireOptIn {
		return optInRefusal([]Object{o}, r.optIn, r.ns)
	}
	return fmt.Sprintf("refusing to attach %s: it was created after the check, and the target uses it only as a credential (imagePullSecrets or a volume's secretRef) without the opt-in label %s", o, r.optIn)
}

// checkLabels applies the opt-in policy and the credentials rule to the explicit list. It
// reads labels only when a rule needs them: with the policy on, one metadata list per kind;
// otherwise one metadata GET per object the target uses only as a credential. An object that
// does not exist yet carries the rule to its write (labelRule).
func (a *Attacher) checkLabels(ctx context.Context, req Request, p *Plan, cands []candidate) error {
	if len(p.Listed) == 0 {
		return nil
	}
	ns := req.Workload.Namespace
	optIn := req.Policy.optIn()
	creds := CredentialOnly(&req.Target.Spec.Template.Spec)
	metas := map[Object]objectMeta{}
	if req.Policy.RequireOptIn {
		for _, k := range kindsOf(p.Listed) {
			m, err := a.listMeta(ctx, ns, k, optIn)
			if err != nil {
				return err
			}
			for name, meta := range m {
				metas[Object{k, name}] = meta
			}
		}
	}
	var unlabelled []Object
	var keep []Object
	for i := range cands {
		c := &cands[i]
		o := c.Object
		need := req.Policy.RequireOptIn || creds.Has(o)
		if !need {
			keep = append(keep, o)
			continue
		}
		m, ok := metas[o]
		if !ok {
			got, err := a.getMeta(ctx, ns, o)
			if err != nil {
				return err
			}
			if got == nil { // absent: checked when it appears (the write's grace)
				c.recheck = &labelRule{optIn: optIn, requireOptIn: req.Policy.RequireOptIn, credential: creds.Has(o), ns: ns}
				keep = append(keep, o)
				continue
			}
			m, ok = *got, true
		}
		if ok {
			c.UID, c.Labels, c.Owners, c.labelsKnown = m.UID, m.Labels, m.Owners, true
		}
		if ok && optIn.Matches(labels.Set(m.Labels)) {
			keep = append(keep, o)
			continue
		}
		if req.Policy.RequireOptIn {
			unlabelled = append(unlabelled, o)
			continue
		}
		// A credential (image pull secret, a volume's secretRef) is shared by nature: the list
		// does not make it a dependent unless its owner opted it in.
		p.Skipped = append(p.Skipped, Skip{Object: o, Reason: SkipCredential, UsedBy: []string{req.Target.Name}, OptIn: optIn.String()})
		c.dropped = true
	}
	if len(unlabelled) > 0 {
		return &FailError{optInRefusal(unlabelled, optIn, ns)}
	}
	p.Listed = keep
	return nil
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
	return DefaultDiscoverLabel, "true"
}

func kindsOf(objs []Object) []Kind {
	var cm, sec bool
	for _, o := range objs {
		cm = cm || o.Kind == KindConfigMap
		sec = sec || o.Kind == KindSecret
	}
	var out []Kind
	if cm {
		out = append(out, KindConfigMap)
	}
	if sec {
		out = append(out, KindSecret)
	}
	return out
}

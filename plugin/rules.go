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
//	referenced by the target's template  → attach to the target and every live ReplicaSet using it
//	used only by ReplicaSets created after the target (a tie counts) → skip: a rollback
//	used only by older ReplicaSets       → skip if something listed attaches, else fail: stale list
//	used by no ReplicaSet                → fail, unless allowUnreferenced (then: the target)
//
// Creation times are compared as the controller's isRollbackWithinWindow does.
func classify(req Request, rss []*appsv1.ReplicaSet, refs []References) (Plan, map[Object]*Write, error) {
	p := Plan{Target: req.Target}
	attach := map[Object]*Write{}
	if len(req.Objects) == 0 {
		return p, attach, nil
	}
	target := TemplateReferences(&req.Target.Spec.Template.Spec)
	var older []Skip
	for _, o := range req.Objects {
		if target.Has(o) {
			w := &Write{Object: o, Listed: true}
			for i, rs := range rss {
				if Live(rs) && refs[i].Has(o) {
					w.ReplicaSets = append(w.ReplicaSets, rs)
				}
			}
			attach[o] = w
			p.Listed = append(p.Listed, o)
			continue
		}
		var newer, old []string
		for i, rs := range rss {
			if rs.UID == req.Target.UID || !refs[i].Has(o) {
				continue
			}
			if req.Target.CreationTimestamp.Before(&rs.CreationTimestamp) || req.Target.CreationTimestamp.Equal(&rs.CreationTimestamp) {
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
			attach[o] = &Write{Object: o, Listed: true, ReplicaSets: []*appsv1.ReplicaSet{req.Target}}
			p.Listed = append(p.Listed, o)
			p.Unreferenced = append(p.Unreferenced, o)
		default:
			p.Unreferenced = append(p.Unreferenced, o)
		}
	}
	if len(p.Unreferenced) > 0 && !req.AllowUnreferenced {
		n := len(p.Unreferenced)
		return p, nil, &FailError{fmt.Sprintf("refusing to attach %s: no ReplicaSet of %s references %s in its pod template (ReplicaSet %s is being rolled out). "+
			"Attaching would let the garbage collector delete %s when that ReplicaSet goes. Fix the name in the step config, or set allowUnreferenced: true (-allow-unreferenced) if this is intended",
			joinObjects(p.Unreferenced), req.Workload, pronoun(n), req.Target.Name, pronoun(n))}
	}
	if len(older) > 0 && len(p.Listed) == 0 && !anyRollback(p.Skipped) {
		var parts []string
		for _, s := range older {
			parts = append(parts, fmt.Sprintf("%s (used by %s)", s.Object, strings.Join(s.UsedBy, ", ")))
		}
		return p, nil, &FailError{fmt.Sprintf("the step list is stale: ReplicaSet %s, being rolled out, uses none of the listed objects; only older ReplicaSets use %s. "+
			"Update the list to the new revision's names (kubectl get rs %s -n %s -o yaml shows which ConfigMaps and Secrets it uses)",
			req.Target.Name, strings.Join(parts, ", "), req.Target.Name, req.Workload.Namespace)}
	}
	p.Skipped = append(p.Skipped, older...)
	return p, attach, nil
}

func anyRollback(skips []Skip) bool {
	for _, s := range skips {
		if s.Reason == SkipRollback {
			return true
		}
	}
	return false
}

// checkLabels applies the opt-in policy and the credentials rule to the explicit list. It
// reads labels only when a rule needs them: with the policy on, one metadata list per kind;
// otherwise one metadata GET per object the target uses only as a credential.
func (a *Attacher) checkLabels(ctx context.Context, req Request, p *Plan, attach map[Object]*Write) error {
	if len(p.Listed) == 0 {
		return nil
	}
	ns := req.Workload.Namespace
	optIn := req.Policy.optIn()
	creds := CredentialOnly(&req.Target.Spec.Template.Spec)
	labelled := map[Object]bool{}
	known := map[Object]bool{}
	if req.Policy.RequireOptIn {
		for _, k := range kindsOf(p.Listed) {
			m, err := a.listMeta(ctx, ns, k, optIn)
			if err != nil {
				return err
			}
			for name := range m {
				labelled[Object{k, name}] = true
				known[Object{k, name}] = true
			}
		}
	}
	var unlabelled []Object
	var keep []Object
	for _, o := range p.Listed {
		need := req.Policy.RequireOptIn || creds.Has(o)
		if !need || labelled[o] {
			keep = append(keep, o)
			continue
		}
		if !known[o] {
			m, err := a.getMeta(ctx, ns, o)
			if err != nil {
				return err
			}
			if m == nil { // absent: the write reports it after the grace
				keep = append(keep, o)
				continue
			}
			if optIn.Matches(labels.Set(m.Labels)) {
				keep = append(keep, o)
				continue
			}
		}
		if req.Policy.RequireOptIn {
			unlabelled = append(unlabelled, o)
			continue
		}
		// A credential (image pull secret, a volume's secretRef) is shared by nature: the list
		// does not make it a dependent unless its owner opted it in.
		p.Skipped = append(p.Skipped, Skip{Object: o, Reason: SkipCredential, UsedBy: []string{req.Target.Name}})
		delete(attach, o)
	}
	if len(unlabelled) > 0 {
		key, val := optInLabel(optIn)
		var cmds []string
		for _, o := range unlabelled {
			cmds = append(cmds, fmt.Sprintf("kubectl label %s %s -n %s %s=%s", strings.ToLower(string(o.Kind)), o.Name, ns, key, val))
		}
		return &FailError{fmt.Sprintf("refusing to attach %s: the administrator requires opt-in (--require-opt-in) and %s not match %s; nothing was written. "+
			"Label the objects at their source (Kustomize generatorOptions.labels, a label in the Helm chart) or now: %s",
			joinObjects(unlabelled), verb(len(unlabelled), "it does", "they do"), optIn, strings.Join(cmds, "; "))}
	}
	p.Listed = keep
	return nil
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

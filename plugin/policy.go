package plugin

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// The administrator's policy and the labels it reads: the opt-in selector, positivity, and
// the credentials rule.

func (p Policy) optIn() labels.Selector {
	if !Positive(p.OptIn) {
		return OptInSelector()
	}
	return p.OptIn
}

// OptInLabel is the label by which an object's owner opts it in: discovery, the controller,
// audit -fix and --require-opt-in adopt only objects that carry it (value "true"), unless an
// administrator chooses another selector.
const OptInLabel = "configmap-attacher/revisioned"

// OptInSelector is the default opt-in label selector, configmap-attacher/revisioned=true.
func OptInSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{OptInLabel: "true"})
}

// Positive reports whether an opt-in selector requires something an object must carry: at
// least one requirement `key`, `key=value` or `key in (…)`. An empty selector matches every
// object, and one made only of `!key`, `key!=v` or `key notin (…)` matches every object
// without that label: either would adopt static and shared config, so every mode refuses
// them.
func Positive(sel labels.Selector) bool {
	if sel == nil {
		return false
	}
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In, selection.Exists:
			return true
		}
	}
	return false
}

// NotPositive is the message for a selector Positive refuses.
const NotPositive = "selects every object without a given label (or everything): give a label objects must carry, such as " + OptInLabel + "=true"

// check returns the refusal for an object with these labels ("" when it may be attached).
func (r *labelRule) check(o Object, l map[string]string) string {
	if r == nil || r.optIn.Matches(labels.Set(l)) {
		return ""
	}
	if r.requireOptIn {
		return optInRefusal([]Object{o}, r.optIn, r.ns)
	}
	return lateCredentialRefusal(o, r.optIn)
}

// labelsNeeded reports whether a listed object's labels decide anything: with the policy on,
// every object's; otherwise those of an object the target uses only as a credential.
func labelsNeeded(req Request, creds References, o Object) bool {
	return req.Policy.RequireOptIn || creds.Has(o)
}

// applyLabelRules applies the opt-in policy and the credentials rule to the explicit list, from
// the labels readLabels read (nil: the object does not exist yet, and carries the rule to its
// write: labelRule). Pure: a credential not opted in is skipped (dropped: no later read looks
// at it), an object outside the policy fails the run.
func applyLabelRules(req Request, p *Plan, cands []candidate, metas map[Object]*objectMeta) error {
	if len(p.Listed) == 0 {
		return nil
	}
	ns := req.Workload.Namespace
	optIn := req.Policy.optIn()
	creds := CredentialOnly(&req.Target.Spec.Template.Spec)
	var unlabelled []Object
	var keep []Object
	for i := range cands {
		c := &cands[i]
		o := c.Object
		if !labelsNeeded(req, creds, o) {
			keep = append(keep, o)
			continue
		}
		m := metas[o]
		if m == nil { // absent: checked when it appears (the write's grace)
			c.recheck = &labelRule{optIn: optIn, requireOptIn: req.Policy.RequireOptIn, credential: creds.Has(o), ns: ns}
			keep = append(keep, o)
			continue
		}
		c.UID, c.Labels, c.Owners, c.labelsKnown = m.UID, m.Labels, m.Owners, true
		if optIn.Matches(labels.Set(m.Labels)) {
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

// credentialOnly: every owner uses the object only as a credential.
func credentialOnly(owners []ReplicaSetUser) bool {
	for _, o := range owners {
		if !o.CredentialOnly {
			return false
		}
	}
	return true
}

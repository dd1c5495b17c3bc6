package doctor

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// kustomizeHash is the suffix Kustomize's generators append: "-" and ten characters of its
// hash encoding (hex with 0, 1, 3, a, e replaced by g, h, k, m, t).
var kustomizeHash = regexp.MustCompile(`-[2456789bcdfghkmt]{10}$`)

// GitOps tools, detected by the tracking metadata they put on what they apply, and the prune
// protection docs/gitops.md gives for each.
type gitops struct {
	tool string
	// detect reports whether the object is tracked by the tool.
	detect func(l, a map[string]string) bool
	// protected reports whether the object carries the protection; missing names what lacks.
	protected func(a map[string]string) (ok bool, missing string)
	fix       string
}

func hasOption(v, opt string) bool {
	for _, o := range strings.Split(v, ",") {
		if strings.EqualFold(strings.TrimSpace(o), opt) {
			return true
		}
	}
	return false
}

var gitopsTools = []gitops{
	{tool: "Argo CD",
		// Annotation tracking (the default since Argo CD 3) or a custom tracking label; the
		// older default label app.kubernetes.io/instance is also Helm's, so it is not used.
		detect: func(l, a map[string]string) bool {
			return a["argocd.argoproj.io/tracking-id"] != "" || l["argocd.argoproj.io/instance"] != ""
		},
		protected: func(a map[string]string) (bool, string) {
			var miss []string
			if !hasOption(a["argocd.argoproj.io/sync-options"], "Prune=false") {
				miss = append(miss, "argocd.argoproj.io/sync-options: Prune=false")
			}
			if !hasOption(a["argocd.argoproj.io/compare-options"], "IgnoreExtraneous") {
				miss = append(miss, "argocd.argoproj.io/compare-options: IgnoreExtraneous")
			}
			return len(miss) == 0, strings.Join(miss, " and ")
		},
		fix: "annotate it (at its source) argocd.argoproj.io/sync-options: Prune=false and argocd.argoproj.io/compare-options: IgnoreExtraneous (docs/gitops.md#argo-cd)"},
	{tool: "Flux",
		detect: func(l, a map[string]string) bool { return l["kustomize.toolkit.fluxcd.io/name"] != "" },
		protected: func(a map[string]string) (bool, string) {
			return a["kustomize.toolkit.fluxcd.io/prune"] == "disabled", "kustomize.toolkit.fluxcd.io/prune: disabled"
		},
		fix: "annotate it (at its source) kustomize.toolkit.fluxcd.io/prune: disabled (docs/gitops.md#flux)"},
	{tool: "Helm",
		detect: func(l, a map[string]string) bool {
			return l["app.kubernetes.io/managed-by"] == "Helm" || a["meta.helm.sh/release-name"] != ""
		},
		protected: func(a map[string]string) (bool, string) {
			return a["helm.sh/resource-policy"] == "keep", "helm.sh/resource-policy: keep"
		},
		fix: "annotate it in the chart's template helm.sh/resource-policy: keep (docs/gitops.md#helm)"},
}

// workloadKey is one Rollout or Deployment, by its ReplicaSets' controller reference.
type workloadKey struct{ ns, kind, name string }

// checkObjects: the revisioned ConfigMaps and Secrets that live ReplicaSets of Rollouts and
// Deployments use carry the opt-in label (else no mode attaches them) and the prune
// protection of the GitOps tool that tracks them. An object counts as revisioned when it
// carries the opt-in label, when its name ends in a Kustomize content hash, or when some
// but not all ReplicaSets of one workload use it (its name changes with the revision).
func (d *Doctor) checkObjects(ctx context.Context, r *Report) {
	scopes := d.Opts.Namespaces
	if len(scopes) == 0 {
		scopes = []string{""}
	}
	for _, ns := range scopes {
		d.checkObjectsIn(ctx, r, ns)
	}
}

func (d *Doctor) checkObjectsIn(ctx context.Context, r *Report, ns string) {
	where := "every namespace"
	if ns != "" {
		where = "namespace " + ns
	}
	cctx, cancel := d.call(ctx)
	rsl, err := d.Kube.AppsV1().ReplicaSets(ns).List(cctx, metav1.ListOptions{})
	cancel()
	if err != nil {
		r.problem(Error, "objects", where, "grant the identity running doctor list on replicasets.apps", "cannot list ReplicaSets: %v", err)
		return
	}
	uses := map[workloadKey]map[plugin.Object]int{}
	rsCount := map[workloadKey]int{}
	users := map[string]map[plugin.Object][]string{} // namespace → object → workloads
	for i := range rsl.Items {
		rs := &rsl.Items[i]
		owner := metav1.GetControllerOf(rs)
		if rs.DeletionTimestamp != nil || owner == nil || (owner.Kind != plugin.KindRollout && owner.Kind != plugin.KindDeployment) {
			continue
		}
		k := workloadKey{rs.Namespace, owner.Kind, owner.Name}
		rsCount[k]++
		if uses[k] == nil {
			uses[k] = map[plugin.Object]int{}
		}
		for _, o := range objectsOf(rs) {
			uses[k][o]++
			if users[rs.Namespace] == nil {
				users[rs.Namespace] = map[plugin.Object][]string{}
			}
			w := k.kind + " " + k.name
			if l := users[rs.Namespace][o]; len(l) == 0 || l[len(l)-1] != w {
				users[rs.Namespace][o] = append(l, w)
			}
		}
	}
	revisioned := map[string]map[plugin.Object]bool{}
	for k, objs := range uses {
		for o, n := range objs {
			if (n < rsCount[k] && rsCount[k] > 1) || kustomizeHash.MatchString(o.Name) {
				if revisioned[k.ns] == nil {
					revisioned[k.ns] = map[plugin.Object]bool{}
				}
				revisioned[k.ns][o] = true
			}
		}
	}
	// The objects the Rollouts' plugin steps name are revisioned by the author's word (and,
	// under --require-opt-in, fail the step without the label).
	for o, ros := range d.stepObjects(ctx, r, ns) {
		if revisioned[o.ns] == nil {
			revisioned[o.ns] = map[plugin.Object]bool{}
		}
		revisioned[o.ns][o.obj] = true
		if users[o.ns] == nil {
			users[o.ns] = map[plugin.Object][]string{}
		}
		if len(users[o.ns][o.obj]) == 0 {
			users[o.ns][o.obj] = ros
		}
	}
	checked := 0
	for _, kind := range []plugin.Kind{plugin.KindConfigMap, plugin.KindSecret} {
		res := "configmaps"
		if kind == plugin.KindSecret {
			res = "secrets"
		}
		cctx, cancel := d.call(ctx)
		list, err := d.Meta.Resource(schema.GroupVersionResource{Version: "v1", Resource: res}).Namespace(ns).List(cctx, metav1.ListOptions{})
		cancel()
		if err != nil {
			r.problem(Error, "objects", where, "grant the identity running doctor list on "+res+" (doctor reads metadata only)", "cannot list %s (metadata): %v", res, err)
			continue
		}
		sort.Slice(list.Items, func(i, j int) bool {
			return list.Items[i].Namespace+"/"+list.Items[i].Name < list.Items[j].Namespace+"/"+list.Items[j].Name
		})
		for i := range list.Items {
			m := &list.Items[i]
			o := plugin.Object{Kind: kind, Name: m.Name}
			who := users[m.Namespace][o]
			if len(who) == 0 {
				continue // no live ReplicaSet uses it: nothing to keep
			}
			optedIn := d.optIn().Matches(labels.Set(m.Labels))
			if !optedIn && !revisioned[m.Namespace][o] {
				continue // static config (one name across revisions) must not be opted in
			}
			checked++
			subject := fmt.Sprintf("%s %s/%s", kind, m.Namespace, m.Name)
			if !optedIn {
				r.problem(Error, "objects/opt-in", subject,
					fmt.Sprintf("label it at its source %s (kubectl -n %s label %s %s %s=true for what exists; docs/security.md#labelling-objects)",
						d.optIn(), m.Namespace, strings.ToLower(string(kind)), m.Name, plugin.OptInLabel),
					"revisioned (used by %s) but does not match %s: no mode attaches it, and it is never collected", strings.Join(who, ", "), d.optIn())
			}
			d.checkPrune(r, subject, m.Labels, m.Annotations)
		}
	}
	if checked > 0 {
		r.ok("objects", where, "%d revisioned ConfigMap(s)/Secret(s) used by live ReplicaSets checked", checked)
	} else {
		r.ok("objects", where, "no revisioned ConfigMap or Secret used by a live ReplicaSet of a Rollout or Deployment")
	}
}

// checkPrune reports a tracked object without its tool's prune protection. Only the listed
// annotation keys are read; annotations are neither kept nor printed (a client-side applied
// Secret's last-applied-configuration annotation holds its data).
func (d *Doctor) checkPrune(r *Report, subject string, l, a map[string]string) {
	argo := gitopsTools[0].detect(l, a)
	for _, g := range gitopsTools {
		if !g.detect(l, a) {
			continue
		}
		if g.tool == "Helm" && argo {
			// A chart Argo CD renders (helm template) carries Helm's labels, but Argo CD, not
			// helm upgrade, prunes it: Argo CD's protection is the one that counts.
			continue
		}
		ok, missing := g.protected(a)
		if ok {
			r.ok("objects/prune", subject, "tracked by %s, protected from its prune", g.tool)
			continue
		}
		sev := Error
		msg := "tracked by %s without %s: the sync that drops it from Git deletes it while an old ReplicaSet still uses it"
		if g.tool == "Argo CD" && d.has(ModeController) {
			// Argo CD never prunes an attached object, and the controller attaches before the
			// next sync (docs/gitops.md); the annotations are then a backstop.
			sev, msg = Warning, "tracked by %s without %s: safe once attached (the controller attaches it at once), pruned if it leaves Git before"
		}
		r.problem(sev, "objects/prune", subject, g.fix, msg, g.tool, missing)
	}
}

type nsObject struct {
	ns  string
	obj plugin.Object
}

// stepObjects reads the config of every plugin step of our plugin in the namespace's Rollouts
// (with the core's own parser: a config the step would refuse is an error here) and returns the
// objects they name, with the Rollouts naming each.
func (d *Doctor) stepObjects(ctx context.Context, r *Report, ns string) map[nsObject][]string {
	if d.Rollouts == nil || !d.has(ModeStep) {
		return nil
	}
	where := "every namespace"
	if ns != "" {
		where = "namespace " + ns
	}
	cctx, cancel := d.call(ctx)
	list, err := d.Rollouts.ArgoprojV1alpha1().Rollouts(ns).List(cctx, metav1.ListOptions{})
	cancel()
	if apierrors.IsNotFound(err) {
		return nil // the Rollout CRD is not installed: no steps
	}
	if err != nil {
		r.problem(Error, "objects/step-config", where, "grant the identity running doctor list on rollouts.argoproj.io", "cannot list Rollouts: %v", err)
		return nil
	}
	out := map[nsObject][]string{}
	for i := range list.Items {
		ro := &list.Items[i]
		if ro.Spec.Strategy.Canary == nil {
			continue
		}
		for n, step := range ro.Spec.Strategy.Canary.Steps {
			if step.Plugin == nil || step.Plugin.Name != d.Opts.PluginName {
				continue
			}
			subject := fmt.Sprintf("Rollout %s/%s step %d", ro.Namespace, ro.Name, n)
			cfg, err := plugin.ParseConfig(step.Plugin.Config)
			if err != nil {
				r.problem(Error, "objects/step-config", subject, "fix the step's config (docs/step.md#config-fields)", "the step fails on its config: %v", err)
				continue
			}
			for _, o := range cfg.Objects() {
				k := nsObject{ro.Namespace, o}
				out[k] = append(out[k], "Rollout "+ro.Name)
			}
		}
	}
	return out
}

// objectsOf is every ConfigMap and Secret a ReplicaSet's pod template uses (the core's walker).
func objectsOf(rs *appsv1.ReplicaSet) []plugin.Object {
	return plugin.ObjectsOf(plugin.TemplateReferences(&rs.Spec.Template.Spec))
}

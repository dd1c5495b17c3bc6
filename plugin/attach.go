package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// PodTemplateHashLabel is the label Argo Rollouts puts on each ReplicaSet (and its pods)
// with the hash that status.currentPodHash and status.stableRS name.
const PodTemplateHashLabel = "rollouts-pod-template-hash"

// RBACHint is where the docs keep the RBAC the plugin needs.
const RBACHint = "examples/rbac-step-plugin.yaml"

// Attacher adds owner references from ConfigMaps and Secrets to a ReplicaSet. It keeps no
// per-rollout state, so one Attacher serves every Rollout concurrently.
type Attacher struct {
	Client kubernetes.Interface
	Log    logrus.FieldLogger
	// Concurrency bounds the patches in flight for one call (default 8).
	Concurrency int
	// RequestTimeout is the deadline of each API request (default 15s).
	RequestTimeout time.Duration
	// Backoff paces retries of transient API errors inside one call (default: 4 tries over ~3s).
	Backoff wait.Backoff
	// RBACHint names the example RBAC that fixes a 403 for this mode's identity
	// (default RBACHint, the step plugin's).
	RBACHint string
}

// DefaultBackoff retries briefly: a longer outage is handed back to the controller, which
// retries the step itself every 30 s.
var DefaultBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 4}

// Rollout is what the core needs to know about a Rollout.
type Rollout struct {
	Namespace string
	Name      string
	UID       types.UID
	// Selector is spec.selector (for workloadRef Rollouts, the Deployment's selector).
	Selector *metav1.LabelSelector
	// PodHash is status.currentPodHash: the hash of the ReplicaSet being rolled out.
	PodHash string
}

func (r Rollout) String() string { return r.Namespace + "/" + r.Name }

// ReplicaSets is the Rollout's ReplicaSets: Current is the one labelled with the current pod
// hash (nil if the controller has not created it yet), History the others.
type ReplicaSets struct {
	Current *appsv1.ReplicaSet
	History []appsv1.ReplicaSet
}

func (a *Attacher) log() logrus.FieldLogger {
	if a.Log == nil {
		return logrus.StandardLogger()
	}
	return a.Log
}

func (a *Attacher) requestTimeout() time.Duration {
	if a.RequestTimeout <= 0 {
		return 15 * time.Second
	}
	return a.RequestTimeout
}

func (a *Attacher) rbacHint() string {
	if a.RBACHint == "" {
		return RBACHint
	}
	return a.RBACHint
}

func (a *Attacher) backoff() wait.Backoff {
	if a.Backoff.Steps == 0 {
		return DefaultBackoff
	}
	return a.Backoff
}

// ListReplicaSets finds the Rollout's ReplicaSets with one list request: those matching its
// selector whose controller owner reference carries the Rollout's UID (a ReplicaSet with
// the right labels but another owner is not ours to attach to).
func (a *Attacher) ListReplicaSets(ctx context.Context, ro Rollout) (ReplicaSets, error) {
	var out ReplicaSets
	if ro.Selector == nil {
		return out, &FailError{fmt.Sprintf("Rollout %s has no spec.selector: cannot tell which ReplicaSets are its own", ro)}
	}
	sel, err := metav1.LabelSelectorAsSelector(ro.Selector)
	if err != nil {
		return out, &FailError{fmt.Sprintf("Rollout %s: spec.selector is invalid: %v", ro, err)}
	}
	var list *appsv1.ReplicaSetList
	err = retry.OnError(a.backoff(), isTransient, func() error {
		rctx, cancel := context.WithTimeout(ctx, a.requestTimeout())
		defer cancel()
		var err error
		list, err = a.Client.AppsV1().ReplicaSets(ro.Namespace).List(rctx, metav1.ListOptions{LabelSelector: sel.String()})
		return err
	})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return out, &FailError{fmt.Sprintf("forbidden: cannot list replicasets.apps in namespace %s (%v): grant list on replicasets, see %s", ro.Namespace, apiMessage(err), a.rbacHint())}
		}
		return out, fmt.Errorf("listing ReplicaSets of Rollout %s: %w", ro, err)
	}
	for i := range list.Items {
		rs := list.Items[i]
		ref := metav1.GetControllerOf(&rs)
		if ref == nil || ref.UID != ro.UID {
			continue
		}
		if ro.PodHash != "" && rs.Labels[PodTemplateHashLabel] == ro.PodHash {
			out.Current = &list.Items[i]
			continue
		}
		out.History = append(out.History, rs)
	}
	// Newest revision first keeps messages stable and readable.
	sort.SliceStable(out.History, func(i, j int) bool {
		return out.History[i].CreationTimestamp.After(out.History[j].CreationTimestamp.Time)
	})
	return out, nil
}

// Skip is a listed object that the target does not reference but another ReplicaSet of the
// Rollout does: the rollback case (undo re-runs the newest step list against an older
// ReplicaSet). It is left alone, and the step does not fail.
type Skip struct {
	Object Object
	UsedBy []string
}

// Plan says what one run will write. It is computed from pod templates only, before any write.
type Plan struct {
	ReplicaSet   *appsv1.ReplicaSet
	Attach       []Object
	Skipped      []Skip
	Unreferenced []Object
	// AllowUnreferenced records that Unreferenced objects are attached too.
	AllowUnreferenced bool
}

// PlanAttach decides, for each listed object, whether the target ReplicaSet's pod template
// uses it (attach), only another ReplicaSet of the Rollout does (skip), or none does
// (refuse unless allowUnreferenced). The pod template is the truth: a wrong owner reference
// would make the garbage collector delete config that something still mounts.
func PlanAttach(rss ReplicaSets, objects []Object, allowUnreferenced bool) Plan {
	p := Plan{ReplicaSet: rss.Current, AllowUnreferenced: allowUnreferenced}
	target := TemplateReferences(&rss.Current.Spec.Template.Spec)
	var history []References
	for i := range rss.History {
		history = append(history, TemplateReferences(&rss.History[i].Spec.Template.Spec))
	}
	for _, o := range objects {
		if target.Has(o) {
			p.Attach = append(p.Attach, o)
			continue
		}
		var usedBy []string
		for i, refs := range history {
			if refs.Has(o) {
				usedBy = append(usedBy, rss.History[i].Name)
			}
		}
		switch {
		case len(usedBy) > 0:
			p.Skipped = append(p.Skipped, Skip{Object: o, UsedBy: usedBy})
		case allowUnreferenced:
			p.Attach = append(p.Attach, o)
			p.Unreferenced = append(p.Unreferenced, o)
		default:
			p.Unreferenced = append(p.Unreferenced, o)
		}
	}
	return p
}

// Err refuses the plan when it would attach objects no ReplicaSet uses.
func (p Plan) Err() error {
	if p.AllowUnreferenced || len(p.Unreferenced) == 0 {
		return nil
	}
	return &FailError{fmt.Sprintf("refusing to attach %s: no ReplicaSet of this Rollout references %s in its pod template (ReplicaSet %s is being rolled out). "+
		"Attaching would let the garbage collector delete %s when that ReplicaSet goes. Fix the name in the step config, or set allowUnreferenced: true (-allow-unreferenced) if this is intended",
		joinObjects(p.Unreferenced), pronoun(len(p.Unreferenced)), p.ReplicaSet.Name, pronoun(len(p.Unreferenced)))}
}

// Outcome is what Apply did.
type Outcome struct {
	Attached  []Object
	Missing   []Object
	Forbidden []Object
	Rejected  map[Object]string
	// Err is the first transient error left after retries (nil if none).
	Err error
	// forbiddenMsg keeps the apiserver's wording of one 403 for the message.
	forbiddenMsg string
	rbacHint     string
}

// ownerPatch is a strategic merge patch that adds (or keeps) owner references. ObjectMeta
// declares ownerReferences with patchMergeKey uid, so the apiserver merges these entries into
// the existing list by UID: no read, no read-modify-write race with the garbage collector
// (which edits the same list), other owners untouched, and a repeat is a no-op that leaves
// the resourceVersion as it was.
func ownerPatch(rss ...*appsv1.ReplicaSet) []byte {
	f := false
	refs := make([]metav1.OwnerReference, 0, len(rss))
	for _, rs := range rss {
		refs = append(refs, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &f})
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": refs}}) // cannot fail: fixed types
	return b
}

// patchItem is one object and the patch for it.
type patchItem struct {
	Object Object
	Patch  []byte
}

// Apply adds the owner reference of rs to each object, one strategic merge patch per object,
// Concurrency at a time. It never reads or writes data, labels or annotations.
func (a *Attacher) Apply(ctx context.Context, rs *appsv1.ReplicaSet, objects []Object) Outcome {
	patch := ownerPatch(rs)
	items := make([]patchItem, len(objects))
	for i, o := range objects {
		items[i] = patchItem{o, patch}
	}
	return a.applyPatches(ctx, rs.Namespace, items)
}

func (a *Attacher) applyPatches(ctx context.Context, ns string, items []patchItem) Outcome {
	out := Outcome{Rejected: map[Object]string{}, rbacHint: a.rbacHint()}
	if len(items) == 0 {
		return out
	}
	limit := a.Concurrency
	if limit <= 0 {
		limit = 8
	}
	// A transient error that outlived its retries (the apiserver is down, say) stops the
	// patches not yet sent: the controller retries the whole step anyway, and 100 objects
	// each waiting out their own retries would hold the controller's worker for minutes.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(limit)
	for _, it := range items {
		g.Go(func() error {
			o := it.Object
			if ctx.Err() != nil {
				return nil // abandoned after a transient failure; out.Err says why
			}
			err := a.safePatch(ctx, ns, o, it.Patch)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && ctx.Err() != nil && out.Err != nil:
				// Cancelled by a sibling's transient failure: already reported.
			case err == nil:
				out.Attached = append(out.Attached, o)
			case apierrors.IsNotFound(err):
				out.Missing = append(out.Missing, o)
			case apierrors.IsForbidden(err):
				out.Forbidden = append(out.Forbidden, o)
				out.forbiddenMsg = apiMessage(err)
			case isTransient(err):
				if out.Err == nil {
					out.Err = fmt.Errorf("patching %s: %w", o, err)
				}
				cancel()
			default:
				out.Rejected[o] = apiMessage(err)
			}
			return nil
		})
	}
	_ = g.Wait()
	sortObjects(out.Attached)
	sortObjects(out.Missing)
	sortObjects(out.Forbidden)
	return out
}

// safePatch runs patchOne and turns a panic into an error: these goroutines are outside the
// RPC layer's recover, and a panic there would kill the process every Rollout shares.
func (a *Attacher) safePatch(ctx context.Context, ns string, o Object, patch []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error patching %s: %v", o, r)
		}
	}()
	return a.patchOne(ctx, ns, o, patch)
}

func (a *Attacher) patchOne(ctx context.Context, ns string, o Object, patch []byte) error {
	log := a.log().WithFields(logrus.Fields{"object": o.String()})
	err := retry.OnError(a.backoff(), isTransient, func() error {
		rctx, cancel := context.WithTimeout(ctx, a.requestTimeout())
		defer cancel()
		var err error
		switch o.Kind {
		case KindSecret:
			_, err = a.Client.CoreV1().Secrets(ns).Patch(rctx, o.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		default:
			_, err = a.Client.CoreV1().ConfigMaps(ns).Patch(rctx, o.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		}
		if err != nil && isTransient(err) {
			log.WithError(err).Debug("transient error, retrying")
		}
		return err
	})
	if err == nil {
		log.Debug("owner reference in place")
	}
	return err
}

// Err turns an Outcome into the step's verdict: nil when every object is attached, a
// *FailError for problems a retry cannot fix (missing, forbidden, rejected), or the
// transient error for the controller to retry.
func (o Outcome) Error(ns string) error {
	var parts []string
	if len(o.Missing) > 0 {
		parts = append(parts, fmt.Sprintf("not found in namespace %s: %s (create %s, or fix the name in the step config)", ns, joinObjects(o.Missing), pronoun(len(o.Missing))))
	}
	if len(o.Forbidden) > 0 && strings.Contains(o.forbiddenMsg, "can't delete") {
		// The OwnerReferencesPermissionEnforcement admission plugin (OpenShift has it on) lets
		// only users who may delete an object change its owner references.
		parts = append(parts, fmt.Sprintf("forbidden to change the owner references of %s: the OwnerReferencesPermissionEnforcement admission plugin requires verb delete on %s in namespace %s in addition to patch (apply examples/rbac-ownerreferences-enforcement.yaml): %s",
			joinObjects(o.Forbidden), resourcesOf(o.Forbidden), ns, o.forbiddenMsg))
	} else if len(o.Forbidden) > 0 {
		parts = append(parts, fmt.Sprintf("forbidden to patch %s: %s; the plugin's service account needs verb patch on %s in namespace %s (apply %s; on clusters with the OwnerReferencesPermissionEnforcement admission plugin, such as OpenShift, also delete: examples/rbac-ownerreferences-enforcement.yaml)",
			joinObjects(o.Forbidden), o.forbiddenMsg, resourcesOf(o.Forbidden), ns, o.rbacHint))
	}
	if len(o.Rejected) > 0 {
		var objs []Object
		for obj := range o.Rejected {
			objs = append(objs, obj)
		}
		sortObjects(objs)
		for _, obj := range objs {
			parts = append(parts, fmt.Sprintf("the apiserver rejected the owner reference on %s: %s", obj, o.Rejected[obj]))
		}
	}
	if len(parts) > 0 {
		msg := strings.Join(parts, "; ")
		if len(o.Attached) > 0 {
			msg += fmt.Sprintf(" (attached meanwhile, and correct: %s)", joinObjects(o.Attached))
		}
		return &FailError{msg}
	}
	return o.Err
}

func apiMessage(err error) string {
	if s, ok := err.(apierrors.APIStatus); ok {
		return s.Status().Message
	}
	return err.Error()
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

func sortObjects(objs []Object) {
	sort.Slice(objs, func(i, j int) bool {
		if objs[i].Kind != objs[j].Kind {
			return objs[i].Kind < objs[j].Kind
		}
		return objs[i].Name < objs[j].Name
	})
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

// Objects lists the config's objects, ConfigMaps first, in config order.
func (c Config) Objects() []Object {
	objs := make([]Object, 0, len(c.ConfigMaps)+len(c.Secrets))
	for _, n := range c.ConfigMaps {
		objs = append(objs, Object{KindConfigMap, n})
	}
	for _, n := range c.Secrets {
		objs = append(objs, Object{KindSecret, n})
	}
	return objs
}

package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
)

// With reads.go (the namespace's users, paged), the only file that talks to the apiserver: the
// Attacher, every list, get and patch of the core, and call, the one deadline-and-retry wrapper
// every request goes through.

// RBACHint is where the docs keep the RBAC the plugin needs.
const RBACHint = "examples/rbac-step-plugin.yaml"

// Attacher adds owner references from ConfigMaps and Secrets to ReplicaSets. It keeps no
// per-workload state, so one Attacher serves every Rollout concurrently.
type Attacher struct {
	// Client lists ReplicaSets and the other users, and creates Events.
	Client Kube
	// Meta reads and patches ConfigMaps and Secrets as metadata only (PartialObjectMetadata):
	// their data never enters the process.
	Meta metadata.Interface
	Log  logrus.FieldLogger
	// Concurrency bounds the patches in flight for one call (default 8).
	Concurrency int
	// RequestTimeout is the deadline of each API request (default 5s).
	RequestTimeout time.Duration
	// Backoff paces retries of transient API errors inside one call (default DefaultBackoff: 4
	// tries, 1.4 s of sleeps between them, 1.68 s at most with jitter).
	Backoff wait.Backoff
	// RBACHint names the example RBAC that fixes a 403 for this mode's identity
	// (default RBACHint, the step plugin's).
	RBACHint string
	// CreationWait is how long a listed object that does not exist yet is waited for (default
	// DefaultCreationWait): a sync may create it a moment after the workload. (Not the
	// controller's anchor grace: that keeps an anchor after its workload is deleted.)
	CreationWait time.Duration

	// noGet holds the resources whose GET the RBAC refused (readByName lists them instead).
	noGet sync.Map
}

// DefaultBackoff retries briefly: a longer outage is handed back to the caller (the Rollouts
// controller retries the step itself every 30 s).
var DefaultBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 4}

// DefaultRequestTimeout is the deadline of one API request.
const DefaultRequestTimeout = 5 * time.Second

// DefaultCreationWait is how long a listed object that does not exist yet is waited for.
const DefaultCreationWait = 5 * time.Second

func (a *Attacher) concurrency() int {
	if a.Concurrency <= 0 {
		return 8
	}
	return a.Concurrency
}

func (a *Attacher) log() logrus.FieldLogger {
	if a.Log == nil {
		return logrus.StandardLogger()
	}
	return a.Log
}

func (a *Attacher) requestTimeout() time.Duration {
	if a.RequestTimeout <= 0 {
		return DefaultRequestTimeout
	}
	return a.RequestTimeout
}

func (a *Attacher) creationWait() time.Duration {
	if a.CreationWait <= 0 {
		return DefaultCreationWait
	}
	return a.CreationWait
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

// call runs one API request with a per-request deadline and retries of transient errors: the
// one retry helper of the package. A retry waits out the backoff (DefaultBackoff: 4 tries, the
// three sleeps between them 0.2 + 0.4 + 0.8 = 1.4 s, up to 1.68 s with jitter), but never past
// ctx: a caller whose time is up gets the last error at once, not after the sleep.
func (a *Attacher) call(ctx context.Context, f func(context.Context) error) error {
	b := a.backoff()
	for {
		err := a.try(ctx, f)
		// As retry.OnError: Steps tries in all, the last error once they are spent.
		if err == nil || ctx.Err() != nil || !isTransient(err) || b.Steps <= 1 {
			return err
		}
		sleep := time.NewTimer(b.Step())
		select {
		case <-ctx.Done():
			sleep.Stop()
			return err
		case <-sleep.C:
		}
	}
}

// try is one try of call: one request under its own deadline.
func (a *Attacher) try(ctx context.Context, f func(context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, a.requestTimeout())
	defer cancel()
	return f(rctx)
}

// Call runs one API request with the Attacher's per-request deadline (RequestTimeout) and
// retries of transient errors (Backoff), stopping when ctx is done: the package's one retry
// helper, call, for callers outside the package (audit's reads).
func (a *Attacher) Call(ctx context.Context, f func(context.Context) error) error {
	return a.call(ctx, f)
}

// objectMeta is what the core keeps of a ConfigMap or Secret: never its data.
type objectMeta struct {
	UID    types.UID
	Labels map[string]string
	Owners []metav1.OwnerReference
}

// listMeta lists the metadata of the ConfigMaps or Secrets of ns that match sel, through the
// metadata client: the data never leaves the apiserver.
func (a *Attacher) listMeta(ctx context.Context, ns string, k Kind, sel labels.Selector) (map[string]objectMeta, error) {
	out := map[string]objectMeta{}
	err := a.call(ctx, func(ctx context.Context) error {
		l, err := a.Meta.Resource(k.Resource()).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return err
		}
		clear(out)
		for _, it := range l.Items {
			out[it.Name] = objectMeta{UID: it.UID, Labels: it.Labels, Owners: it.OwnerReferences}
		}
		return nil
	})
	if err != nil {
		return nil, a.readError(err, "list", k, ns)
	}
	return out, nil
}

// getMeta reads one object's metadata (nil, nil when it does not exist).
func (a *Attacher) getMeta(ctx context.Context, ns string, o Object) (*objectMeta, error) {
	var m *objectMeta
	err := a.call(ctx, func(ctx context.Context) error {
		obj, err := a.Meta.Resource(o.Kind.Resource()).Namespace(ns).Get(ctx, o.Name, metav1.GetOptions{})
		if err == nil {
			m = &objectMeta{UID: obj.UID, Labels: obj.Labels, Owners: obj.OwnerReferences}
		}
		return err
	})
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, a.readError(err, "get", o.Kind, ns)
	}
	return m, nil
}

// patch is the write of every mode: one add-only patch that makes each live ReplicaSet in rss
// an owner of o (uid, when set, is o's UID as a precondition). ReplicaSets being deleted are
// dropped; nothing to add is no request.
func (a *Attacher) patch(ctx context.Context, ns string, o Object, uid types.UID, rss []Owner) error {
	var live []Owner
	for _, rs := range rss {
		if !rs.Deleting {
			live = append(live, rs)
		}
	}
	if len(live) == 0 {
		return nil
	}
	body := ownerPatchFor(uid, live)
	return a.call(ctx, func(ctx context.Context) error {
		_, err := a.Meta.Resource(o.Kind.Resource()).Namespace(ns).Patch(ctx, o.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{})
		if err != nil && isTransient(err) {
			a.log().WithField("object", o.String()).WithError(err).Debug("transient error, retrying")
		}
		return err
	})
}

// existing keeps the ReplicaSets that a live read shows still exist with the same UID and no
// deletionTimestamp, and whose controller, if they have one, does too (kind, name and UID). A
// caller whose view may be stale (the controller's caches, audit's snapshot) confirms the
// owners of an object that has no ReplicaSet owner yet: if every ReplicaSet it adds were
// already gone, or about to be collected with its deleted workload, the garbage collector
// would delete the object, although a ReplicaSet the view does not show yet may use it. One
// consistent read by name per ReplicaSet and per controller (readByName).
func (a *Attacher) existing(ctx context.Context, ns string, rss []Owner) ([]Owner, error) {
	var out []Owner
	for _, rs := range rss {
		items, err := a.readOwner(ctx, ns, rs)
		if err != nil {
			return nil, fmt.Errorf("confirming %s %s in namespace %s: %w", rs.KindOf(), rs.Name, ns, err)
		}
		for _, it := range items {
			if it.GetUID() != rs.UID || it.GetDeletionTimestamp() != nil {
				continue
			}
			ok, err := a.controllerLive(ctx, ns, rs.Name, it)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, rs)
			}
		}
	}
	return out, nil
}

// ownerResources are the owner kinds other than a ReplicaSet, read as metadata to be confirmed.
var ownerResources = map[string]schema.GroupVersionResource{
	OwnerControllerRevision: appsv1.SchemeGroupVersion.WithResource("controllerrevisions"),
	OwnerJob:                {Group: "batch", Version: "v1", Resource: "jobs"},
	OwnerPod:                {Version: "v1", Resource: "pods"},
}

// readOwner reads one owner consistently by name (readByName): a ReplicaSet through the typed
// client as always, any other owner kind as metadata.
func (a *Attacher) readOwner(ctx context.Context, ns string, o Owner) ([]metav1.Object, error) {
	if o.KindOf() == OwnerReplicaSet {
		return a.readByName(ctx, replicaSetsResource,
			func(ctx context.Context) (metav1.Object, error) { return a.Client.GetReplicaSet(ctx, ns, o.Name) },
			func(ctx context.Context) ([]metav1.Object, error) {
				l, err := a.Client.ListReplicaSets(ctx, ns, metav1.ListOptions{FieldSelector: "metadata.name=" + o.Name})
				if err != nil {
					return nil, err
				}
				return asObjects(l.Items), nil
			})
	}
	gvr, ok := ownerResources[o.KindOf()]
	if !ok {
		return nil, fmt.Errorf("internal error: %q is not an owner kind", o.Kind)
	}
	return a.readByName(ctx, gvr,
		func(ctx context.Context) (metav1.Object, error) {
			return a.Meta.Resource(gvr).Namespace(ns).Get(ctx, o.Name, metav1.GetOptions{})
		},
		func(ctx context.Context) ([]metav1.Object, error) {
			l, err := a.Meta.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + o.Name})
			if err != nil {
				return nil, err
			}
			return asObjects(l.Items), nil
		})
}

var replicaSetsResource = appsv1.SchemeGroupVersion.WithResource("replicasets")

// controllerLive confirms that the ReplicaSet's controller exists with the UID its reference
// names and is not being deleted (true without a controller; false for a kind whose
// existence is not checked, which the users rule has blocked already). Metadata only.
func (a *Attacher) controllerLive(ctx context.Context, ns, rsName string, rs metav1.Object) (bool, error) {
	ref := metav1.GetControllerOfNoCopy(rs)
	if ref == nil || NamespaceController(ref, ns) {
		return true, nil // none, or an anchor's: its Namespace, which exists
	}
	k, ok := checkedKind(ref)
	if !ok {
		return false, nil
	}
	// A kind that is not served (its CRD uninstalled) has no objects: NotFound, so none.
	items, err := a.readByName(ctx, k.gvr,
		func(ctx context.Context) (metav1.Object, error) {
			return a.Meta.Resource(k.gvr).Namespace(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		},
		func(ctx context.Context) ([]metav1.Object, error) {
			l, err := a.Meta.Resource(k.gvr).Namespace(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + ref.Name})
			if err != nil {
				return nil, err
			}
			return asObjects(l.Items), nil
		})
	if err != nil {
		return false, fmt.Errorf("confirming %s %s, the controller of ReplicaSet %s, in namespace %s: %w", ref.Kind, ref.Name, rsName, ns, err)
	}
	for _, it := range items {
		if it.GetUID() == ref.UID && (it.GetDeletionTimestamp() == nil || Orphaning(it)) {
			return true, nil // live, or orphaning (the ReplicaSet lives on without it)
		}
	}
	return false, nil
}

// asObjects is a list's items as metav1.Objects (pointers into items).
func asObjects[T any, P interface {
	*T
	metav1.Object
}](items []T) []metav1.Object {
	out := make([]metav1.Object, len(items))
	for i := range items {
		out[i] = P(&items[i])
	}
	return out
}

// readByName reads one object consistently: the object, or none when it does not exist or
// its kind is not served. It is a GET (get) when the identity may get the resource: the
// apiserver answers it from etcd at once. Otherwise, and after a GET the RBAC refused (which is
// remembered per resource, so such a mode pays the extra request once), it is a list by name
// (list): list is in every mode's RBAC, and kube-apiserver ≥ 1.31 answers a consistent list from
// its watch cache only once that has caught up with etcd, which it asks at most every 100 ms.
// That wait was most of the controller's reaction to a new ReplicaSet (p50 ~90 ms on a quiet
// apiserver); the controller's RBAC grants get for this.
func (a *Attacher) readByName(ctx context.Context, gvr schema.GroupVersionResource, get func(context.Context) (metav1.Object, error),
	list func(context.Context) ([]metav1.Object, error)) ([]metav1.Object, error) {
	if _, refused := a.noGet.Load(gvr); !refused {
		var obj metav1.Object
		err := a.call(ctx, func(ctx context.Context) error {
			var err error
			obj, err = get(ctx)
			return err
		})
		switch {
		case err == nil:
			return []metav1.Object{obj}, nil
		case isNotFound(err):
			return nil, nil
		case !apierrors.IsForbidden(err):
			return nil, err
		}
		a.noGet.Store(gvr, true)
		a.log().WithField("resource", gvr.GroupResource().String()).Debug("get is not allowed: consistent reads by name are lists from now on")
	}
	var items []metav1.Object
	err := a.call(ctx, func(ctx context.Context) error {
		var err error
		items, err = list(ctx)
		return err
	})
	if isNotFound(err) {
		return nil, nil
	}
	return items, err
}

// controllersOf lists, metadata only and paged, each checked controller kind that controls a ReplicaSet
// other than the known workloads. A kind whose resource is not served (the Rollout CRD not
// installed) has no workloads: listed, and empty.
func (a *Attacher) controllersOf(ctx context.Context, ns string, rss []*appsv1.ReplicaSet, known []ControllerRef) ([]ControllerRef, []string, error) {
	out := append([]ControllerRef(nil), known...)
	isKnown := map[types.UID]bool{}
	for _, k := range known {
		isKnown[k.UID] = true
	}
	need := map[string]controllerKind{}
	for i := range rss {
		ref := metav1.GetControllerOfNoCopy(rss[i])
		if ref == nil || isKnown[ref.UID] {
			continue
		}
		if k, ok := checkedKind(ref); ok {
			need[k.kind] = k
		}
	}
	var listed []string
	for _, k := range checkedControllers {
		if _, ok := need[k.kind]; !ok {
			continue
		}
		var refs []ControllerRef
		err := a.pages(ctx, metav1.ListOptions{}, func() { refs = refs[:0] }, func(ctx context.Context, opts metav1.ListOptions) (string, error) {
			l, err := a.Meta.Resource(k.gvr).Namespace(ns).List(ctx, opts)
			if err != nil {
				return "", err
			}
			for i := range l.Items {
				refs = append(refs, RefOf(k.kind, &l.Items[i]))
			}
			return l.Continue, nil
		})
		switch {
		case isNotFound(err):
			// The kind is not served (its CRD uninstalled or being reinstalled): its
			// ReplicaSets' controllers cannot be confirmed, and such a ReplicaSet still runs
			// its pods, so they stay unknown (they block), as in the controller mode.
			continue
		case err != nil:
			return nil, nil, a.usageError(err, k.gvr.GroupResource().String(), ns)
		}
		listed = append(listed, k.kind)
		out = append(out, refs...)
	}
	return out, listed, nil
}

// readLeases reads the controllers' leader Leases, each with the deadline and retries of call:
// what MaintainedBy judges. A Lease that is absent, forbidden or unreadable counts as no
// controller; a forbidden one is also a warning naming the missing grant (a step upgraded
// before its RBAC keeps refusing shared config, and says why).
func (a *Attacher) readLeases(ctx context.Context, refs []LeaseRef) ([]ControllerLease, []string) {
	out := make([]ControllerLease, 0, len(refs))
	var warnings []string
	for _, ref := range refs {
		cl := ControllerLease{Ref: ref}
		var l *coordinationv1.Lease
		err := a.call(ctx, func(ctx context.Context) error {
			var err error
			l, err = a.Client.GetLease(ctx, ref.Namespace, ref.Name)
			return err
		})
		switch {
		case err == nil:
			cl.Found, cl.Labels, cl.Annotations = true, l.Labels, l.Annotations
			if h := l.Spec.HolderIdentity; h != nil {
				cl.Holder = *h
			}
			if r := l.Spec.RenewTime; r != nil {
				t := r.Time
				cl.RenewTime = &t
			}
			if d := l.Spec.LeaseDurationSeconds; d != nil {
				cl.Duration = time.Duration(*d) * time.Second
			}
		case isNotFound(err):
		case apierrors.IsForbidden(err):
			cl.Forbidden = true
			warnings = append(warnings, leaseForbiddenWarning(ref, a.rbacHint()))
		default:
			cl.Err = apiMessage(err)
		}
		out = append(out, cl)
	}
	return out, warnings
}

// ReadLeases is readLeases for callers outside the package (audit): the controllers' Leases,
// and a warning per Lease the RBAC refused.
func (a *Attacher) ReadLeases(ctx context.Context, refs []LeaseRef) ([]ControllerLease, []string) {
	return a.readLeases(ctx, refs)
}

// Resource is the API resource of a kind (core/v1 configmaps or secrets), as the metadata
// client addresses it.
func (k Kind) Resource() schema.GroupVersionResource {
	if k == KindSecret {
		return corev1.SchemeGroupVersion.WithResource("secrets")
	}
	return corev1.SchemeGroupVersion.WithResource("configmaps")
}

// createEvent writes one Event, with its own deadline: an event is best-effort and must not
// outlive the run that records it by more than that.
func createEvent(kube Kube, ev *corev1.Event) error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultRequestTimeout)
	defer cancel()
	_, err := kube.CreateEvent(ctx, ev)
	return err
}

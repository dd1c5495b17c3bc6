package soak

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsinformers "github.com/argoproj/argo-rollouts/pkg/client/informers/externalversions"
	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// Invariants 8 (no early deletion) and 9 (no leak): the users of every kind.

// anchorGrace is the controller mode's -anchor-grace in the soak: how long the anchor of a
// deleted workload keeps its objects (the delete-and-re-apply window).
const anchorGrace = 15 * time.Second

// leakSlack is what invariant 9 allows beyond the anchor grace: the anchor sync's requeue, a
// resync, and the garbage collector.
const leakSlack = 30 * time.Second

// mutableKinds are the kinds whose pod template a spec change replaces (their generation
// tells whether it changed); a ReplicaSet's, a Job's and a Pod's are fixed at creation.
var mutableKinds = map[string]bool{"Deployment": true, "Rollout": true, "StatefulSet": true, "DaemonSet": true, "CronJob": true}

// userRec is a user as the watch saw it: its template (generation gen) references refs since
// resourceVersion since (the first version seen with that generation and those references).
type userRec struct {
	kind, ns, name string
	uid            types.UID
	gen            int64
	since          uint64
	refs           map[string]bool // ns/Kind/name
}

func (u *userRec) String() string {
	return fmt.Sprintf("%s %s/%s (uid %s, generation %d)", u.kind, u.ns, u.name, short(u.uid), u.gen)
}

// users is invariant 8's record of who references what, from the watches.
type users struct {
	mu sync.Mutex
	by map[types.UID]*userRec
	// checked counts the deletions of opted-in objects looked at, flagged the ones confirmed.
	checked, candidates int
}

func rv(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// observe records a user's current state: a user being deleted, or a Pod that has finished,
// is no user any more.
func (us *users) observe(kind string, meta *metav1.ObjectMeta, spec *corev1.PodSpec, done bool) {
	if !soakNS(meta.Namespace) {
		return
	}
	us.mu.Lock()
	defer us.mu.Unlock()
	if meta.DeletionTimestamp != nil || done {
		delete(us.by, meta.UID)
		return
	}
	refs := map[string]bool{}
	for _, r := range cluster.PodConfigRefs(spec) {
		refs[objKey(meta.Namespace, r.Kind, r.Name)] = true
	}
	if old := us.by[meta.UID]; old != nil && (!mutableKinds[kind] || old.gen == meta.Generation) && mapsEqualBool(old.refs, refs) {
		return
	}
	us.by[meta.UID] = &userRec{kind: kind, ns: meta.Namespace, name: meta.Name, uid: meta.UID, gen: meta.Generation, since: rv(meta.ResourceVersion), refs: refs}
}

// counts returns checked and candidates.
func (us *users) counts() (checked, candidates int) {
	us.mu.Lock()
	defer us.mu.Unlock()
	return us.checked, us.candidates
}

func (us *users) forget(uid types.UID) {
	us.mu.Lock()
	delete(us.by, uid)
	us.mu.Unlock()
}

// before returns the users that referenced key in a version written before resourceVersion r.
func (us *users) before(key string, r uint64) []userRec {
	us.mu.Lock()
	defer us.mu.Unlock()
	var out []userRec
	for _, u := range us.by {
		if u.refs[key] && u.since < r {
			out = append(out, *u)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func mapsEqualBool(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// watchUsers feeds m.users from watches of every kind of user.
func (m *monitor) watchUsers(f informers.SharedInformerFactory, stop <-chan struct{}) {
	add := func(inf cache.SharedIndexInformer, conv func(any) (string, *metav1.ObjectMeta, *corev1.PodSpec, bool)) {
		obs := func(o any) {
			if kind, meta, spec, done := conv(o); meta != nil {
				m.users.observe(kind, meta, spec, done)
			}
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: obs, UpdateFunc: func(_, n any) { obs(n) },
			DeleteFunc: func(o any) {
				if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = t.Obj
				}
				if _, meta, _, _ := conv(o); meta != nil {
					m.users.forget(meta.UID)
				}
			}})
	}
	add(f.Apps().V1().Deployments().Informer(), func(o any) (string, *metav1.ObjectMeta, *corev1.PodSpec, bool) {
		if x, ok := o.(*appsv1.Deployment); ok {
			return "Deployment", &x.ObjectMeta, &x.Spec.Template.Spec, false
		}
		return "", nil, nil, false
	})
	add(f.Apps().V1().ReplicaSets().Informer(), func(o any) (string, *metav1.ObjectMeta, *corev1.PodSpec, bool) {
		if x, ok := o.(*appsv1.ReplicaSet); ok {
			return "ReplicaSet", &x.ObjectMeta, &x.Spec.Template.Spec, false
		}
		return "", nil, nil, false
	})
	add(f.Apps().V1().StatefulSets().Informer(), func(o any) (string, *metav1.ObjectMeta, *corev1.PodSpec, bool) {
		if x, ok := o.(*appsv1.StatefulSet); ok {
			return "StatefulSet", &x.ObjectMeta, &x.Spec.Template.Spec, false
		}
		return "", nil, nil, false
	})
	add(f.Apps().V1().DaemonSets().Informer(), func(o any) (string, *metav1.ObjectMeta, *corev1.PodSpec, bool) {
		if x, ok := o.(*appsv1.DaemonSet); ok {
			return "DaemonSet", &x.ObjectMeta, &x.Spec.Template.Spec, false
		}
		return "", nil, nil, false
	})
	add(f.Batch().V1().Jobs().Informer(), func(o any) (string, *metav1.ObjectMeta, *corev1.PodSpec, bool) {
		if x, ok := o.(*batchv1.Job); ok {
			return "Job", &x.ObjectMeta, &x.Spec.Template.Spec, false
		}
		return "", nil, nil, false
	})
	add(f.Batch().V1().CronJobs().Informer(), func(o any) (string, *metav1.ObjectMeta, *corev1.PodSpec, bool) {
		if x, ok := o.(*batchv1.CronJob); ok {
			return "CronJob", &x.ObjectMeta, &x.Spec.JobTemplate.Spec.Template.Spec, false
		}
		return "", nil, nil, false
	})
	add(f.Core().V1().Pods().Informer(), func(o any) (string, *metav1.ObjectMeta, *corev1.PodSpec, bool) {
		if x, ok := o.(*corev1.Pod); ok {
			return "Pod", &x.ObjectMeta, &x.Spec, podDone(x)
		}
		return "", nil, nil, false
	})
	rf := rolloutsinformers.NewSharedInformerFactory(m.s.wd.ro, 0)
	add(rf.Argoproj().V1alpha1().Rollouts().Informer(), func(o any) (string, *metav1.ObjectMeta, *corev1.PodSpec, bool) {
		if x, ok := o.(*v1alpha1.Rollout); ok {
			return "Rollout", &x.ObjectMeta, &x.Spec.Template.Spec, false
		}
		return "", nil, nil, false
	})
	rf.Start(stop)
}

func podDone(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// objectDeleted is invariant 8's check of one deletion of an opted-in object, seen by the
// watch at resourceVersion r (the delete's; for a delete the watch missed, the last version it
// saw, earlier): every user the watch saw referencing it in a version written before r is read
// again; one that is still there with the same UID, not being deleted, whose template has not
// changed since (same generation) and still references the object, and whose controllers are
// live, referenced it continuously across the deletion: a violation. The soak's own deletions
// (kubectl delete -f of a workload's manifests) are not looked at.
func (m *monitor) objectDeleted(x *obj, r uint64) {
	key := x.key()
	if t, ok := m.s.wd.deliberate.Load(key); ok && time.Since(t.(time.Time)) < time.Minute {
		return
	}
	m.users.mu.Lock()
	m.users.checked++
	m.users.mu.Unlock()
	cands := m.users.before(key, r)
	if len(cands) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, u := range cands {
		why, ok := m.continuous(ctx, u, key)
		if !ok {
			continue
		}
		m.users.mu.Lock()
		m.users.candidates++
		m.users.mu.Unlock()
		m.violation(8, "early "+key+" "+string(x.meta.UID), fmt.Sprintf("%s (uid %s) was deleted (resourceVersion %d; owners when last seen %s; managers %s) while %s referenced it, continuously from resourceVersion %d until after the deletion (%s)",
			key, short(x.meta.UID), r, refsString(x.meta.OwnerReferences), managers(x.meta.ManagedFields), u.String(), u.since, why))
		return
	}
}

// continuous reads user u again: it still exists with the same UID, is not being deleted, its
// template is the one seen (same generation for the kinds whose template changes) and still
// references key, and it is live (a ReplicaSet's controller, a Pod's controllers).
func (m *monitor) continuous(ctx context.Context, u userRec, key string) (string, bool) {
	var meta metav1.ObjectMeta
	var spec *corev1.PodSpec
	var ctl *metav1.OwnerReference
	switch u.kind {
	case "ReplicaSet":
		x, err := m.s.kube.AppsV1().ReplicaSets(u.ns).Get(ctx, u.name, metav1.GetOptions{})
		if err != nil {
			return "", false
		}
		meta, spec, ctl = x.ObjectMeta, &x.Spec.Template.Spec, metav1.GetControllerOf(x)
	case "Pod":
		x, err := m.s.kube.CoreV1().Pods(u.ns).Get(ctx, u.name, metav1.GetOptions{})
		if err != nil || podDone(x) {
			return "", false
		}
		meta, spec, ctl = x.ObjectMeta, &x.Spec, metav1.GetControllerOf(x)
	default:
		s, ok := m.getWorkload(ctx, u.kind, u.ns, u.name, u.uid)
		if !ok {
			return "", false
		}
		spec = s
		meta = metav1.ObjectMeta{UID: u.uid, Generation: u.gen}
		if mutableKinds[u.kind] {
			g, err := m.generation(ctx, u)
			if err != nil {
				return "", false
			}
			meta.Generation = g
		}
	}
	if meta.UID != u.uid || meta.DeletionTimestamp != nil || (mutableKinds[u.kind] && meta.Generation != u.gen) {
		return "", false
	}
	still := false
	for _, r := range cluster.PodConfigRefs(spec) {
		still = still || objKey(u.ns, r.Kind, r.Name) == key
	}
	if !still {
		return "", false
	}
	why := "read again after the deletion: same UID and template"
	if ctl != nil {
		live, chain := m.controllerLive(ctx, u.ns, ctl)
		if !live {
			return "", false
		}
		why += "; its controller " + chain + " live"
	}
	return why, true
}

// generation reads the generation of a workload of a kind whose template changes.
func (m *monitor) generation(ctx context.Context, u userRec) (int64, error) {
	var m2 metav1.Object
	var err error
	switch u.kind {
	case "Rollout":
		m2, err = m.s.wd.ro.ArgoprojV1alpha1().Rollouts(u.ns).Get(ctx, u.name, metav1.GetOptions{})
	case "Deployment":
		m2, err = m.s.kube.AppsV1().Deployments(u.ns).Get(ctx, u.name, metav1.GetOptions{})
	case "StatefulSet":
		m2, err = m.s.kube.AppsV1().StatefulSets(u.ns).Get(ctx, u.name, metav1.GetOptions{})
	case "DaemonSet":
		m2, err = m.s.kube.AppsV1().DaemonSets(u.ns).Get(ctx, u.name, metav1.GetOptions{})
	case "CronJob":
		m2, err = m.s.kube.BatchV1().CronJobs(u.ns).Get(ctx, u.name, metav1.GetOptions{})
	default:
		return 0, fmt.Errorf("kind %s", u.kind)
	}
	if err != nil {
		return 0, err
	}
	if m2.GetUID() != u.uid {
		return 0, fmt.Errorf("replaced")
	}
	return m2.GetGeneration(), nil
}

// controllerLive reads a ReplicaSet's or Pod's controller chain again: each exists with the
// UID named, is not being deleted (a ReplicaSet's Rollout or Deployment, a Pod's ReplicaSet and
// its controller, StatefulSet, DaemonSet or Job).
func (m *monitor) controllerLive(ctx context.Context, ns string, ref *metav1.OwnerReference) (bool, string) {
	chain := ref.Kind + " " + ref.Name
	if ref.Kind == "ReplicaSet" {
		rs, err := m.s.kube.AppsV1().ReplicaSets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil || rs.UID != ref.UID || rs.DeletionTimestamp != nil {
			return false, chain
		}
		up := metav1.GetControllerOf(rs)
		if up == nil {
			return true, chain
		}
		ok, c := m.controllerLive(ctx, ns, up)
		return ok, chain + " ← " + c
	}
	_, ok := m.getWorkload(ctx, ref.Kind, ns, ref.Name, ref.UID)
	return ok, chain
}

// --- invariant 9 ---

// leakBound is invariant 9's bound for an object no user has referenced since from: the
// anchor grace plus leakSlack plus the time the controller mode had no leader, apiserver
// downtime not counted. For an anchor whose workload is gone it is counted from the last
// controller-mode leader change if later (a new leader starts the grace of a gone workload
// again); start is where it is counted from.
func (s *soak) leakBound(from, now time.Time, workloadGone bool) (start time.Time, bound time.Duration) {
	start = from
	s.mu.Lock()
	defer s.mu.Unlock()
	if workloadGone {
		for _, c := range s.leaderChanges {
			if c.After(start) && c.Before(now) {
				start = c
			}
		}
	}
	return start, anchorGrace + leakSlack + overlap(s.leaderless, start, now)
}

// usersOf computes, for one snapshot, the objects referenced by anything that exists: a
// workload of any kind, a ReplicaSet, a StatefulSet's or DaemonSet's ControllerRevision, a Pod
// (being deleted or not), and the anchors (ControllerRevisions labelled as such) by UID.
func (snap *snapshot) usersOf() (map[string]bool, map[types.UID]bool) {
	refd := map[string]bool{}
	add := func(ns string, spec *corev1.PodSpec) {
		for _, r := range cluster.PodConfigRefs(spec) {
			refd[objKey(ns, r.Kind, r.Name)] = true
		}
	}
	for i := range snap.workloads {
		add(snap.workloads[i].ns, snap.workloads[i].spec)
	}
	for i := range snap.rss {
		add(snap.rss[i].Namespace, &snap.rss[i].Spec.Template.Spec)
	}
	for i := range snap.pods {
		if !podDone(&snap.pods[i]) {
			add(snap.pods[i].Namespace, &snap.pods[i].Spec)
		}
	}
	anchors := map[types.UID]bool{}
	for i := range snap.crs {
		cr := &snap.crs[i]
		if plugin.IsAnchor(cr) {
			anchors[cr.UID] = true
			continue
		}
		if t, ok := plugin.RevisionTemplate(cr); ok {
			add(cr.Namespace, &t.Spec)
		}
	}
	return refd, anchors
}

// checkLeaks9 is invariant 9 on one snapshot: an opted-in object that had an owner and that
// nothing references (no workload, ReplicaSet, revision or running Pod) must be gone within
// leakBound. One still there is read again: still owned by an anchor (every other owner gone)
// is a violation; an owner that is a user is a stale list; no owner left is invariant 3's.
func (m *monitor) checkLeaks9(snap *snapshot, now time.Time) {
	used, _ := snap.usersOf()
	var due []*obj
	m.mu.Lock()
	for key, o := range snap.objs {
		if !o.optedIn() || !m.hadOwner[key] || used[key] {
			delete(m.unused, key)
			continue
		}
		w := m.unused[key]
		if w == nil {
			m.unused[key] = &window{key: key, from: now}
			continue
		}
		if w.reported {
			continue
		}
		if start, bound := m.s.leakBound(w.from, now, false); m.s.effective(start, now) > bound {
			due = append(due, o)
		}
	}
	for key, w := range m.unused {
		if snap.objs[key] == nil {
			m.unusedCollected = append(m.unusedCollected, m.s.effective(w.from, now))
			delete(m.unused, key)
		}
	}
	m.mu.Unlock()
	for _, o := range due {
		m.confirmUnusedLeak(o)
	}
}

// confirmUnusedLeak reads the object and its owners again before reporting invariant 9.
func (m *monitor) confirmUnusedLeak(o *obj) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	meta, err := m.getObjectMeta(ctx, o.meta.Namespace, o.kind, o.meta.Name)
	if err != nil || meta.UID != o.meta.UID {
		return
	}
	var anchors []string
	gone := false // the workload of one of the anchors is gone
	for _, ref := range meta.OwnerReferences {
		exists, anchor := m.ownerExists(ctx, o.meta.Namespace, ref)
		if !exists {
			continue
		}
		if !anchor {
			return // a user owns it: the lists were stale
		}
		anchors = append(anchors, ref.Name)
		if cr, err := m.s.kube.AppsV1().ControllerRevisions(o.meta.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); err == nil {
			kind, name, _ := strings.Cut(cr.Annotations[plugin.AnchorWorkloadAnnotation], "/")
			if !m.workloadExists(ctx, kind, o.meta.Namespace, name) {
				gone = true
			}
		}
	}
	if len(anchors) == 0 {
		return // every owner gone: the garbage collector's (invariant 3)
	}
	m.mu.Lock()
	w := m.unused[o.key()]
	m.mu.Unlock()
	if w == nil {
		return
	}
	start, bound := m.s.leakBound(w.from, time.Now(), gone)
	if m.s.effective(start, time.Now()) <= bound {
		return // a new leader started the grace of the gone workload again
	}
	m.mu.Lock()
	w.reported = true
	from := w.from
	m.mu.Unlock()
	m.violation(9, "leak "+o.key()+" "+string(o.meta.UID), fmt.Sprintf("%s: no workload, ReplicaSet, revision or Pod has referenced it since +%.1fs, yet the anchor(s) %s still own it %v later (bound %v: anchor grace %v + %v, counted from +%.1fs; owners %s)",
		o.key(), from.Sub(m.s.start).Seconds(), strings.Join(anchors, ", "), m.s.effective(from, time.Now()).Round(time.Second), bound, anchorGrace, leakSlack,
		start.Sub(m.s.start).Seconds(), refsString(meta.OwnerReferences)))
}

// workloadExists reports whether workload kind/name exists in ns (an error other than
// NotFound counts as existing).
func (m *monitor) workloadExists(ctx context.Context, kind, ns, name string) bool {
	var err error
	switch kind {
	case "Rollout":
		_, err = m.s.wd.ro.ArgoprojV1alpha1().Rollouts(ns).Get(ctx, name, metav1.GetOptions{})
	case "Deployment":
		_, err = m.s.kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	case "StatefulSet":
		_, err = m.s.kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	case "DaemonSet":
		_, err = m.s.kube.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	case "CronJob":
		_, err = m.s.kube.BatchV1().CronJobs(ns).Get(ctx, name, metav1.GetOptions{})
	}
	return !apierrors.IsNotFound(err)
}

func (m *monitor) getObjectMeta(ctx context.Context, ns, kind, name string) (metav1.ObjectMeta, error) {
	if kind == "Secret" {
		s, err := m.s.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return metav1.ObjectMeta{}, err
		}
		return s.ObjectMeta, nil
	}
	cm, err := m.s.kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return metav1.ObjectMeta{}, err
	}
	return cm.ObjectMeta, nil
}

// ownerExists reads an owner: it exists with that UID and is not being deleted; anchor: it is
// a ControllerRevision labelled as an anchor.
func (m *monitor) ownerExists(ctx context.Context, ns string, ref metav1.OwnerReference) (exists, anchor bool) {
	var meta metav1.Object
	var err error
	switch ref.Kind {
	case "ReplicaSet":
		meta, err = m.s.kube.AppsV1().ReplicaSets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	case "ControllerRevision":
		meta, err = m.s.kube.AppsV1().ControllerRevisions(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	case "Job":
		meta, err = m.s.kube.BatchV1().Jobs(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	case "Pod":
		meta, err = m.s.kube.CoreV1().Pods(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	default:
		return true, false // unknown kind: counted as existing
	}
	if apierrors.IsNotFound(err) {
		return false, false
	}
	if err != nil {
		return true, false // cannot tell: counted as existing
	}
	if meta.GetUID() != ref.UID || meta.GetDeletionTimestamp() != nil {
		return false, false
	}
	return true, ref.Kind == "ControllerRevision" && plugin.IsAnchor(meta)
}

package soak

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// Bounds of the invariants.
const (
	unownedBound = 10 * time.Second // invariant 2
	collectBound = 30 * time.Second // invariant 3
)

// interval is a period of time; an open one has a zero to.
type interval struct{ from, to time.Time }

func (iv interval) end(now time.Time) time.Time {
	if iv.to.IsZero() {
		return now
	}
	return iv.to
}

// overlap returns how much of [from, to] the intervals cover.
func overlap(ivs []interval, from, to time.Time) time.Duration {
	var d time.Duration
	for _, iv := range ivs {
		a, b := iv.from, iv.end(to)
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			d += b.Sub(a)
		}
	}
	return d
}

// window is a period during which an object lacked an owner it should have.
type window struct {
	key      string // ns/Kind/name, or ns/Kind/name <- ReplicaSet
	from     time.Time
	reported bool
}

// obj is what the monitor reads of a ConfigMap or Secret.
type obj struct {
	meta metav1.ObjectMeta
	kind string
	data map[string]string
}

func (o *obj) key() string { return objKey(o.meta.Namespace, o.kind, o.meta.Name) }

func (o *obj) optedIn() bool { return o.meta.Labels[cluster.LabelRevisioned] == "true" }

// monitor checks the invariants every second on fresh lists (the admin identity, exempt from
// the throttling) and watches every change of a ConfigMap or Secret.
type monitor struct {
	s *soak

	mu           sync.Mutex
	unowned      map[string]*window // opted-in object referenced by a live ReplicaSet, no owner
	missingOwner map[string]*window // object <- a live ReplicaSet that references it but is not an owner
	missing      map[string]int     // ReplicaSet -> object it references that does not exist: ticks seen
	gone         map[string]int     // live workload -> object its template references that does not exist: ticks seen
	orphaned     map[string]*window // all owners gone, not collected yet
	hadOwner     map[string]bool
	reported     map[string]bool // violations reported once per key
	longest      struct {
		d   time.Duration
		key string
		at  time.Duration // since start
	}
	closedWindows  []time.Duration
	collected      []time.Duration // owners gone → collected, of those a tick saw waiting (1 s resolution)
	collectedAll   int             // objects that had an owner and are gone
	ticks, skipped int

	// reaction times, from the watches
	rsAdded   map[types.UID]time.Time
	objAdded  map[string]time.Time
	reactions []reaction
	writes    int // ConfigMap/Secret updates seen

	// users: invariant 8's record of who references what; unused: invariant 9's windows (an
	// opted-in object that had an owner and that nothing references), unusedCollected how long
	// those that went took (apiserver downtime not counted).
	users           *users
	unused          map[string]*window
	unusedCollected []time.Duration
	// lateWrites: updates with nothing changed that the watch delivered lateDelivery or more
	// after the write (invariant 5 does not judge them).
	lateWrites []string
	// checks are the invariant 8 checks running; closed: no new one starts (the run is over).
	checks sync.WaitGroup
	closed atomic.Bool
}

type reaction struct {
	d         time.Duration
	throttled bool
	what      string
	at        time.Duration // since start
	// nearRestart: within 35 s after an apiserver restart, when client-go's reflectors (the
	// controller mode's and this watch's) may still be backing off.
	nearRestart bool
}

func newMonitor(s *soak) *monitor {
	return &monitor{s: s, unowned: map[string]*window{}, missingOwner: map[string]*window{}, missing: map[string]int{}, gone: map[string]int{},
		orphaned: map[string]*window{}, hadOwner: map[string]bool{}, reported: map[string]bool{},
		rsAdded: map[types.UID]time.Time{}, objAdded: map[string]time.Time{}, users: &users{by: map[types.UID]*userRec{}}, unused: map[string]*window{}}
}

func soakNS(ns string) bool { return strings.HasPrefix(ns, nsPrefix) }

// watch starts informers for the reaction times and the needless-write check (invariant 5).
func (m *monitor) watch(stop <-chan struct{}) {
	f := informers.NewSharedInformerFactory(m.s.kube, 0)
	started := time.Now()
	rsInf := f.Apps().V1().ReplicaSets().Informer()
	_, _ = rsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(o any) {
		rs, ok := o.(*appsv1.ReplicaSet)
		if !ok || !soakNS(rs.Namespace) || time.Since(started) < 2*time.Second {
			return
		}
		m.mu.Lock()
		if _, seen := m.rsAdded[rs.UID]; !seen {
			m.rsAdded[rs.UID] = time.Now()
		}
		m.mu.Unlock()
	}})
	handler := func(kind string, conv func(any) *obj) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) {
				x := conv(o)
				if x == nil || !soakNS(x.meta.Namespace) {
					return
				}
				m.mu.Lock()
				if _, ok := m.objAdded[x.key()]; !ok {
					m.objAdded[x.key()] = time.Now()
				}
				m.mu.Unlock()
			},
			UpdateFunc: func(o, n any) {
				a, b := conv(o), conv(n)
				if a == nil || b == nil || !soakNS(b.meta.Namespace) || a.meta.ResourceVersion == b.meta.ResourceVersion {
					return
				}
				m.mu.Lock()
				m.writes++
				m.mu.Unlock()
				m.ownersAdded(b, a.meta.OwnerReferences)
				// A different UID is another object: deleted and created again under the same name
				// between two versions the watch delivered (after a relist it sees that as an
				// update). Its owners may well be the same (an anchor outlives a recreate).
				same := a.meta.UID == b.meta.UID && reflect.DeepEqual(a.meta.OwnerReferences, b.meta.OwnerReferences) && reflect.DeepEqual(a.meta.Labels, b.meta.Labels) &&
					reflect.DeepEqual(a.meta.Annotations, b.meta.Annotations) && reflect.DeepEqual(a.data, b.data) &&
					reflect.DeepEqual(a.meta.Finalizers, b.meta.Finalizers) && (a.meta.DeletionTimestamp == nil) == (b.meta.DeletionTimestamp == nil)
				// A write this watch sees long after it was made (the newest managedFields time,
				// 1 s resolution) came after a gap in the watch (its reflector relisted once it
				// could watch again): the versions in between may be missed, so that a change and
				// its reversal (an owner added and removed by the garbage collector) look like one
				// write that changed nothing. Counted, not judged.
				if last := newestManaged(b.meta.ManagedFields); same && !last.IsZero() && time.Since(last) > lateDelivery {
					m.mu.Lock()
					m.lateWrites = append(m.lateWrites, fmt.Sprintf("%s resourceVersion %s → %s, written %v before the watch delivered it",
						b.key(), a.meta.ResourceVersion, b.meta.ResourceVersion, time.Since(last).Round(time.Second)))
					m.mu.Unlock()
					same = false
				}
				if same {
					m.violation(5, "rewrite "+b.key()+" "+b.meta.ResourceVersion, fmt.Sprintf("%s rewritten with nothing changed (resourceVersion %s → %s; managers %s)",
						b.key(), a.meta.ResourceVersion, b.meta.ResourceVersion, managers(b.meta.ManagedFields)))
				}
			},
			// Invariant 8: a deletion of an opted-in object, checked against the users the
			// watches saw referencing it before it.
			DeleteFunc: func(o any) {
				if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = t.Obj
				}
				x := conv(o)
				if x == nil || !soakNS(x.meta.Namespace) || !x.optedIn() {
					return
				}
				if m.closed.Load() {
					return
				}
				m.checks.Add(1)
				go func() {
					defer m.checks.Done()
					m.objectDeleted(x, rv(x.meta.ResourceVersion))
				}()
			},
		}
	}
	_, _ = f.Core().V1().ConfigMaps().Informer().AddEventHandler(handler("ConfigMap", func(o any) *obj {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok {
			return nil
		}
		return &obj{meta: cm.ObjectMeta, kind: "ConfigMap", data: cm.Data}
	}))
	_, _ = f.Core().V1().Secrets().Informer().AddEventHandler(handler("Secret", func(o any) *obj {
		s, ok := o.(*corev1.Secret)
		if !ok {
			return nil
		}
		return &obj{meta: s.ObjectMeta, kind: "Secret", data: secretData(s)}
	}))
	m.watchUsers(f, stop)
	f.Start(stop)
}

// lateDelivery: an update the watch delivers this long after the write (its newest
// managedFields time) came after a gap in the watch.
const lateDelivery = 15 * time.Second

// newestManaged is the newest time among the managedFields entries (zero: none).
func newestManaged(mf []metav1.ManagedFieldsEntry) time.Time {
	var t time.Time
	for _, e := range mf {
		if e.Time != nil && e.Time.After(t) {
			t = e.Time.Time
		}
	}
	return t
}

func secretData(s *corev1.Secret) map[string]string {
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out
}

func managers(mf []metav1.ManagedFieldsEntry) string {
	var out []string
	for _, e := range mf {
		t := ""
		if e.Time != nil {
			t = e.Time.Format("15:04:05")
		}
		out = append(out, fmt.Sprintf("%s/%s@%s", e.Manager, e.Operation, t))
	}
	return strings.Join(out, ", ")
}

// ownersAdded records a reaction time for each ReplicaSet that became an owner of x.
func (m *monitor) ownersAdded(x *obj, before []metav1.OwnerReference) {
	now := time.Now()
	had := map[types.UID]bool{}
	for _, r := range before {
		had[r.UID] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range x.meta.OwnerReferences {
		if had[r.UID] || r.Kind != "ReplicaSet" {
			continue
		}
		t0, ok := m.rsAdded[r.UID]
		if !ok {
			continue
		}
		if t1, ok := m.objAdded[x.key()]; ok && t1.After(t0) {
			t0 = t1
		}
		if m.s.overlapDown(t0, now) > 0 {
			continue
		}
		m.reactions = append(m.reactions, reaction{d: now.Sub(t0), throttled: m.s.throttledAt(t0),
			nearRestart: m.s.overlapDown(t0.Add(-35*time.Second), now) > 0,
			what:        x.key() + " <- ReplicaSet " + r.Name, at: t0.Sub(m.s.start)})
	}
}

// violation records an invariant violation once per key, with the operation log up to now.
func (m *monitor) violation(inv int, key, msg string) {
	m.mu.Lock()
	if m.reported[key] {
		m.mu.Unlock()
		return
	}
	m.reported[key] = true
	m.mu.Unlock()
	m.s.addViolation(inv, msg)
}

// run ticks every second until stop.
func (m *monitor) run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		m.s.observeLeader()
		if !m.s.apiUp() {
			m.mu.Lock()
			m.skipped++
			m.mu.Unlock()
			continue
		}
		if err := m.tick(); err != nil {
			m.mu.Lock()
			m.skipped++
			m.mu.Unlock()
		}
	}
}

type snapshot struct {
	rss  []appsv1.ReplicaSet
	objs map[string]*obj
	// workloads: every Rollout, Deployment, StatefulSet, DaemonSet, Job and CronJob (of the
	// soak's namespaces) with its current pod template; controllers: the live (not being
	// deleted) Rollouts and Deployments, "Kind/ns/name" -> UID.
	workloads   []workloadTpl
	controllers map[string]types.UID
	// blocked: the objects a live pod template that cannot own uses (StatefulSet, DaemonSet,
	// Job, CronJob): the core leaves them alone, no owner is due.
	blocked map[string]string
	// pods and crs: every Pod and ControllerRevision; alive: the UIDs of the ReplicaSets,
	// ControllerRevisions, Jobs and Pods that exist and are not being deleted (owners that keep
	// an object); used: the objects a live user of any kind references (a live ReplicaSet, a
	// live workload's current template, a live Job, a running Pod).
	pods  []corev1.Pod
	crs   []appsv1.ControllerRevision
	alive map[types.UID]bool
	used  map[string]bool
}

// workloadTpl is a workload of any kind as the monitor reads it.
type workloadTpl struct {
	kind, ns, name string
	uid            types.UID
	live           bool // exists and is not being deleted
	spec           *corev1.PodSpec
}

func (w workloadTpl) String() string { return w.kind + " " + w.ns + "/" + w.name }

// canOwn: the kind's pods run from ReplicaSets, which own the objects.
func canOwn(kind string) bool { return kind == "Rollout" || kind == "Deployment" }

// listWorkloads lists the workloads of every kind in the soak's namespaces.
func (m *monitor) listWorkloads(ctx context.Context) ([]workloadTpl, error) {
	var out []workloadTpl
	add := func(kind string, meta metav1.ObjectMeta, spec *corev1.PodSpec) {
		if soakNS(meta.Namespace) {
			out = append(out, workloadTpl{kind: kind, ns: meta.Namespace, name: meta.Name, uid: meta.UID, live: meta.DeletionTimestamp == nil, spec: spec})
		}
	}
	rol, err := m.s.wd.ro.ArgoprojV1alpha1().Rollouts("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range rol.Items {
		add("Rollout", rol.Items[i].ObjectMeta, &rol.Items[i].Spec.Template.Spec)
	}
	dl, err := m.s.kube.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range dl.Items {
		add("Deployment", dl.Items[i].ObjectMeta, &dl.Items[i].Spec.Template.Spec)
	}
	stl, err := m.s.kube.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range stl.Items {
		add("StatefulSet", stl.Items[i].ObjectMeta, &stl.Items[i].Spec.Template.Spec)
	}
	dsl, err := m.s.kube.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range dsl.Items {
		add("DaemonSet", dsl.Items[i].ObjectMeta, &dsl.Items[i].Spec.Template.Spec)
	}
	jl, err := m.s.kube.BatchV1().Jobs("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range jl.Items {
		add("Job", jl.Items[i].ObjectMeta, &jl.Items[i].Spec.Template.Spec)
	}
	cjl, err := m.s.kube.BatchV1().CronJobs("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range cjl.Items {
		add("CronJob", cjl.Items[i].ObjectMeta, &cjl.Items[i].Spec.JobTemplate.Spec.Template.Spec)
	}
	return out, nil
}

func (m *monitor) list(ctx context.Context) (*snapshot, error) {
	// Workloads first, then ReplicaSets: an object a listed workload or ReplicaSet references
	// was created before it, so a later list shows it unless it was deleted. (A controller
	// created after its list makes its new ReplicaSets not live for one tick; one deleted
	// after it, its ReplicaSets live for one more.)
	wls, err := m.listWorkloads(ctx)
	if err != nil {
		return nil, err
	}
	rsl, err := m.s.kube.AppsV1().ReplicaSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	cml, err := m.s.kube.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	sl, err := m.s.kube.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pl, err := m.s.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	crl, err := m.s.kube.AppsV1().ControllerRevisions("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	snap := &snapshot{objs: map[string]*obj{}, workloads: wls, controllers: map[string]types.UID{}, blocked: map[string]string{},
		alive: map[types.UID]bool{}, used: map[string]bool{}}
	use := func(ns string, spec *corev1.PodSpec) {
		for _, r := range cluster.PodConfigRefs(spec) {
			snap.used[objKey(ns, r.Kind, r.Name)] = true
		}
	}
	for _, p := range pl.Items {
		if !soakNS(p.Namespace) {
			continue
		}
		snap.pods = append(snap.pods, p)
		if p.DeletionTimestamp == nil {
			snap.alive[p.UID] = true
			if !podDone(&p) {
				use(p.Namespace, &p.Spec)
			}
		}
	}
	for _, cr := range crl.Items {
		if soakNS(cr.Namespace) {
			snap.crs = append(snap.crs, cr)
			if cr.DeletionTimestamp == nil {
				snap.alive[cr.UID] = true
			}
		}
	}
	for _, w := range wls {
		if w.live {
			use(w.ns, w.spec)
			if w.kind == "Job" {
				snap.alive[w.uid] = true
			}
		}
	}
	for _, w := range wls {
		if !w.live {
			continue
		}
		if canOwn(w.kind) {
			snap.controllers[w.kind+"/"+w.ns+"/"+w.name] = w.uid
			continue
		}
		for _, r := range cluster.PodConfigRefs(w.spec) {
			k := objKey(w.ns, r.Kind, r.Name)
			if snap.blocked[k] == "" {
				snap.blocked[k] = w.String()
			}
		}
	}
	for _, rs := range rsl.Items {
		if soakNS(rs.Namespace) {
			snap.rss = append(snap.rss, rs)
			if rs.DeletionTimestamp == nil {
				snap.alive[rs.UID] = true
			}
		}
	}
	for i := range snap.rss {
		if snap.liveRS(&snap.rss[i]) {
			use(snap.rss[i].Namespace, &snap.rss[i].Spec.Template.Spec)
		}
	}
	for _, cm := range cml.Items {
		if soakNS(cm.Namespace) {
			o := &obj{meta: cm.ObjectMeta, kind: "ConfigMap", data: cm.Data}
			snap.objs[o.key()] = o
		}
	}
	for i := range sl.Items {
		s := &sl.Items[i]
		if soakNS(s.Namespace) && s.Type != corev1.SecretTypeServiceAccountToken {
			o := &obj{meta: s.ObjectMeta, kind: "Secret", data: secretData(s)}
			snap.objs[o.key()] = o
		}
	}
	return snap, nil
}

// liveRSMeta: not being deleted, controlled by a Rollout or a Deployment.
func liveRSMeta(rs *appsv1.ReplicaSet) bool {
	ref := metav1.GetControllerOf(rs)
	return rs.DeletionTimestamp == nil && ref != nil && canOwn(ref.Kind)
}

// liveRS: not being deleted, and its controller (kind, name, UID) exists and is not being
// deleted. A ReplicaSet whose controller is gone (deleted, or deleted and recreated: another
// UID) is the garbage collector's: it never becomes an owner, and its references are not due.
func (snap *snapshot) liveRS(rs *appsv1.ReplicaSet) bool {
	if !liveRSMeta(rs) {
		return false
	}
	ref := metav1.GetControllerOf(rs)
	return snap.controllers[ref.Kind+"/"+rs.Namespace+"/"+ref.Name] == ref.UID
}

// tick checks invariants 1-5 on one set of lists.
func (m *monitor) tick() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snap, err := m.list(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	m.mu.Lock()
	m.ticks++
	m.mu.Unlock()
	referenced := map[string]bool{}
	seenUnowned := map[string]bool{}
	seenMissingOwner := map[string]bool{}
	seenMissing := map[string]bool{}
	for i := range snap.rss {
		rs := &snap.rss[i]
		if !snap.liveRS(rs) {
			continue
		}
		for _, r := range cluster.PodConfigRefs(&rs.Spec.Template.Spec) {
			key := objKey(rs.Namespace, r.Kind, r.Name)
			referenced[key] = true
			o := snap.objs[key]
			pair := key + " <- ReplicaSet " + rs.Name
			if o == nil {
				seenMissing[pair] = true
				m.mu.Lock()
				m.missing[pair]++
				n := m.missing[pair]
				m.mu.Unlock()
				if n >= 2 {
					m.confirmMissing(rs, r, pair)
				}
				continue
			}
			if !o.optedIn() || snap.blocked[key] != "" {
				continue // a blocked object is left alone (invariant 7 checks it stays unowned)
			}
			if len(o.meta.OwnerReferences) == 0 {
				seenUnowned[key] = true
			}
			owner := false
			for _, ref := range o.meta.OwnerReferences {
				owner = owner || ref.UID == rs.UID
			}
			if !owner {
				seenMissingOwner[pair] = true
			}
		}
	}
	// Invariant 7: no object that a live workload's current template references is missing,
	// and one that a template which cannot own through a ReplicaSet uses (StatefulSet, ...)
	// gains no ReplicaSet owner unless an owner that stands for that workload (its revision or
	// its anchor, written by the controller) is there too.
	seenGone := map[string]bool{}
	for i := range snap.workloads {
		wl := &snap.workloads[i]
		if !wl.live {
			continue
		}
		for _, r := range cluster.PodConfigRefs(wl.spec) {
			key := objKey(wl.ns, r.Kind, r.Name)
			pair := key + " <- " + wl.String()
			o := snap.objs[key]
			if o == nil {
				seenGone[pair] = true
				m.mu.Lock()
				m.gone[pair]++
				n := m.gone[pair]
				m.mu.Unlock()
				if n >= 2 {
					m.confirmGone(*wl, r, pair)
				}
				continue
			}
			// Every user owns (the controller): a StatefulSet's or DaemonSet's revision, or its
			// anchor (<name>-cma-<kind>-<hash>), among the owners stands for the workload.
			standsFor := false
			for _, ref := range o.meta.OwnerReferences {
				standsFor = standsFor || (ref.Kind == "ControllerRevision" && strings.HasPrefix(ref.Name, wl.name+"-"))
			}
			if !canOwn(wl.kind) && !standsFor {
				for _, ref := range o.meta.OwnerReferences {
					if ref.Kind == "ReplicaSet" {
						m.violation(7, "blocked owner "+key+" "+string(ref.UID), fmt.Sprintf("%s, used by %s (which cannot own it: adoption is blocked), gained the ReplicaSet owner %s: the garbage collector deletes it with its ReplicaSet owners while %s still uses it (owners %s)",
							key, wl, ref.Name, wl, refsString(o.meta.OwnerReferences)))
					}
				}
			}
		}
	}
	// Invariants 4 and 5 (controller: true), and 3 (collected once the owners are gone).
	for key, o := range snap.objs {
		// Compared with what this very object (UID) was created with: the list may show one
		// that was deleted and created again since.
		if tr := m.s.tracked(key); tr != nil && tr.uid == o.meta.UID {
			if !reflect.DeepEqual(tr.data, o.data) {
				m.violation(4, "data "+key, fmt.Sprintf("%s: data changed: %v → %v", key, tr.data, o.data))
			}
			if !mapsEqual(tr.labels, o.meta.Labels) {
				m.violation(4, "labels "+key, fmt.Sprintf("%s: labels changed: %v → %v", key, tr.labels, o.meta.Labels))
			}
			if !mapsEqual(tr.annotations, o.meta.Annotations) {
				m.violation(4, "annotations "+key, fmt.Sprintf("%s: annotations changed: %v → %v", key, tr.annotations, o.meta.Annotations))
			}
			if tr.static && len(o.meta.OwnerReferences) > 0 {
				m.violation(4, "static owner "+key, fmt.Sprintf("the static unlabelled %s gained owner references %s", key, refsString(o.meta.OwnerReferences)))
			}
		}
		for _, ref := range o.meta.OwnerReferences {
			if ref.Controller != nil && *ref.Controller {
				m.violation(5, "controller "+key, fmt.Sprintf("%s has a controller: true owner reference %s", key, refsString(o.meta.OwnerReferences)))
			}
		}
		if !o.optedIn() {
			continue
		}
		m.mu.Lock()
		if len(o.meta.OwnerReferences) > 0 {
			m.hadOwner[key] = true
		}
		had := m.hadOwner[key]
		m.mu.Unlock()
		gone := had && !referenced[key]
		for _, ref := range o.meta.OwnerReferences {
			// Every user owns: a ReplicaSet, a ControllerRevision (a StatefulSet's or
			// DaemonSet's revision, an anchor), a Job or a Pod that exists keeps the object.
			if snap.alive[ref.UID] {
				gone = false
			}
		}
		m.mu.Lock()
		w := m.orphaned[key]
		if !gone {
			delete(m.orphaned, key)
		} else if w == nil {
			m.orphaned[key] = &window{key: key, from: now}
		}
		m.mu.Unlock()
		if gone && w != nil && !w.reported && m.s.effective(w.from, now) > collectBound {
			m.confirmLeak(o, w)
		}
	}
	m.mu.Lock()
	for k := range m.hadOwner {
		if snap.objs[k] == nil {
			delete(m.hadOwner, k)
			m.collectedAll++
		}
	}
	for k, w := range m.orphaned {
		if snap.objs[k] == nil {
			delete(m.orphaned, k)
			m.collected = append(m.collected, m.s.effective(w.from, now))
			if w.reported {
				m.s.leakCollected(k, now)
			}
		}
	}
	for k := range m.missing {
		if !seenMissing[k] {
			delete(m.missing, k)
		}
	}
	for k := range m.gone {
		if !seenGone[k] {
			delete(m.gone, k)
		}
	}
	m.mu.Unlock()
	m.windows(m.unowned, seenUnowned, now, true, snap)
	m.windows(m.missingOwner, seenMissingOwner, now, false, snap)
	m.checkLeaks9(snap, now)
	return nil
}

// windows opens, extends and closes the windows of one kind and reports those over the bound.
func (m *monitor) windows(ws map[string]*window, seen map[string]bool, now time.Time, unowned bool, snap *snapshot) {
	m.mu.Lock()
	var over []*window
	for k := range seen {
		if ws[k] == nil {
			ws[k] = &window{key: k, from: now}
		}
	}
	for k, w := range ws {
		d := m.s.effective(w.from, now)
		if !seen[k] {
			delete(ws, k)
			if unowned {
				m.closedWindows = append(m.closedWindows, d)
			}
		}
		if unowned && d > m.longest.d {
			m.longest.d, m.longest.key, m.longest.at = d, k, w.from.Sub(m.s.start)
		}
		if seen[k] && !w.reported && d > m.s.bound(w.from, now) {
			over = append(over, w)
		}
	}
	m.mu.Unlock()
	for _, w := range over {
		w.reported = true
		what := "no owner"
		if !unowned {
			what = "not owned by a ReplicaSet that references it"
		}
		m.violation(2, "window "+w.key+fmt.Sprint(w.from.UnixNano()), fmt.Sprintf("%s: %s for %v (bound %v; window opened at +%v)",
			w.key, what, m.s.effective(w.from, now).Round(time.Millisecond), m.s.bound(w.from, now), w.from.Sub(m.s.start).Round(time.Second)))
	}
}

// confirmMissing re-reads the object and the ReplicaSet before reporting invariant 1.
func (m *monitor) confirmMissing(rs *appsv1.ReplicaSet, r cluster.ConfigRef, pair string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	if r.Kind == "Secret" {
		_, err = m.s.kube.CoreV1().Secrets(rs.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
	} else {
		_, err = m.s.kube.CoreV1().ConfigMaps(rs.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
	}
	if !apierrors.IsNotFound(err) {
		return
	}
	cur, err := m.s.kube.AppsV1().ReplicaSets(rs.Namespace).Get(ctx, rs.Name, metav1.GetOptions{})
	if err != nil || cur.UID != rs.UID || !liveRSMeta(cur) {
		return
	}
	ref := metav1.GetControllerOf(cur)
	if _, ok := m.getWorkload(ctx, ref.Kind, cur.Namespace, ref.Name, ref.UID); !ok {
		return // its controller is gone: the garbage collector's
	}
	m.violation(1, "missing "+pair, fmt.Sprintf("ReplicaSet %s/%s (revision %s%s) references %s, which does not exist: a pod of it would fail with CreateContainerConfigError",
		rs.Namespace, rs.Name, rs.Annotations["rollout.argoproj.io/revision"], rs.Annotations["deployment.kubernetes.io/revision"], r))
}

// getWorkload re-reads a workload: its pod template if it exists with that UID and is not
// being deleted.
func (m *monitor) getWorkload(ctx context.Context, kind, ns, name string, uid types.UID) (*corev1.PodSpec, bool) {
	var meta metav1.ObjectMeta
	var spec *corev1.PodSpec
	switch kind {
	case "Rollout":
		ro, err := m.s.wd.ro.ArgoprojV1alpha1().Rollouts(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, false
		}
		meta, spec = ro.ObjectMeta, &ro.Spec.Template.Spec
	case "Deployment":
		d, err := m.s.kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, false
		}
		meta, spec = d.ObjectMeta, &d.Spec.Template.Spec
	case "StatefulSet":
		x, err := m.s.kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, false
		}
		meta, spec = x.ObjectMeta, &x.Spec.Template.Spec
	case "DaemonSet":
		x, err := m.s.kube.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, false
		}
		meta, spec = x.ObjectMeta, &x.Spec.Template.Spec
	case "Job":
		x, err := m.s.kube.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, false
		}
		meta, spec = x.ObjectMeta, &x.Spec.Template.Spec
	case "CronJob":
		x, err := m.s.kube.BatchV1().CronJobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, false
		}
		meta, spec = x.ObjectMeta, &x.Spec.JobTemplate.Spec.Template.Spec
	default:
		return nil, false
	}
	if meta.UID != uid || meta.DeletionTimestamp != nil {
		return nil, false
	}
	return spec, true
}

// confirmGone re-reads the object and the workload before reporting invariant 7: the object
// is not found, and the workload (same UID, not being deleted) still references it.
func (m *monitor) confirmGone(wl workloadTpl, r cluster.ConfigRef, pair string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	if r.Kind == "Secret" {
		_, err = m.s.kube.CoreV1().Secrets(wl.ns).Get(ctx, r.Name, metav1.GetOptions{})
	} else {
		_, err = m.s.kube.CoreV1().ConfigMaps(wl.ns).Get(ctx, r.Name, metav1.GetOptions{})
	}
	if !apierrors.IsNotFound(err) {
		return
	}
	spec, ok := m.getWorkload(ctx, wl.kind, wl.ns, wl.name, wl.uid)
	if !ok {
		return
	}
	still := false
	for _, x := range cluster.PodConfigRefs(spec) {
		still = still || x == r
	}
	if !still {
		return
	}
	m.violation(7, "gone "+pair, fmt.Sprintf("%s (live, uid %s) references %s in its current pod template, which was deleted: a pod of it would fail with CreateContainerConfigError",
		wl, short(wl.uid), r))
}

// confirmLeak re-reads the object and its owners before reporting invariant 3.
func (m *monitor) confirmLeak(o *obj, w *window) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var meta metav1.ObjectMeta
	if o.kind == "Secret" {
		s, err := m.s.kube.CoreV1().Secrets(o.meta.Namespace).Get(ctx, o.meta.Name, metav1.GetOptions{})
		if err != nil {
			return
		}
		meta = s.ObjectMeta
	} else {
		cm, err := m.s.kube.CoreV1().ConfigMaps(o.meta.Namespace).Get(ctx, o.meta.Name, metav1.GetOptions{})
		if err != nil {
			return
		}
		meta = cm.ObjectMeta
	}
	for _, ref := range meta.OwnerReferences {
		// Every user owns: a ReplicaSet, a StatefulSet's or DaemonSet's revision, an anchor, a
		// Job or a Pod that exists keeps the object, as the garbage collector sees it.
		if exists, _ := m.ownerExists(ctx, o.meta.Namespace, ref); exists {
			return
		}
	}
	w.reported = true
	// Reported at the end: a fresh kube-controller-manager tells whether the garbage
	// collector's graph lost the owner's delete event (it then collects the object at once)
	// or the owner references keep it alive.
	m.s.addLeak(leak{ns: o.meta.Namespace, kind: o.kind, name: o.meta.Name, from: w.from,
		msg: fmt.Sprintf("%s: every owner is gone (owners now %s) and no live ReplicaSet references it, yet it is not collected after %v",
			o.key(), refsString(meta.OwnerReferences), m.s.effective(w.from, time.Now()).Round(time.Second))})
}

func refsString(refs []metav1.OwnerReference) string {
	var out []string
	for _, r := range refs {
		c := ""
		if r.Controller != nil && *r.Controller {
			c = ",controller"
		}
		out = append(out, fmt.Sprintf("%s/%s(%s%s)", r.Kind, r.Name, string(r.UID)[:8], c))
	}
	sort.Strings(out)
	return "[" + strings.Join(out, " ") + "]"
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

package bench

// The other users the controller keeps (make bench-scale): ControllerRevisions of
// StatefulSets, Jobs, bare Pods and anchors, each kind added by a leaf of its own so that the
// report (report_scale_test.go) fits its cost from that leaf alone, and predicts the mix of
// kinds at the largest size from costs fitted elsewhere. No StatefulSet, Job or scheduler
// controller runs in the benchmark's cluster: the objects stay as created (revisions as their
// StatefulSets would have written them, Jobs without pods, Pods Pending).

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

const (
	// scaleRevisions ControllerRevisions (scaleRSPerWorkload per StatefulSet, whose own
	// template uses nothing), scaleJobs Jobs and scalePods bare Pods, each using an opted-in
	// ConfigMap and an opted-in Secret of its own, as a ReplicaSet does.
	scaleRevisions, scaleJobs, scalePods = 2000, 1000, 2000
	// scaleAnchors StatefulSets whose template uses an opted-in ConfigMap and Secret of its
	// own: the controller keeps an anchor for each.
	scaleAnchors = 2000
)

// userKinds are the metrics keys of the user kinds a phase records, in the order of their leaves.
var userKinds = []string{"revisions", "jobs", "pods", "anchors"}

// createOptedIn creates the opted-in ConfigMap and Secret a user of another kind uses.
func (e *scaleEnv) createOptedIn(ctx context.Context, ns, cm, sec string) error {
	if _, err := e.admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Labels: optInLabels},
		Data: map[string]string{"app.yaml": strings.Repeat("k: v\n", 40)}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ConfigMap %s/%s: %w", ns, cm, err)
	}
	if _, err := e.admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sec, Labels: optInLabels},
		Data: map[string][]byte{"token": []byte(strings.Repeat("s", 64))}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Secret %s/%s: %w", ns, sec, err)
	}
	return nil
}

// statefulSet creates a StatefulSet (replicas 0) whose template uses cm and sec (none when empty).
func (e *scaleEnv) statefulSet(ctx context.Context, ns, name, cm, sec string) (*appsv1.StatefulSet, error) {
	var cms, secs []string
	if cm != "" {
		cms, secs = []string{cm}, []string{sec}
	}
	zero := int32(0)
	l := map[string]string{"app": name}
	s, err := e.admin.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{Replicas: &zero, ServiceName: name, Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: ctlSpec(cms, secs)}}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create StatefulSet %s/%s: %w", ns, name, err)
	}
	return s, nil
}

// revisionData is a StatefulSet revision's data as the statefulset controller writes it: the
// template as a strategic merge patch that replaces it.
func revisionData(spec corev1.PodSpec, labels map[string]string) ([]byte, error) {
	b, err := json.Marshal(corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec})
	if err != nil {
		return nil, err
	}
	var tpl map[string]any
	if err := json.Unmarshal(b, &tpl); err != nil {
		return nil, err
	}
	tpl["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": tpl}})
}

// addUsers creates n users of one kind with create(i, ns), spread over the namespaces, 48 at a
// time, each with its own opted-in ConfigMap and Secret.
func (e *scaleEnv) addUsers(b *testing.B, what string, n int, create func(ctx context.Context, i int, ns string) error) {
	b.Helper()
	t0 := time.Now()
	g := new(errgroup.Group)
	g.SetLimit(48)
	for i := 0; i < n; i++ {
		g.Go(func() error {
			ctx, cancel := e.ctx()
			defer cancel()
			return create(ctx, i, e.nss[i%len(e.nss)])
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d %s (2 opted-in objects per user) in %v", n, what, time.Since(t0).Round(time.Millisecond))
}

// addRevisions creates n ControllerRevisions, scaleRSPerWorkload per StatefulSet.
func (e *scaleEnv) addRevisions(b *testing.B, n int) {
	e.addUsers(b, fmt.Sprintf("StatefulSets with %d ControllerRevisions", scaleRSPerWorkload), n/scaleRSPerWorkload, func(ctx context.Context, i int, ns string) error {
		name := fmt.Sprintf("sts%d", i)
		s, err := e.statefulSet(ctx, ns, name, "", "")
		if err != nil {
			return err
		}
		yes := true
		for j := 0; j < scaleRSPerWorkload; j++ {
			cm, sec := fmt.Sprintf("%s-c%d", name, j), fmt.Sprintf("%s-s%d", name, j)
			if err := e.createOptedIn(ctx, ns, cm, sec); err != nil {
				return err
			}
			data, err := revisionData(ctlSpec([]string{cm}, []string{sec}), s.Spec.Template.Labels)
			if err != nil {
				return err
			}
			if _, err := e.admin.AppsV1().ControllerRevisions(ns).Create(ctx, &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-%d", name, j), Labels: s.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: name, UID: s.UID, Controller: &yes}}},
				Data: runtime.RawExtension{Raw: data}, Revision: int64(j + 1)}, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create ControllerRevision %s/%s-%d: %w", ns, name, j, err)
			}
		}
		return nil
	})
	e.revisions += n / scaleRSPerWorkload * scaleRSPerWorkload
	e.optedIn += 2 * (n / scaleRSPerWorkload * scaleRSPerWorkload)
}

// addJobs creates n Jobs (no job controller runs: they stay without pods).
func (e *scaleEnv) addJobs(b *testing.B, n int) {
	e.addUsers(b, "Jobs", n, func(ctx context.Context, i int, ns string) error {
		name := fmt.Sprintf("job%d", i)
		cm, sec := name+"-c", name+"-s"
		if err := e.createOptedIn(ctx, ns, cm, sec); err != nil {
			return err
		}
		spec := ctlSpec([]string{cm}, []string{sec})
		spec.RestartPolicy = corev1.RestartPolicyNever
		_, err := e.admin.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create Job %s/%s: %w", ns, name, err)
		}
		return nil
	})
	e.jobs += n
	e.optedIn += 2 * n
}

// addPods creates n bare Pods (no scheduler runs: they stay Pending).
func (e *scaleEnv) addPods(b *testing.B, n int) {
	e.addUsers(b, "bare Pods", n, func(ctx context.Context, i int, ns string) error {
		name := fmt.Sprintf("pod%d", i)
		cm, sec := name+"-c", name+"-s"
		if err := e.createOptedIn(ctx, ns, cm, sec); err != nil {
			return err
		}
		if _, err := e.admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: ctlSpec([]string{cm}, []string{sec})}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Pod %s/%s: %w", ns, name, err)
		}
		return nil
	})
	e.pods += n
	e.optedIn += 2 * n
}

// addAnchored creates n StatefulSets whose templates use objects of their own: the controller
// creates an anchor for each.
func (e *scaleEnv) addAnchored(b *testing.B, n int) {
	e.addUsers(b, "StatefulSets with an anchor", n, func(ctx context.Context, i int, ns string) error {
		name := fmt.Sprintf("anchored%d", i)
		cm, sec := name+"-c", name+"-s"
		if err := e.createOptedIn(ctx, ns, cm, sec); err != nil {
			return err
		}
		_, err := e.statefulSet(ctx, ns, name, cm, sec)
		return err
	})
	e.anchors += n
	e.optedIn += 2 * n
}

// scaleCrowd Jobs use one ConfigMap and one Secret (the crowd leaf): a CronJob with a long
// history, a Job fan-out.
const scaleCrowd = 1000

// crowd creates scaleCrowd Jobs that all use one opted-in ConfigMap and Secret while an
// install runs at the largest size (every other object owned already), and records what their
// owner lists cost: plugin.MaxUserOwners Jobs own each object one by one and the crowd anchor
// stands for the rest, against one reference per Job without the cap (the floor: the same
// object with every Job's reference, sized the same way). The garbage collector reads every
// owner live when one of them is deleted, so the owner count is also its reads per deletion.
func (e *scaleEnv) crowd(b *testing.B, rsTotal, n int) {
	b.Helper()
	rec := &record{Metrics: map[string]float64{"replicasets": float64(rsTotal), "crowd-jobs": float64(n)}}
	t0 := time.Now()
	p := e.startScaleCtl(b, "configmap-attacher", nil)
	p.waitReady(b)
	p.waitReconciled(b, e.optedIn, 0, t0)
	time.Sleep(5 * time.Second)
	before, rssBefore := p.scrape(b), usageOf(p.PID()).RSSMiB

	ns := e.nss[0]
	ctx, cancel := e.ctx()
	err := e.createOptedIn(ctx, ns, "crowd-c", "crowd-s")
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var refs []metav1.OwnerReference
	t1 := time.Now()
	g := new(errgroup.Group)
	g.SetLimit(48)
	for i := range n {
		g.Go(func() error {
			ctx, cancel := e.ctx()
			defer cancel()
			spec := ctlSpec([]string{"crowd-c"}, []string{"crowd-s"})
			spec.RestartPolicy = corev1.RestartPolicyNever
			j, err := e.admin.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("crowd-job%d", i)},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create Job %s/crowd-job%d: %w", ns, i, err)
			}
			mu.Lock()
			refs = append(refs, metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID})
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	created := time.Since(t1)

	// Settled: each object owned by its crowd anchor and by at most MaxUserOwners Jobs (those
	// that owned it before the crowd was called), and so for 5 s.
	var cm *corev1.ConfigMap
	var sec *corev1.Secret
	var stableSince time.Time
	last := ""
	for {
		ctx, cancel := e.ctx()
		var err1, err2 error
		cm, err1 = e.admin.CoreV1().ConfigMaps(ns).Get(ctx, "crowd-c", metav1.GetOptions{})
		sec, err2 = e.admin.CoreV1().Secrets(ns).Get(ctx, "crowd-s", metav1.GetOptions{})
		cancel()
		if err1 != nil || err2 != nil {
			b.Fatalf("reading the crowd's objects: %v, %v", err1, err2)
		}
		state := ownerKinds(cm.OwnerReferences) + " / " + ownerKinds(sec.OwnerReferences)
		if state != last {
			last, stableSince = state, time.Now()
		} else if crowdSettled(cm.OwnerReferences) && crowdSettled(sec.OwnerReferences) && time.Since(stableSince) > 5*time.Second {
			rec.Metrics["crowd-settled-s"] = max(0, stableSince.Sub(t1).Seconds()-created.Seconds())
			break
		}
		if time.Since(t1) > 5*time.Minute {
			b.Fatalf("the crowd's objects not settled 5m after %d Jobs: owners %s; want a ControllerRevision (the crowd) and at most %d Jobs each", n, state, plugin.MaxUserOwners)
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(15 * time.Second) // as the other leaves' steady state: the burst's garbage collected
	after, rssAfter := p.scrape(b), usageOf(p.PID()).RSSMiB
	req, total := requestsBetween(before, after)
	p.Stop()

	// The floor: the same objects with one reference per Job (and their other owners).
	uncappedCM := cm.DeepCopy()
	uncappedCM.OwnerReferences = withJobs(uncappedCM.OwnerReferences, refs)
	uncappedSec := sec.DeepCopy()
	uncappedSec.OwnerReferences = withJobs(uncappedSec.OwnerReferences, refs)
	rec.Requests = req
	rec.Metrics["crowd-create-s"] = created.Seconds()
	rec.Metrics["crowd-owners"] = float64(max(len(cm.OwnerReferences), len(sec.OwnerReferences)))
	rec.Metrics["crowd-job-owners"] = float64(max(kindCount(cm.OwnerReferences, "Job"), kindCount(sec.OwnerReferences, "Job")))
	rec.Metrics["crowd-uncapped-owners"] = float64(max(len(uncappedCM.OwnerReferences), len(uncappedSec.OwnerReferences)))
	rec.Metrics["crowd-bytes"] = float64(max(cm.Size(), sec.Size()))
	rec.Metrics["crowd-uncapped-bytes"] = float64(max(uncappedCM.Size(), uncappedSec.Size()))
	rec.Metrics["crowd-requests"] = total
	for k, v := range req {
		if strings.HasPrefix(k, "patch ") {
			rec.Metrics["crowd-patches"] += float64(v)
		}
	}
	rec.Metrics["crowd-rss-MiB"] = rssAfter - rssBefore
	rec.Metrics["crowd-heap-MiB"] = heapMiB(after) - heapMiB(before)
	b.Logf("%d Jobs using one ConfigMap and Secret: created in %v, settled %.1fs later; %v owners (%v bytes) against %v (%v bytes) one by one; %v requests (%s); RSS %+.1f MiB, heap %+.1f MiB",
		n, created.Round(time.Millisecond), rec.Metrics["crowd-settled-s"], rec.Metrics["crowd-owners"], rec.Metrics["crowd-bytes"],
		rec.Metrics["crowd-uncapped-owners"], rec.Metrics["crowd-uncapped-bytes"], total, breakdown(req), rec.Metrics["crowd-rss-MiB"], rec.Metrics["crowd-heap-MiB"])
	run.add(b, rec)
}

// crowdSettled reports whether refs are a crowd's: one ControllerRevision and at most
// MaxUserOwners Jobs.
func crowdSettled(refs []metav1.OwnerReference) bool {
	crs, jobs := kindCount(refs, "ControllerRevision"), kindCount(refs, "Job")
	return crs == 1 && jobs <= plugin.MaxUserOwners && crs+jobs == len(refs)
}

// kindCount is how many of refs are of kind.
func kindCount(refs []metav1.OwnerReference, kind string) int {
	n := 0
	for _, r := range refs {
		if r.Kind == kind {
			n++
		}
	}
	return n
}

// ownerKinds is "1 ControllerRevision + 32 Job": how many owners of each kind refs has.
func ownerKinds(refs []metav1.OwnerReference) string {
	n := map[string]int{}
	var kinds []string
	for _, r := range refs {
		if n[r.Kind] == 0 {
			kinds = append(kinds, r.Kind)
		}
		n[r.Kind]++
	}
	sort.Strings(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d %s", n[k], k)
	}
	return strings.Join(parts, " + ")
}

// withJobs is refs without its crowd anchor, with every Job of jobs it lacks: the owner list
// one reference per Job would make.
func withJobs(refs, jobs []metav1.OwnerReference) []metav1.OwnerReference {
	have := map[types.UID]bool{}
	var out []metav1.OwnerReference
	for _, r := range refs {
		if r.Kind != "ControllerRevision" {
			out = append(out, r)
			have[r.UID] = true
		}
	}
	for _, j := range jobs {
		if !have[j.UID] {
			out = append(out, j)
		}
	}
	return out
}

package controllermode

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// Owner lists stay bounded: 40 Jobs use one ConfigMap and one Secret. The first
// plugin.MaxUserOwners own them one by one; past that, their crowd anchor owns them instead, so
// no object ever has more than MaxUserOwners + 1 owners. The objects live while any Job does:
// with half of the Jobs gone, the rest own them one by one again and the crowd goes; after the
// last Job, they are collected.
func TestManyJobsOwnThroughACrowd(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "fan")
	kube, ns, objs := a.kube, a.ns, a.objects(1)
	a.createConfig(1)
	mon := watchOwners(t, kube, ns, objs)

	const total = 40
	jobs := make([]*batchv1.Job, 0, total)
	create := func(n int) {
		for len(jobs) < n {
			jobs = append(jobs, createJob(t, kube, ns, fmt.Sprintf("fan-%d", len(jobs)), podSpec(a.cm(1), a.secret(1))))
		}
	}
	// Up to the cap, each Job owns them.
	create(plugin.MaxUserOwners)
	for _, j := range jobs {
		waitOwnedBy(t, kube, ns, jobOwner(j.Name, j.UID), 30*time.Second, objs...)
	}
	if as := anchors(t, kube, ns, crowdOf(objs[0])); len(as) != 0 {
		t.Fatalf("a crowd anchor %v with %d Jobs", anchorNames(as), len(jobs))
	}

	// Past it, a crowd anchor per object stands for them all; no Job beyond the cap owns.
	create(total)
	for _, o := range objs {
		crowd := crOwner(waitAnchor(t, kube, ns, crowdOf(o), 30*time.Second, o))
		stillThere(t, kube, ns, 2*time.Second, "40 Jobs use it", []owner{crowd}, o)
	}
	for _, j := range jobs[plugin.MaxUserOwners:] {
		for _, o := range objs {
			if m := getMeta(t, kube, ns, o); m != nil && hasRef(m.OwnerReferences, jobOwner(j.Name, j.UID)) {
				t.Errorf("Job %s beyond the cap owns %s", j.Name, o)
			}
		}
	}

	// Half of the Jobs gone, all of them owners: the other 20 (8 of them not owners yet) are
	// few enough to own one by one again, and the crowds go.
	deleteJobs(t, kube, ns, jobs[:total/2])
	jobs = jobs[total/2:]
	for _, j := range jobs {
		waitOwnedBy(t, kube, ns, jobOwner(j.Name, j.UID), 30*time.Second, objs...)
	}
	for _, o := range objs {
		eventually(t, 30*time.Second, "the crowd anchor of "+o.String()+" deleted", func() (bool, string) {
			as := anchors(t, kube, ns, crowdOf(o))
			return len(as) == 0, fmt.Sprint(anchorNames(as))
		})
	}

	// Kept while one Job lives, collected once it is gone.
	deleteJobs(t, kube, ns, jobs[:len(jobs)-1])
	last := jobs[len(jobs)-1]
	stillThere(t, kube, ns, 3*time.Second, "Job "+last.Name+" uses them", []owner{jobOwner(last.Name, last.UID)}, objs...)
	mon.lastUserGone()
	deleteJobs(t, kube, ns, jobs[len(jobs)-1:])
	waitGone(t, kube, ns, objs...)
	mon.check(t, plugin.MaxUserOwners+1)
}

// Two installations over one namespace (another -selector, as a split by team has): the
// other one sees this one's anchors in its cache, but not whether their objects' users still
// need them, so it never deletes them. Here, a crowd anchor that the shared controller keeps
// for 33 Jobs: to a controller that does not adopt the objects the crowd is not needed, and it
// would delete it at its first look (the shared controller would then create it again, and
// every new one would add one more owner to the objects).
func TestAnotherInstallLeavesTheAnchorsAlone(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "shared")
	kube, ns, objs := a.kube, a.ns, a.objects(1)
	a.createConfig(1)
	for i := range plugin.MaxUserOwners + 1 {
		createJob(t, kube, ns, fmt.Sprintf("many-%d", i), podSpec(a.cm(1), a.secret(1)))
	}
	var crowds []owner
	for _, o := range objs {
		crowds = append(crowds, crOwner(waitAnchor(t, kube, ns, crowdOf(o), 30*time.Second, o)))
	}

	name := "foreign-" + ns
	other, err := startController(e.c.Dir, e.bin, name, "-kubeconfig", e.kubeconfig, "-selector", "test/foreign="+ns,
		"-namespaces", ns, "-leader-elect=false", "-log-level", "debug")
	t.Cleanup(func() { other.Stop() }) // nil-safe
	if err != nil {
		t.Fatal(err)
	}
	cluster.LogLinesOnFailure(t, "controller "+name, other.LogPath, other.Log, ns, 40)
	// Its first look at the crowds is a second after its first reconcile of their objects.
	for i, o := range objs {
		stillThere(t, kube, ns, 4*time.Second, "the other installation does not adopt "+o.String(), crowds[i:i+1], o)
		if as := anchors(t, kube, ns, crowdOf(o)); len(as) != 1 || as[0].UID != crowds[i].uid {
			t.Errorf("the crowd anchor of %s: %v, want %s alone (UID %s)", o, anchorNames(as), crowds[i].name, crowds[i].uid)
		}
	}
	if strings.Contains(other.Log(), "deleted the") {
		t.Errorf("the other installation deleted an anchor:\n%s", other.LogTail(20))
	}
}

// crowdOf is the workload annotation of o's crowd anchor.
func crowdOf(o cluster.ConfigRef) string {
	return plugin.CrowdAnchor(plugin.Object{Kind: plugin.Kind(o.Kind), Name: o.Name}).Workload()
}

// createJob creates a Job that runs spec (its pod keeps running under the fake kubelet).
func createJob(t *testing.T, kube kubernetes.Interface, ns, name string, spec corev1.PodSpec) *batchv1.Job {
	t.Helper()
	spec.RestartPolicy = corev1.RestartPolicyNever
	j, err := kube.BatchV1().Jobs(ns).Create(ctxT(t), &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{Template: tpl(name, spec)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Job %s: %v", name, err)
	}
	return j
}

func deleteJobs(t *testing.T, kube kubernetes.Interface, ns string, jobs []*batchv1.Job) {
	t.Helper()
	for _, j := range jobs {
		if err := kube.BatchV1().Jobs(ns).Delete(ctxT(t), j.Name, deleteWith(background)); err != nil {
			t.Fatalf("delete Job %s: %v", j.Name, err)
		}
	}
}

// ownerMonitor watches objects for the whole test: the most owners any version of one had, and
// whether one was deleted while a user still lived.
type ownerMonitor struct {
	mu        sync.Mutex
	most      map[string]int
	early     []string
	usersGone bool
	stops     []func()
}

func watchOwners(t *testing.T, kube kubernetes.Interface, ns string, objs []cluster.ConfigRef) *ownerMonitor {
	t.Helper()
	m := &ownerMonitor{most: map[string]int{}}
	for _, o := range objs {
		opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", o.Name).String()}
		var w watch.Interface
		var err error
		if o.Kind == "Secret" {
			w, err = kube.CoreV1().Secrets(ns).Watch(context.Background(), opts)
		} else {
			w, err = kube.CoreV1().ConfigMaps(ns).Watch(context.Background(), opts)
		}
		if err != nil {
			t.Fatal(err)
		}
		m.stops = append(m.stops, w.Stop)
		go func() {
			for ev := range w.ResultChan() {
				meta, ok := ev.Object.(metav1.Object)
				if !ok {
					continue
				}
				m.mu.Lock()
				m.most[o.String()] = max(m.most[o.String()], len(meta.GetOwnerReferences()))
				if ev.Type == watch.Deleted && !m.usersGone {
					m.early = append(m.early, o.String())
				}
				m.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() {
		for _, s := range m.stops {
			s()
		}
	})
	return m
}

// lastUserGone marks the moment the last user is deleted: a deletion from then on is expected.
func (m *ownerMonitor) lastUserGone() {
	m.mu.Lock()
	m.usersGone = true
	m.mu.Unlock()
}

func (m *ownerMonitor) check(t *testing.T, most int) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.early) > 0 {
		t.Errorf("deleted while a Job still used them: %v", m.early)
	}
	for o, n := range m.most {
		t.Logf("%s: at most %d owners", o, n)
		if n > most {
			t.Errorf("%s had %d owners at once, more than %d", o, n, most)
		}
	}
}

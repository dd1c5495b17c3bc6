package bench

// The controller mode's capacity (make bench-scale): `configmap-attacher controller`, the
// built binary as its own process watching every namespace, on the loopback control plane
// with 1k, 10k and 50k ReplicaSets (replicas 0: no kubelet needed), each with 2 opted-in
// objects and 2 unrelated data-carrying ones (a ConfigMap and a Secret of 1 KiB) beside them.
// Every size is measured by a fresh controller process: cold start (caches synced, then every
// new object owned, against what -qps allows), RSS, reaction for new ReplicaSets while
// workloads roll, API requests per minute, and what etcd and kube-apiserver used. Two points
// without ReplicaSets (an empty cluster; unrelated objects only) pin the model's intercept and
// its cost per unrelated object; the report (report_scale_test.go) fits MiB per ReplicaSet on
// the smaller sizes and checks the prediction against the largest.
//
//	make bench-scale
//
// Only runs with CMA_BENCH_SCALE=1 (make bench-scale sets it): `make bench`'s `-bench .` skips it.

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

const (
	envScale      = "CMA_BENCH_SCALE"       // 1: run BenchmarkControllerScale
	envScaleSizes = "CMA_BENCH_SCALE_SIZES" // ReplicaSet counts, default 1000,5000,10000
	envScaleChurn = "CMA_BENCH_SCALE_CHURN" // churn window per size, default 2m

	// scaleRSPerWorkload ReplicaSets per Rollout (its current one and 4 in history).
	scaleRSPerWorkload = 5
	// scaleWorkloadsPerNS Rollouts per namespace: 50k ReplicaSets are 10 namespaces.
	scaleWorkloadsPerNS = 1000
	// scaleUnrelatedSeed unrelated objects (half ConfigMaps, half Secrets) created before any
	// ReplicaSet: the point that measures what an unrelated object costs.
	scaleUnrelatedSeed = 20000
	// scaleQPS, scaleBurst and scaleWorkers are the controller's client limits and workers in
	// this benchmark (the defaults are 50, 100 and 4: a first adoption of 18k objects would
	// take 18 minutes at 50 requests/s).
	scaleQPS, scaleBurst, scaleWorkers = 200, 100, 16
	// scaleAdoptMax: sizes up to it are populated unowned (the controller adopts the new
	// objects at start: the first-install cold start); beyond it the new objects are created
	// already owned by their ReplicaSet (as the step plugin would have left them), so the cold
	// start is a restart: sync and a full reconcile with nothing to write. Every default size
	// adopts (CMA_BENCH_SCALE_ADOPT_MAX lowers it for a shorter run); the split installs at the
	// end always restart (everything is owned by then).
	defaultScaleAdoptMax = 50000
	envScaleAdoptMax     = "CMA_BENCH_SCALE_ADOPT_MAX"
	// scaleRetry is the leader-election retry period (renewals per minute: 60 s / retry).
	scaleRetry = 2 * time.Second
	// scaleChurnPerMin is the share of workloads that roll per minute; scaleMinRolls the
	// minimum rolls per minute, so that the small sizes have enough reaction samples.
	scaleChurnPerMin = 0.01
	scaleMinRolls    = 60
	// scaleDataBytes is the data of each unrelated object (what a full-object cache would hold).
	scaleDataBytes = 1024
)

var optInLabels = map[string]string{"configmap-attacher/revisioned": "true"}

func scaleSizes(b *testing.B) []int {
	s := os.Getenv(envScaleSizes)
	if s == "" {
		return []int{1000, 5000, 10000}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n%scaleRSPerWorkload != 0 {
			b.Fatalf("%s: %q: want positive multiples of %d", envScaleSizes, f, scaleRSPerWorkload)
		}
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

func scaleAdoptMax(b *testing.B) int {
	if s := os.Getenv(envScaleAdoptMax); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("%s: %v", envScaleAdoptMax, err)
		}
		return n
	}
	return defaultScaleAdoptMax
}

func scaleChurn(b *testing.B) time.Duration {
	if s := os.Getenv(envScaleChurn); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("%s: %v", envScaleChurn, err)
		}
		return d
	}
	return 2 * time.Minute
}

// scaleWorkload is one Rollout with its ReplicaSets, oldest first, and its next revision.
type scaleWorkload struct {
	ns   string
	ro   *v1alpha1.Rollout
	rss  []string
	next int
	mu   sync.Mutex
}

// scaleEnv is the benchmark's cluster state: its namespaces and workloads.
type scaleEnv struct {
	*env
	nss       []string
	workloads []*scaleWorkload
	// unrelated and optedIn count the objects created (unrelated: never opted in).
	unrelated, optedIn int
	// The users of the other kinds (scale_kinds_test.go): ControllerRevisions, Jobs, bare Pods
	// and anchored StatefulSets.
	revisions, jobs, pods, anchors int
}

func (e *scaleEnv) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// seedUnrelated creates n unrelated objects (half ConfigMaps, half Secrets, 1 KiB of data
// each, no label), spread over the namespaces.
func (e *scaleEnv) seedUnrelated(b *testing.B, n int) {
	b.Helper()
	t0 := time.Now()
	g := new(errgroup.Group)
	g.SetLimit(48)
	for i := 0; i < n; i++ {
		g.Go(func() error {
			ns := e.nss[i%len(e.nss)]
			return e.createUnrelated(ns, fmt.Sprintf("seed-%d", i), i%2 == 0)
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	e.unrelated += n
	b.Logf("seeded %d unrelated objects in %v", n, time.Since(t0).Round(time.Millisecond))
}

func (e *scaleEnv) createUnrelated(ns, name string, configMap bool) error {
	ctx, cancel := e.ctx()
	defer cancel()
	data := strings.Repeat("x", scaleDataBytes)
	var err error
	if configMap {
		_, err = e.admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string]string{"data": data}}, metav1.CreateOptions{})
	} else {
		_, err = e.admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string][]byte{"data": []byte(data)}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("create unrelated %s/%s: %w", ns, name, err)
	}
	return nil
}

// grow adds workloads until there are total/scaleRSPerWorkload of them, each with
// scaleRSPerWorkload ReplicaSets, 2 opted-in objects per ReplicaSet and 2 unrelated ones.
// With owned, the objects are created already owned by their ReplicaSet.
func (e *scaleEnv) grow(b *testing.B, total int, owned bool) {
	b.Helper()
	t0 := time.Now()
	want := total / scaleRSPerWorkload
	from := len(e.workloads)
	ws := make([]*scaleWorkload, want-from)
	g := new(errgroup.Group)
	g.SetLimit(48)
	for i := range ws {
		w := from + i
		g.Go(func() error {
			ns := e.nss[w/scaleWorkloadsPerNS]
			name := fmt.Sprintf("w%d", w)
			ctx, cancel := e.ctx()
			defer cancel()
			ro, err := e.rollouts.ArgoprojV1alpha1().Rollouts(ns).Create(ctx, &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: v1alpha1.RolloutSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: ctlSpec(nil, nil)},
					Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{}}}}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create Rollout %s/%s: %w", ns, name, err)
			}
			sw := &scaleWorkload{ns: ns, ro: ro}
			for j := 0; j < scaleRSPerWorkload; j++ {
				if _, err := e.revision(sw, owned); err != nil {
					return err
				}
				for k, cm := range []bool{true, false} {
					if err := e.createUnrelated(ns, fmt.Sprintf("%s-u%d-%d", name, j, k), cm); err != nil {
						return err
					}
				}
			}
			ws[i] = sw
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	e.workloads = append(e.workloads, ws...)
	e.optedIn += 2 * (want - from) * scaleRSPerWorkload
	e.unrelated += 2 * (want - from) * scaleRSPerWorkload
	b.Logf("grew to %d workloads × %d ReplicaSets (+%d) in %v", want, scaleRSPerWorkload, (want-from)*scaleRSPerWorkload, time.Since(t0).Round(time.Millisecond))
}

// revision creates the workload's next revision: its opted-in ConfigMap and Secret, then its
// ReplicaSet using both. It returns the ReplicaSet.
// With owned, the ReplicaSet comes first and the objects are created with it as their owner.
func (e *scaleEnv) revision(w *scaleWorkload, owned bool) (*appsv1.ReplicaSet, error) {
	w.mu.Lock()
	rev := w.next
	w.next++
	w.mu.Unlock()
	ctx, cancel := e.ctx()
	defer cancel()
	cm, sec := fmt.Sprintf("%s-c%d", w.ro.Name, rev), fmt.Sprintf("%s-s%d", w.ro.Name, rev)
	e2 := &env{c: e.c, ns: w.ns, admin: e.admin, rollouts: e.rollouts}
	var rs *appsv1.ReplicaSet
	var owners []metav1.OwnerReference
	if owned {
		var err error
		if rs, err = e2.createRS(ctx, w.ro, fmt.Sprintf("h%d", rev), ctlSpec([]string{cm}, []string{sec})); err != nil {
			return nil, err
		}
		owners = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID}}
	}
	if _, err := e.admin.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Labels: optInLabels, OwnerReferences: owners},
		Data: map[string]string{"app.yaml": strings.Repeat("k: v\n", 40)}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create ConfigMap %s/%s: %w", w.ns, cm, err)
	}
	if _, err := e.admin.CoreV1().Secrets(w.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sec, Labels: optInLabels, OwnerReferences: owners},
		Data: map[string][]byte{"token": []byte(strings.Repeat("s", 64))}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create Secret %s/%s: %w", w.ns, sec, err)
	}
	if !owned {
		var err error
		if rs, err = e2.createRS(ctx, w.ro, fmt.Sprintf("h%d", rev), ctlSpec([]string{cm}, []string{sec})); err != nil {
			return nil, err
		}
	}
	w.mu.Lock()
	w.rss = append(w.rss, rs.Name)
	w.mu.Unlock()
	return rs, nil
}

// roll is one rollout of w: a new revision, then its oldest ReplicaSet deleted (history kept
// at scaleRSPerWorkload; the garbage collector deletes the config only it owned).
func (e *scaleEnv) roll(w *scaleWorkload) (*appsv1.ReplicaSet, time.Time, error) {
	rs, err := e.revision(w, false)
	t0 := time.Now()
	if err != nil {
		return nil, t0, err
	}
	w.mu.Lock()
	oldest := w.rss[0]
	w.rss = w.rss[1:]
	w.mu.Unlock()
	ctx, cancel := e.ctx()
	defer cancel()
	bg := metav1.DeletePropagationBackground
	if err := e.admin.AppsV1().ReplicaSets(w.ns).Delete(ctx, oldest, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		return rs, t0, fmt.Errorf("delete ReplicaSet %s/%s: %w", w.ns, oldest, err)
	}
	return rs, t0, nil
}

// ownedWatch records when each ReplicaSet UID first appears as an owner of an opted-in
// ConfigMap and of an opted-in Secret (all namespaces).
type ownedWatch struct {
	mu   sync.Mutex
	seen map[types.UID][2]time.Time
	ws   []watch.Interface
}

func (e *scaleEnv) watchOwned(b *testing.B) *ownedWatch {
	b.Helper()
	ow := &ownedWatch{seen: map[types.UID][2]time.Time{}}
	sel := metav1.ListOptions{LabelSelector: "configmap-attacher/revisioned=true"}
	cmw, err := e.admin.CoreV1().ConfigMaps("").Watch(context.Background(), sel)
	if err != nil {
		b.Fatal(err)
	}
	sw, err := e.admin.CoreV1().Secrets("").Watch(context.Background(), sel)
	if err != nil {
		cmw.Stop()
		b.Fatal(err)
	}
	ow.ws = []watch.Interface{cmw, sw}
	for i, w := range ow.ws {
		go func() {
			for ev := range w.ResultChan() {
				if ev.Type != watch.Modified && ev.Type != watch.Added {
					continue
				}
				var refs []metav1.OwnerReference
				switch o := ev.Object.(type) {
				case *corev1.ConfigMap:
					refs = o.OwnerReferences
				case *corev1.Secret:
					refs = o.OwnerReferences
				}
				now := time.Now()
				ow.mu.Lock()
				for _, r := range refs {
					s := ow.seen[r.UID]
					if s[i].IsZero() {
						s[i] = now
						ow.seen[r.UID] = s
					}
				}
				ow.mu.Unlock()
			}
		}()
	}
	return ow
}

func (ow *ownedWatch) stop() {
	for _, w := range ow.ws {
		w.Stop()
	}
}

// both returns when uid owned a ConfigMap and a Secret, or false.
func (ow *ownedWatch) both(uid types.UID) (time.Time, bool) {
	ow.mu.Lock()
	defer ow.mu.Unlock()
	s := ow.seen[uid]
	if s[0].IsZero() || s[1].IsZero() {
		return time.Time{}, false
	}
	if s[1].After(s[0]) {
		return s[1], true
	}
	return s[0], true
}

// procUsage is a process's resident set and CPU time.
type procUsage struct {
	RSSMiB, HWMMiB, CPUSeconds float64
	// AnonMiB and FileMiB split RSS: the heap and runtime, and the binary's mapped pages.
	AnonMiB, FileMiB float64
}

func usageOf(pid int) procUsage {
	var u procUsage
	if kb, err := rssKiB(pid, "VmRSS"); err == nil {
		u.RSSMiB = mib(kb)
	}
	if kb, err := rssKiB(pid, "VmHWM"); err == nil {
		u.HWMMiB = mib(kb)
	}
	if kb, err := rssKiB(pid, "RssAnon"); err == nil {
		u.AnonMiB = mib(kb)
	}
	if kb, err := rssKiB(pid, "RssFile"); err == nil {
		u.FileMiB = mib(kb)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command (which is in parentheses): utime is the 14th field, stime the 15th.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			f := strings.Fields(string(b)[i+1:])
			if len(f) > 13 {
				ut, _ := strconv.ParseFloat(f[11], 64)
				st, _ := strconv.ParseFloat(f[12], 64)
				u.CPUSeconds = (ut + st) / 100 // USER_HZ
			}
		}
	}
	return u
}

// controlPlane records the RSS and CPU of etcd and kube-apiserver, and etcd's database size,
// as metrics with the given prefix.
func (e *scaleEnv) controlPlane(rec *record, prefix string) {
	pids := e.c.PIDs()
	for _, comp := range []string{"etcd", "kube-apiserver"} {
		u := usageOf(pids[comp])
		rec.Metrics[prefix+comp+"-rss-MiB"] = u.RSSMiB
		rec.Metrics[prefix+comp+"-cpu-s"] = u.CPUSeconds
	}
	if m, err := cluster.ScrapeMetrics(e.c.EtcdURL+"/metrics", 5*time.Second); err == nil {
		rec.Metrics[prefix+"etcd-db-MiB"] = cluster.SumMetric(m, "etcd_mvcc_db_total_size_in_bytes") / (1 << 20)
		rec.Metrics[prefix+"etcd-db-inuse-MiB"] = cluster.SumMetric(m, "etcd_mvcc_db_total_size_in_use_in_bytes") / (1 << 20)
	}
}

// requestsBetween is the controller's API requests between two scrapes, by "verb resource".
func requestsBetween(before, after map[string]float64) (map[string]int, float64) {
	out := map[string]int{}
	total := 0.0
	for k, v := range after {
		rest, ok := strings.CutPrefix(k, ctlPrefix+"api_requests_total")
		if !ok {
			continue
		}
		d := v - before[k]
		if d <= 0 {
			continue
		}
		out[labelValue(rest, "verb")+" "+labelValue(rest, "resource")] += int(d)
		total += d
	}
	return out, total
}

// clientShares splits requests by the controller's client that sends them: the typed client
// (ReplicaSets, the user kinds' caches, Events) and the metadata client (ConfigMaps, Secrets,
// the workloads' confirmations and caches: rollouts, deployments, experiments). The Lease has
// a client of its own and is left out.
func clientShares(req map[string]int) (typed, meta float64) {
	for k, n := range req {
		_, res, _ := strings.Cut(k, " ")
		switch res {
		case "leases":
		case "configmaps", "secrets", "rollouts", "deployments", "experiments":
			meta += float64(n)
		default:
			typed += float64(n)
		}
	}
	return typed, meta
}

func labelValue(labels, name string) string {
	_, v, ok := strings.Cut(labels, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, `"`)
	return v
}

// startScaleCtl starts a controller over every namespace (or those given) with leader election
// on a Lease named id in the first benchmark namespace.
func (e *scaleEnv) startScaleCtl(b *testing.B, id string, namespaces []string) *ctlProc {
	b.Helper()
	logPath := filepath.Join(e.c.Dir, fmt.Sprintf("controller-%s-%d.log", id, time.Now().UnixNano()))
	args := []string{"-kubeconfig", e.c.KubeconfigPath, "-log-level", "warn",
		"-qps", strconv.Itoa(scaleQPS), "-burst", strconv.Itoa(scaleBurst), "-workers", strconv.Itoa(scaleWorkers),
		"-leader-election-namespace", e.nss[0], "-leader-election-id", id,
		"-leader-election-lease-duration", "15s", "-leader-election-renew-deadline", "10s",
		"-leader-election-retry-period", scaleRetry.String()}
	if len(namespaces) > 0 {
		args = append(args, "-namespaces", strings.Join(namespaces, ","))
	}
	cp, err := cluster.LaunchController(pluginBin, id, logPath, nil, args...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cp.Stop)
	return &ctlProc{cp}
}

// waitReconciled waits until the controller reconciled at least n objects with an empty
// queue and added at least added owner references, and returns the time since since.
func (p *ctlProc) waitReconciled(b *testing.B, n, added int, since time.Time) time.Duration {
	b.Helper()
	for {
		m := p.scrape(b)
		rec := cluster.SumMetric(m, ctlPrefix+"reconciles_total")
		add := cluster.SumMetric(m, ctlPrefix+"owner_references_added_total")
		depth := cluster.SumMetric(m, ctlPrefix+"workqueue_depth")
		if rec >= float64(n) && add >= float64(added) && depth == 0 {
			return time.Since(since)
		}
		if !p.Running() {
			b.Fatalf("controller exited; log %s", p.LogPath)
		}
		if time.Since(since) > 45*time.Minute {
			b.Fatalf("after 45m: %v reconciles of %d, %v references added of %d, queue %v", rec, n, add, added, depth)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// heapMiB is the Go heap in use the controller reports.
func heapMiB(m map[string]float64) float64 {
	return cluster.SumMetric(m, "go_memstats_heap_inuse_bytes") / (1 << 20)
}

// BenchmarkControllerScale: see the file comment. Leaves, in order: replicasets=0 (empty
// cluster), unrelated-only, replicasets=<n> for each size, split=2 (the largest size served by
// two installs, each with half of the namespaces, its own Lease and metrics), crowd=<n> (one
// object's many Jobs, scale_kinds_test.go).
func BenchmarkControllerScale(b *testing.B) {
	if os.Getenv(envScale) != "1" {
		b.Skipf("long (about an hour): make bench-scale (%s=1)", envScale)
	}
	sizes := scaleSizes(b)
	churn := scaleChurn(b)
	base := newEnv(b)
	e := &scaleEnv{env: base, nss: []string{base.ns}}
	largest := sizes[len(sizes)-1]
	for len(e.nss) < (largest/scaleRSPerWorkload+scaleWorkloadsPerNS-1)/scaleWorkloadsPerNS {
		e.nss = append(e.nss, base.c.Namespace(b))
	}
	// One phase: a fresh controller over every namespace, cold start to steady state.
	phase := func(b *testing.B, rsTotal, newOptedIn int) {
		rec := &record{Metrics: map[string]float64{}}
		e.controlPlane(rec, "before-")
		t0 := time.Now()
		p := e.startScaleCtl(b, "configmap-attacher", nil)
		synced := p.waitReady(b)
		cold := p.waitReconciled(b, e.optedIn, newOptedIn, t0)
		m := p.scrape(b)
		u := usageOf(p.PID())
		patches := cluster.SumMetric(m, ctlPrefix+"api_requests_total", `verb="patch"`)
		coldBreakdown, coldReq := requestsBetween(nil, m)
		typed, meta := clientShares(coldBreakdown)
		rec.Metrics["replicasets"] = float64(rsTotal)
		rec.Metrics["workloads"] = float64(len(e.workloads))
		rec.Metrics["opted-in"] = float64(e.optedIn)
		rec.Metrics["unrelated"] = float64(e.unrelated)
		rec.Metrics["namespaces"] = float64(len(e.nss))
		for k, n := range map[string]int{"revisions": e.revisions, "jobs": e.jobs, "pods": e.pods, "anchors": e.anchors} {
			rec.Metrics[k] = float64(n)
		}
		rec.Metrics["sync-s"] = synced.Seconds()
		rec.Metrics["cold-start-s"] = cold.Seconds()
		rec.Metrics["cold-patches"] = patches
		rec.Metrics["cold-requests"] = coldReq
		rec.Metrics["qps"] = scaleQPS
		rec.Metrics["burst"] = scaleBurst
		rec.Metrics["adopted"] = float64(newOptedIn)
		rec.Metrics["workers"] = scaleWorkers
		// What the client-side limiters allow for the requests the cold start sent (the
		// patches and the live confirmations before them): the typed and the metadata client
		// each have their own -qps and -burst, so the busier of the two bounds it.
		rec.Metrics["cold-typed-requests"] = typed
		rec.Metrics["cold-metadata-requests"] = meta
		rec.Metrics["qps-bound-s"] = math.Max(0, math.Max(typed, meta)-scaleBurst) / scaleQPS
		rec.FloorRequests = coldBreakdown
		rec.Metrics["rss-cold-MiB"] = u.RSSMiB
		rec.Metrics["hwm-cold-MiB"] = u.HWMMiB
		rec.Metrics["rss-cold-anon-MiB"] = u.AnonMiB
		rec.Metrics["rss-cold-file-MiB"] = u.FileMiB
		rec.Metrics["heap-cold-MiB"] = heapMiB(m)
		rec.Metrics["cpu-cold-s"] = u.CPUSeconds
		b.Logf("%d ReplicaSets, %d opted-in, %d unrelated: caches synced %v, reconciled %v (%v patches, %v requests; -qps %d -burst %d allow %.1fs); RSS %.1f MiB (peak %.1f), heap %.1f MiB",
			rsTotal, e.optedIn, e.unrelated, synced.Round(time.Millisecond), cold.Round(time.Millisecond), patches, coldReq, scaleQPS, scaleBurst,
			rec.Metrics["qps-bound-s"], u.RSSMiB, u.HWMMiB, heapMiB(m))
		e.controlPlane(rec, "")

		// Steady state under churn: rolls at scaleChurnPerMin of the workloads per minute (at
		// least scaleMinRolls), each timed until its ConfigMap and Secret are owned.
		time.Sleep(5 * time.Second)
		before := p.scrape(b)
		beforeAt, beforeCPU := time.Now(), usageOf(p.PID()).CPUSeconds
		var lat []float64
		if len(e.workloads) > 0 && churn > 0 {
			perMin := math.Max(scaleMinRolls, scaleChurnPerMin*float64(len(e.workloads)))
			ow := e.watchOwned(b)
			interval := time.Duration(float64(time.Minute) / perMin)
			type sample struct {
				uid types.UID
				t0  time.Time
			}
			var mu sync.Mutex
			var samples []sample
			g := new(errgroup.Group)
			tick := time.NewTicker(interval)
			end := time.Now().Add(churn)
			for i := 0; time.Now().Before(end); i++ {
				<-tick.C
				w := e.workloads[(i*7919)%len(e.workloads)]
				g.Go(func() error {
					rs, t0, err := e.roll(w)
					if err != nil {
						return err
					}
					mu.Lock()
					samples = append(samples, sample{rs.UID, t0})
					mu.Unlock()
					return nil
				})
			}
			tick.Stop()
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			deadline := time.Now().Add(time.Minute)
			for _, s := range samples {
				for {
					if at, ok := ow.both(s.uid); ok {
						lat = append(lat, math.Max(0, ms(at.Sub(s.t0))))
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("ReplicaSet %s: its ConfigMap and Secret not owned 1m after the churn", s.uid)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			ow.stop()
			rec.Metrics["rolls"] = float64(len(samples))
			rec.Metrics["rolls-per-min"] = float64(len(samples)) / churn.Minutes()
		}
		after := p.scrape(b)
		// Per minute of the window between the two scrapes (the churn and the wait for its
		// last samples).
		minutes := time.Since(beforeAt).Minutes()
		req, total := requestsBetween(before, after)
		rec.Requests = req
		rec.Metrics["churn-min"] = churn.Minutes()
		rec.Metrics["steady-req-per-min"] = total / minutes
		rec.Metrics["steady-cpu-s-per-min"] = (usageOf(p.PID()).CPUSeconds - beforeCPU) / minutes
		if len(lat) > 0 {
			st := summarize(lat)
			rec.SamplesMs = lat
			rec.Metrics["reaction-p50-ms"] = st.P50
			rec.Metrics["reaction-p99-ms"] = st.P99
			rec.Metrics["reaction-max-ms"] = st.Max
			b.ReportMetric(st.P50, "reaction-p50-ms")
			b.ReportMetric(st.P99, "reaction-p99-ms")
		}
		time.Sleep(3 * time.Second)
		u = usageOf(p.PID())
		m = p.scrape(b)
		rec.Metrics["rss-MiB"] = u.RSSMiB
		rec.Metrics["rss-anon-MiB"] = u.AnonMiB
		rec.Metrics["rss-file-MiB"] = u.FileMiB
		rec.Metrics["hwm-MiB"] = u.HWMMiB
		rec.Metrics["heap-MiB"] = heapMiB(m)
		b.ReportMetric(u.RSSMiB, "rss-MiB")
		b.ReportMetric(cold.Seconds(), "cold-start-s")
		b.ReportMetric(total/minutes, "req/min")
		b.Logf("steady: RSS %.1f MiB (anon %.1f, file %.1f; peak %.1f), heap %.1f MiB; %.0f requests/min (%s); reaction p50 %.1f ms p99 %.1f ms over %d rolls",
			u.RSSMiB, u.AnonMiB, u.FileMiB, u.HWMMiB, heapMiB(m), total/minutes, breakdown(req), rec.Metrics["reaction-p50-ms"], rec.Metrics["reaction-p99-ms"], len(lat))
		p.Stop()
		run.add(b, rec)
	}

	b.Run("replicasets=0", func(b *testing.B) {
		for b.Loop() {
			phase(b, 0, 0)
		}
	})
	b.Run("unrelated-only", func(b *testing.B) {
		for b.Loop() {
			e.seedUnrelated(b, scaleUnrelatedSeed)
			phase(b, 0, 0)
		}
	})
	have := 0
	// A leaf that adds users of one other kind at the current size, its new objects adopted.
	kind := func(name string, n int, add func(*testing.B, int)) {
		b.Run(fmt.Sprintf("%s=%d", name, n), func(b *testing.B) {
			for b.Loop() {
				before := e.optedIn
				add(b, n)
				phase(b, have, e.optedIn-before)
			}
		})
	}
	for i, n := range sizes {
		if i == len(sizes)-1 && i > 0 {
			// The largest size is the mix the model predicts: ReplicaSets, revisions and Jobs,
			// each kind's cost fitted before it, at a smaller size.
			kind("revisions", scaleRevisions, e.addRevisions)
			kind("jobs", scaleJobs, e.addJobs)
		}
		b.Run(fmt.Sprintf("replicasets=%d", n), func(b *testing.B) {
			for b.Loop() {
				owned := n > scaleAdoptMax(b)
				e.grow(b, n, owned)
				adopt := 2 * (n - have)
				if owned {
					adopt = 0
				}
				phase(b, n, adopt)
				have = n
			}
		})
	}
	// The kinds the mix has none of, at the largest size.
	kind("pods", scalePods, e.addPods)
	kind("anchors", scaleAnchors, e.addAnchored)
	b.Run("split=2", func(b *testing.B) {
		for b.Loop() {
			e.split(b, have)
		}
	})
	// Last, so that no point above counts its Jobs: one object's many Jobs.
	b.Run(fmt.Sprintf("crowd=%d", scaleCrowd), func(b *testing.B) {
		for b.Loop() {
			e.crowd(b, have, scaleCrowd)
		}
	})
}

// split serves the cluster with two installs, each with half of the namespaces (-namespaces),
// its own Lease (-leader-election-id) and its own metrics: each syncs only its namespaces and
// reconciles only their objects, nothing is left to write (every object is owned).
func (e *scaleEnv) split(b *testing.B, rsTotal int) {
	b.Helper()
	half := (len(e.nss) + 1) / 2
	parts := [][]string{e.nss[:half], e.nss[half:]}
	if len(parts[1]) == 0 {
		b.Skip("one namespace: nothing to split")
	}
	rec := &record{Metrics: map[string]float64{"replicasets": float64(rsTotal), "installs": 2}}
	var ps []*ctlProc
	var opteds []int
	t0 := time.Now()
	for i, nss := range parts {
		ps = append(ps, e.startScaleCtl(b, fmt.Sprintf("configmap-attacher-%c", 'a'+i), nss))
	}
	for i, p := range ps {
		synced := p.waitReady(b)
		// Each install's opted-in objects: its share of the workloads' 2 per ReplicaSet.
		var opted int
		for _, w := range e.workloads {
			for _, ns := range parts[i] {
				if w.ns == ns {
					opted += 2 * scaleRSPerWorkload
				}
			}
		}
		cold := p.waitReconciled(b, opted, 0, t0)
		m := p.scrape(b)
		if got := cluster.SumMetric(m, ctlPrefix+"leader"); got != 1 {
			b.Fatalf("install %d: leader gauge %v, want 1 (its own Lease)", i, got)
		}
		key := fmt.Sprintf("install-%c-", 'a'+i)
		rec.Metrics[key+"cold-start-s"] = cold.Seconds()
		rec.Metrics[key+"sync-s"] = synced.Seconds()
		opteds = append(opteds, opted)
	}
	// Steady: after the memory of the initial sync and full reconcile is returned.
	time.Sleep(15 * time.Second)
	for i, p := range ps {
		opted := opteds[i]
		m := p.scrape(b)
		u := usageOf(p.PID())
		key := fmt.Sprintf("install-%c-", 'a'+i)
		synced, cold := time.Duration(rec.Metrics[key+"sync-s"]*float64(time.Second)), time.Duration(rec.Metrics[key+"cold-start-s"]*float64(time.Second))
		rec.Metrics[key+"namespaces"] = float64(len(parts[i]))
		rec.Metrics[key+"replicasets"] = float64(opted / 2)
		rec.Metrics[key+"rss-MiB"] = u.RSSMiB
		rec.Metrics[key+"rss-anon-MiB"] = u.AnonMiB
		rec.Metrics[key+"rss-file-MiB"] = u.FileMiB
		rec.Metrics[key+"heap-MiB"] = heapMiB(m)
		rec.Metrics[key+"hwm-MiB"] = u.HWMMiB
		rec.Metrics[key+"patches"] = cluster.SumMetric(m, ctlPrefix+"api_requests_total", `verb="patch"`)
		b.Logf("install %c: %d namespaces, %d ReplicaSets: synced %v, reconciled %v, RSS %.1f MiB (peak %.1f), %v patches",
			'a'+i, len(parts[i]), opted/2, synced.Round(time.Millisecond), cold.Round(time.Millisecond), u.RSSMiB, u.HWMMiB, rec.Metrics[key+"patches"])
	}
	for _, p := range ps {
		p.Stop()
	}
	run.add(b, rec)
}

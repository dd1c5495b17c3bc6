package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	hclog "github.com/hashicorp/go-hclog"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// busyPodCounts are the namespaces of BenchmarkStepBusy by their Pod count: 0 is the quiet
// namespace (only the benchmark's own Rollouts), the others are made by populateBusy.
var busyPodCounts = []int{0, 1000, 5000}

// busyObjectCounts are the object counts of the step in each namespace.
var busyObjectCounts = []int{1, 10}

// The two installs of BenchmarkStepBusy.
const (
	// installController: the objects are opted in and a live controller Lease covers them.
	installController = "controller"
	// installStepOnly: no controller (the Lease the plugin is pointed at does not exist).
	installStepOnly = "step-only"
	vFloorFormula   = "floor+formula" // floorFormula, then the patches
	// busyConcurrent is how many steps run at once through one plugin process in the memory
	// leaves (the Rollouts controller's default --rollout-threads).
	busyConcurrent = 10
	// busyBytesSteps is how many plugin steps the apiserver's response bytes are averaged over.
	busyBytesSteps = 3
	// busyTokens bounds a step's requests besides its patches, for the plugin's token bucket:
	// the formula's lists with their pages and the per-Pod reads, or today's reads.
	busyTokens = 60
)

var busyInstalls = []string{installController, installStepOnly}

// busySteps is how many steps each variant is timed per busy leaf ($CMA_BENCH_BUSY_STEPS,
// default 10).
func busySteps() int { return envInt("CMA_BENCH_BUSY_STEPS", 10) }

// envInt is a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// busyLeafName names a leaf of BenchmarkStepBusy (without the Benchmark prefix).
func busyLeafName(pods int, install string, objects int) string {
	return fmt.Sprintf("StepBusy/pods=%d/install=%s/objects=%d", pods, install, objects)
}

// busyRSSLeafName names a memory leaf of BenchmarkStepBusy.
func busyRSSLeafName(install string) string { return "StepBusy/rss/install=" + install }

// BenchmarkStepBusy: the step in a busy namespace. Three namespaces in the same run: the quiet
// one (the benchmark's own Rollouts only) and two of 1,000 and 5,000 Pods (populateBusy: 89 %
// Pods of Rollouts' ReplicaSets with 4 old revisions each, 6 % of StatefulSets with two
// ControllerRevisions, 4 % of Jobs, 1 % of a Workflow CRD's objects, a kind the project does
// not know). In each, the step for 1 and 10 objects in two installs: controller (the objects
// opted in, and a live controller Lease exactly as the controller's leader writes it, renewed
// by the benchmark: controllerLease) and step-only (the plugin pointed at a Lease that does
// not exist). Variants, interleaved step by step as in latencyLeaf: floor (the patches),
// floor+formula (floorFormula's reads, then the patches) and plugin-rpc (the built binary,
// one process per install, default client limits, never throttled while timed).
//
// Each leaf also reports, untimed: the requests of one step (an in-process step.Step built as
// stepplugin.Command builds it, through a counting transport; later pages of a list apart), the
// same for floor+formula, the apiserver's response bytes per plugin step
// (apiserver_response_sizes_sum over busyBytesSteps steps, /metrics deltas) and its 429s
// during the leaf. The rss leaves start fresh plugin processes: busyConcurrent steps at once
// in the 5,000-Pod namespace (three rounds) against sequential steps in the quiet one (VmHWM).
//
// It measures once per run ($CMA_BENCH_BUSY_RUNS, default 1; the namespaces are made per
// invocation).
func BenchmarkStepBusy(b *testing.B) {
	e := newEnv(b)
	id := e.controllerIdentity(b)
	e.grantFormulaReads(b)
	lease := e.controllerLease(b)
	nss := map[int]string{0: e.ns}
	busy := map[int]string{}
	for _, pods := range busyPodCounts[1:] {
		nss[pods] = e.busyNamespace(b, pods)
		busy[pods] = nss[pods]
	}
	e.populateBusy(b, busy)

	sets := map[string]*objectSet{}
	for _, pods := range busyPodCounts {
		ev := e.in(nss[pods])
		for _, install := range busyInstalls {
			for _, n := range busyObjectCounts {
				var extra map[string]string
				if install == installController {
					extra = map[string]string{plugin.OptInLabel: "true"}
				}
				nCM, nSec := splitObjects(n)
				sets[busyLeafName(pods, install, n)] = ev.newObjectSet(b, fmt.Sprintf("%s%d", install[:4], n), nCM, nSec, extra)
			}
		}
	}
	leases := map[string]plugin.LeaseRef{installController: lease, installStepOnly: {Namespace: lease.Namespace, Name: "no-controller-here"}}
	procs := map[string]*pluginProc{}
	for _, install := range busyInstalls {
		procs[install] = startPlugin(b, plugin.DefaultQPS, plugin.DefaultBurst, append(e.kubeconfigArgs(b, id), "--controller-lease", leases[install].String())...)
	}
	floorMeta := metaClient(b, id)
	formula := newFormulaClients(b, id)
	// A list's later pages apart: the goal wants requests constant in the Pod count but pages.
	counter := &cluster.Counter{ListPagesApart: true}
	countedID := counter.Wrap(id)
	countedFormula := newFormulaClients(b, countedID)

	for _, pods := range busyPodCounts {
		ev := e.in(nss[pods])
		for _, install := range busyInstalls {
			counted := inProcessStep(b, countedID, false)
			counted.Events = &plugin.APIEvents{Client: counted.Client, Log: counted.Log}
			counted.ControllerLeases = []plugin.LeaseRef{leases[install]}
			for _, n := range busyObjectCounts {
				name := busyLeafName(pods, install, n)
				set, proc, maintained := sets[name], procs[install], install == installController
				objs, body := set.objects(), ownerPatch(set.rs)
				formulaStep := func(c formulaClients) func(ctx context.Context) error {
					return func(ctx context.Context) error {
						if err := floorFormula(ctx, c, set, leases[install], maintained); err != nil {
							return err
						}
						return floorMetaPatches(ctx, c.meta, set.ro.Namespace, objs, body)
					}
				}
				variants := []variant{
					{name: vFloor, step: func(ctx context.Context) error { return floorMetaPatches(ctx, floorMeta, set.ro.Namespace, objs, body) }},
					{name: vFloorFormula, step: formulaStep(formula)},
					{name: vPluginRPC, proc: proc, tokens: n + busyTokens, step: func(context.Context) error {
						return checkResult(proc.step.Run(set.ro, stepContext(set)))
					}},
				}
				warmUp(b, ev, set, variants)
				b.Run(strings.TrimPrefix(name, "StepBusy/"), func(b *testing.B) {
					limitRuns(b, "CMA_BENCH_BUSY_RUNS", 1)
					countOne := func(step func() error) map[string]int {
						ev.resetOwners(b, objs)
						time.Sleep(20 * time.Millisecond)
						counter.Reset()
						err := step()
						snap := counter.ByName()
						if err != nil {
							b.Fatal(err)
						}
						ev.verifyOwned(b, set)
						return snap
					}
					pluginReqs := countOne(func() error { return checkResult(counted.Run(set.ro, stepContext(set))) })
					floorReqs := countOne(func() error {
						ctx, cancel := bg()
						defer cancel()
						return formulaStep(countedFormula)(ctx)
					})
					before := apiserverMetrics(b, e.c)
					rec := latencyLeaf(b, ev, set, true, busySteps(), variants)
					during := apiserverMetrics(b, e.c)
					bytes, byResource := ev.apiserverBytes(b, set, proc, n)
					rec.Requests, rec.FloorRequests, rec.Bytes = pluginReqs, floorReqs, byResource
					rec.metric(b, "pods", float64(pods))
					rec.metric(b, "requests/op", float64(sumCounts(pluginReqs, "")))
					rec.metric(b, "page-requests/op", float64(sumCounts(pluginReqs, "list-page ")))
					rec.metric(b, "floor-formula-requests/op", float64(sumCounts(floorReqs, "")))
					rec.metric(b, "floor-formula-page-requests/op", float64(sumCounts(floorReqs, "list-page ")))
					rec.metric(b, "apiserver-bytes/op", bytes)
					rec.metric(b, "apiserver-429", cluster.SumMetric(during, "apiserver_request_total", `code="429"`)-
						cluster.SumMetric(before, "apiserver_request_total", `code="429"`))
					if fu := summarize(rec.Variants[vFloorFormula]); fu.N > 0 {
						rec.metric(b, "ratio-formula-p50", summarize(rec.Variants[vPluginRPC]).P50/fu.P50)
					}
					rec.metric(b, "plugin-hwm-MiB", mib(mustRSS(b, proc.pid, "VmHWM")))
					run.add(b, rec)
				})
			}
		}
	}
	for _, install := range busyInstalls {
		b.Run(strings.TrimPrefix(busyRSSLeafName(install), "StepBusy/"), func(b *testing.B) {
			limitRuns(b, "CMA_BENCH_BUSY_RUNS", 1)
			e.busyRSS(b, id, leases[install], e.in(nss[0]), e.in(nss[busyPodCounts[len(busyPodCounts)-1]]))
		})
	}
}

// in is e in namespace ns.
func (e *env) in(ns string) *env {
	c := *e
	c.ns = ns
	return &c
}

// sumCounts adds the counts whose key starts with prefix ("": all).
func sumCounts(m map[string]int, prefix string) int {
	n := 0
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

// busyRSS runs, each in a fresh plugin process (default args, the install's Lease), sequential
// steps in the quiet namespace (two per Rollout) and busyConcurrent steps at once in the busy
// one, three rounds, the first attaching; it reports each process's VmHWM.
func (e *env) busyRSS(b *testing.B, id *rest.Config, lease plugin.LeaseRef, quiet, busy *env) {
	args := append(e.kubeconfigArgs(b, id), "--controller-lease", lease.String())
	mkSets := func(ev *env, prefix string) ([]*objectSet, []objRef) {
		var sets []*objectSet
		var objs []objRef
		for i := 0; i < busyConcurrent; i++ {
			s := ev.newObjectSet(b, fmt.Sprintf("%s%s%d", prefix, lease.Name[:2], i), 1, 0, map[string]string{plugin.OptInLabel: "true"})
			sets, objs = append(sets, s), append(objs, s.objects()...)
		}
		return sets, objs
	}
	rec := &record{Metrics: map[string]float64{}}
	for b.Loop() {
		b.StopTimer()
		for _, side := range []struct {
			name string
			ev   *env
			k    int
		}{{"quiet-sequential", quiet, 1}, {"busy-concurrent", busy, busyConcurrent}} {
			sets, objs := mkSets(side.ev, "m")
			side.ev.resetOwners(b, objs)
			e.rssSide(b, rec, side.name, side.ev, side.k, sets, args)
		}
		b.StartTimer()
	}
	rec.metric(b, "pods", float64(busyPodCounts[len(busyPodCounts)-1]))
	run.add(b, rec)
}

// rssSide steps every set 3 times, k at a time, through a fresh plugin process and records the
// process's peak RSS (VmHWM, sampled every 20 ms while it runs, so that a process that dies
// still has its peak), the steps' p50, how many failed, and whether the process exited (with
// the last lines it logged).
func (e *env) rssSide(b *testing.B, rec *record, name string, ev *env, k int, sets []*objectSet, args []string) {
	b.Helper()
	log := &cluster.SyncBuffer{Max: 1 << 20} // the plugin's log lines, for a note
	c, step := cluster.StartStepPlugin(b, exec.Command(stepBin, args...),
		hclog.New(&hclog.LoggerOptions{Name: "plugin", Output: log, Level: hclog.Debug}))
	pid := c.ReattachConfig().Pid
	if rerr := step.InitPlugin(); rerr.HasError() {
		b.Fatalf("InitPlugin: %v", rerr)
	}
	var hwm atomic.Int64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if kb, err := rssKiB(pid, "VmHWM"); err == nil && kb > hwm.Load() {
				hwm.Store(kb)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	// A step that fails (a list past its deadline under ten at once) is counted, not fatal:
	// the peak it reached is the figure, and the failures are part of it.
	var failed atomic.Int64
	lat, err := callers(k, 3*len(sets), func(i int) error {
		s := sets[i%len(sets)]
		err := checkResult(step.Run(s.ro, stepContext(s)))
		if err != nil {
			failed.Add(1)
		}
		return err
	})
	if kb, err := rssKiB(pid, "VmHWM"); err == nil && kb > hwm.Load() {
		hwm.Store(kb)
	}
	close(stop)
	<-sampled
	exited := c.Exited()
	switch {
	case exited:
		rec.Notes = append(rec.Notes, fmt.Sprintf("%s: the plugin process exited during the steps (%d of %d failed); its last lines: %s",
			name, failed.Load(), len(lat), log.Tail(6)))
	case err != nil:
		rec.Notes = append(rec.Notes, fmt.Sprintf("%s: %d of %d steps failed, first: %v", name, failed.Load(), len(lat), err))
	default:
		ev.verifyOwned(b, sets...)
	}
	rec.metric(b, name+"-hwm-MiB", mib(hwm.Load()))
	rec.metric(b, name+"-errors", float64(failed.Load()))
	rec.metric(b, name+"-exited", map[bool]float64{true: 1}[exited])
	var ms []float64
	for _, d := range lat {
		ms = append(ms, float64(d)/float64(time.Millisecond))
	}
	rec.metric(b, name+"-p50-ms", summarize(ms).P50)
	c.Kill()
}

// apiserverMetrics reads kube-apiserver's /metrics as admin.
func apiserverMetrics(b *testing.B, c *cluster.Cluster) map[string]float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := c.Client(b).CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.Fatal(err)
	}
	m, err := cluster.ParseMetrics(strings.NewReader(string(raw)))
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// apiserverBytes runs busyBytesSteps plugin steps on attached objects (idempotent: no untimed
// reset in between, whose responses would count) and returns kube-apiserver's response bytes
// per step (apiserver_response_sizes_sum delta; anything else the cluster does meanwhile, such
// as the Lease renewal, counts too, and is small) and per resource, largest first.
func (e *env) apiserverBytes(b *testing.B, set *objectSet, proc *pluginProc, n int) (float64, map[string]float64) {
	b.Helper()
	e.verifyOwned(b, set)
	before := apiserverMetrics(b, e.c)
	for i := 0; i < busyBytesSteps; i++ {
		proc.bucket.waitFor(n + busyTokens)
		if err := checkResult(proc.step.Run(set.ro, stepContext(set))); err != nil {
			b.Fatal(err)
		}
	}
	after := apiserverMetrics(b, e.c)
	by := map[string]float64{}
	total := 0.0
	for k, v := range after {
		if !strings.HasPrefix(k, "apiserver_response_sizes_sum{") {
			continue
		}
		d := (v - before[k]) / busyBytesSteps
		if d <= 0 {
			continue
		}
		total += d
		by[metricLabel(k, "verb")+" "+metricLabel(k, "resource")] += d
	}
	return total, by
}

// metricLabel is one label's value in a ParseMetrics key.
func metricLabel(key, name string) string {
	_, rest, _ := strings.Cut(key, "{")
	for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return strings.ToLower(strings.Trim(v, `"`))
		}
	}
	return ""
}

// topBytes is a per-resource byte breakdown, largest first, as "N KiB verb resource".
func topBytes(by map[string]float64, n int) string {
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return by[keys[i]] > by[keys[j]] })
	var parts []string
	for i, k := range keys {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s KiB %s", f1(by[k]/1024), k))
	}
	return strings.Join(parts, ", ")
}

// grantFormulaReads grants the benchmark's ServiceAccount the reads the formula makes beyond
// today's RBAC (apps/v1 ControllerRevisions; the Lease, which the Rollouts controller's own
// ClusterRole already covers), so that floor+formula can run on today's code too.
func (e *env) grantFormulaReads(b *testing.B) {
	b.Helper()
	ctx, cancel := bg()
	defer cancel()
	name := "bench-formula-reads-" + e.ns
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"controllerrevisions"}, Verbs: []string{"list"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get"}},
	}
	if _, err := e.admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := e.admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "argo-rollouts", Namespace: e.ns}}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := bg()
		defer cancel()
		_ = e.admin.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = e.admin.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
	})
	e.c.WaitForRBAC(b, "system:serviceaccount:"+e.ns+":argo-rollouts", e.ns, rules)
}

// Lease of the controller install: as the controller's leader writes it (plugin/controller
// lease.go: the label and scope annotations on every write), renewed by the benchmark rather
// than by a real `configmap-attacher controller`: that process would watch every namespace,
// the 6,000 Pods' ReplicaSets included, and its CPU on the 2 cores and its watches on the
// apiserver would be in every timed step, while the step only reads its Lease.
const (
	benchLeaseName     = "configmap-attacher"
	benchLeaseDuration = 15 * time.Second
	benchLeaseRenew    = 2 * time.Second // the controller's default retry period
)

// controllerLease creates the controller's Lease in the quiet namespace and renews it until
// the benchmark ends.
func (e *env) controllerLease(b *testing.B) plugin.LeaseRef {
	b.Helper()
	ref := plugin.LeaseRef{Namespace: e.ns, Name: benchLeaseName}
	sel := labels.SelectorFromSet(labels.Set{plugin.OptInLabel: "true"})
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: ref.Namespace,
			Labels:      map[string]string{plugin.ControllerLeaseLabel: "true"},
			Annotations: plugin.ScopeAnnotations(nil, sel, []string{plugin.WorkloadsName(plugin.KindRollout)})},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptrTo("configmap-attacher-7d9f8b6c5-x2x4z_3f1c"), LeaseDurationSeconds: ptrTo(int32(benchLeaseDuration / time.Second)),
			AcquireTime: &now, RenewTime: &now},
	}
	ctx, cancel := bg()
	defer cancel()
	leases := e.admin.CoordinationV1().Leases(ref.Namespace)
	l, err := leases.Create(ctx, l, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(benchLeaseRenew)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			now := metav1.NewMicroTime(time.Now())
			l.Spec.RenewTime = &now
			if got, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
				l = got
			}
			cancel()
		}
	}()
	b.Cleanup(func() { close(stop); <-done })
	return ref
}

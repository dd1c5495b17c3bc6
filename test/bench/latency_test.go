package bench

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// latencySizes are the object counts of the latency benchmark and how many steps each variant
// is timed per leaf invocation (one invocation per -count).
var latencySizes = []struct{ objects, steps int }{{1, 20}, {10, 20}, {100, 10}}

// variant is one way of doing a step's work.
type variant struct {
	name string
	// proc, when set, is the plugin process whose rate limiter the step goes through;
	// tokens is how many requests one step makes (the users' lists + N patches + 1 event).
	proc   *pluginProc
	tokens int
	step   func(ctx context.Context) error
	// allocs: the leaf also reports the heap allocations of the benchmark process during this
	// variant's steps (runtime.MemStats Mallocs and TotalAlloc, read untimed around each step).
	allocs bool
}

// Variants of BenchmarkStepLatency, from the bare floor to the plugin through its process.
const (
	vFloor       = "floor"              // N patches, client-go, 8 at a time
	vFloorList   = "floor+list"         // + one list of the Rollout's ReplicaSets by selector, consistent (the step's first read, before any user's)
	vFloorCached = "floor+cachedlist"   // + the list served from the watch cache as is (resourceVersion "0")
	vFloorUsers  = "floor+users"        // the step's reads of the namespace's users (floorUsers), then the patches
	vInProcNoEv  = "inprocess-noevents" // step.Step in the test process, no Event
	vInProc      = "inprocess"          // step.Step in the test process, as stepplugin.Command builds it
	vPluginRPC   = "plugin-rpc"         // the built binary through go-plugin, as the controller calls it
	modeFresh    = "fresh"
	modeIdempot  = "idempotent"
	// settle is the untimed pause before each step. It exceeds the apiserver's 100 ms
	// progress-request period (k8s.io/apiserver storage/cacher/progress): a consistent list
	// (resourceVersion "") served from the watch cache waits until the ReplicaSet cache has
	// caught up with etcd's current revision, and a list arriving less than 100 ms after the
	// previous progress request waits for the next one. Steps minutes apart never queue there.
	settleBase   = 110 * time.Millisecond
	settlePerObj = 500 * time.Microsecond
)

// BenchmarkStepLatency: one step for 1, 10 and 100 objects, warm, timed from the caller.
//
// plugin-rpc is the built binary started as the controller starts it, with only
// --kubeconfig (a non-admin ServiceAccount with the controller's ClusterRole and
// examples/rbac-step-plugin.yaml), so its default client limits apply (--qps 50, --burst
// 200): before each timed step the benchmark waits, untimed, until the plugin's token bucket
// holds the step's requests, as it does for a step minutes after the last one. The floor and
// the in-process variants use the same identity, unthrottled.
//
// fresh: before each step (untimed) every object's ownerReferences are cleared, so each patch
// really adds the reference; after it (untimed) one list per kind checks that it did.
// idempotent: the references are already there; each patch changes nothing.
//
// floor+users (floorUsers, then the patches) sends the reads the step makes of the
// namespace's users and the same patches: the floor of the step's required requests, which
// the 1.3× goal is against. floor+list is the step's first list alone (its own ReplicaSets).
//
// One leaf per object count and mode times every variant, interleaved step by step (see
// latencyLeaf); ns/op is the plugin's mean step, floor-ns/op the floor's, <variant>-p50-ms
// each variant's median.
func BenchmarkStepLatency(b *testing.B) {
	e := newEnv(b)
	id := e.controllerIdentity(b)
	proc := startPlugin(b, plugin.DefaultQPS, plugin.DefaultBurst, e.kubeconfigArgs(b, id)...)
	floor := clientset(b, protoConfig(id)) // protobuf answers, as the plugin's typed reads (plugin.NewKube)
	floorMeta := metaClient(b, id)
	inproc := inProcessStep(b, id, true)
	inprocNoEv := inProcessStep(b, id, false)

	for _, size := range latencySizes {
		nCM, nSec := splitObjects(size.objects)
		set := e.newObjectSet(b, fmt.Sprintf("lat%d", size.objects), nCM, nSec, nil)
		objs, body := set.objects(), ownerPatch(set.rs)
		variants := []variant{
			{name: vFloor, step: func(ctx context.Context) error { return floorMetaPatches(ctx, floorMeta, e.ns, objs, body) }},
			{name: vFloorList, step: func(ctx context.Context) error {
				if err := floorList(ctx, floor, set); err != nil {
					return err
				}
				return floorMetaPatches(ctx, floorMeta, e.ns, objs, body)
			}},
			{name: vFloorCached, step: func(ctx context.Context) error {
				if err := floorListRV(ctx, floor, set, "0"); err != nil {
					return err
				}
				return floorMetaPatches(ctx, floorMeta, e.ns, objs, body)
			}},
			{name: vFloorUsers, step: func(ctx context.Context) error {
				if err := floorUsers(ctx, floor, floorMeta, set, ""); err != nil {
					return err
				}
				return floorMetaPatches(ctx, floorMeta, e.ns, objs, body)
			}},
			{name: vInProcNoEv, step: func(context.Context) error { return checkResult(inprocNoEv.Run(set.ro, stepContext(set))) }},
			{name: vInProc, step: func(context.Context) error { return checkResult(inproc.Run(set.ro, stepContext(set))) }},
			{name: vPluginRPC, proc: proc, tokens: size.objects + usersTokens, step: func(context.Context) error {
				return checkResult(proc.step.Run(set.ro, stepContext(set)))
			}},
		}
		warmUp(b, e, set, variants)
		for _, mode := range []string{modeFresh, modeIdempot} {
			b.Run(fmt.Sprintf("objects=%d/%s", size.objects, mode), func(b *testing.B) {
				run.add(b, latencyLeaf(b, e, set, mode == modeFresh, size.steps, variants))
			})
		}
	}
}

// usersTokens bounds the requests of a step besides its patches: the users' lists (6, plus one
// per controller kind of other ReplicaSets: up to 3) and the Event.
const usersTokens = 10

// latencyLeaf times steps rounds; in each round every variant does one step, in an order
// that rotates from round to round, so that all variants see the same background load. It
// returns the leaf's record for run.add.
func latencyLeaf(b *testing.B, e *env, set *objectSet, fresh bool, steps int, variants []variant) *record {
	objs := set.objects()
	settle := settleBase + time.Duration(len(objs))*settlePerObj
	if !fresh {
		e.verifyOwned(b, set)
	}
	samples := map[string][]time.Duration{}
	mallocs, bytes := map[string]uint64{}, map[string]uint64{}
	var before, after runtime.MemStats
	var paced time.Duration
	for b.Loop() {
		for i := 0; i < steps; i++ {
			for j := range variants {
				v := variants[(i+j)%len(variants)]
				b.StopTimer()
				if fresh {
					e.resetOwners(b, objs)
				}
				if v.proc != nil {
					paced += v.proc.bucket.waitFor(v.tokens)
				}
				time.Sleep(settle)
				ctx, cancel := bg()
				if v.allocs {
					runtime.ReadMemStats(&before)
				}
				b.StartTimer()
				t0 := time.Now()
				err := v.step(ctx)
				d := time.Since(t0)
				b.StopTimer()
				if v.allocs {
					runtime.ReadMemStats(&after)
					mallocs[v.name] += after.Mallocs - before.Mallocs
					bytes[v.name] += after.TotalAlloc - before.TotalAlloc
				}
				cancel()
				if err != nil {
					b.Fatalf("%s: %v", v.name, err)
				}
				if fresh {
					e.verifyOwned(b, set)
				}
				samples[v.name] = append(samples[v.name], d)
				b.StartTimer()
			}
		}
	}
	rec := &record{Metrics: map[string]float64{}, Variants: map[string][]float64{}}
	for _, v := range variants {
		st := summarize(durationsMs(samples[v.name]))
		rec.Variants[v.name] = durationsMs(samples[v.name])
		rec.metric(b, v.name+"-p50-ms", st.P50)
		if v.allocs && st.N > 0 {
			rec.metric(b, v.name+"-allocs/op", float64(mallocs[v.name])/float64(st.N))
			rec.metric(b, v.name+"-B/op", float64(bytes[v.name])/float64(st.N))
		}
	}
	pl, fl := summarize(rec.Variants[vPluginRPC]), summarize(rec.Variants[vFloor])
	rec.metric(b, "ns/op", pl.Mean*1e6)
	rec.metric(b, "floor-ns/op", fl.Mean*1e6)
	rec.metric(b, "ratio-p50", pl.P50/fl.P50)
	rec.metric(b, "ratio-mean", pl.Mean/fl.Mean)
	if xs, ok := rec.Variants[vFloorUsers]; ok {
		fu := summarize(xs)
		rec.metric(b, "floor-users-ns/op", fu.Mean*1e6)
		rec.metric(b, "ratio-users-p50", pl.P50/fu.P50)
		rec.metric(b, "ratio-users-mean", pl.Mean/fu.Mean)
	}
	rec.metric(b, "steps", float64(pl.N))
	rec.metric(b, "paced-s", paced.Seconds())
	return rec
}

// warmUp runs every variant once, untimed (connections, the plugin's lazily built client),
// and checks that each left the objects owned.
func warmUp(b *testing.B, e *env, set *objectSet, variants []variant) {
	b.Helper()
	objs := set.objects()
	for _, v := range variants {
		e.resetOwners(b, objs)
		if v.proc != nil {
			v.proc.bucket.waitFor(v.tokens)
		}
		ctx, cancel := bg()
		if err := v.step(ctx); err != nil {
			b.Fatalf("warm-up %s, %d objects: %v", v.name, len(objs), err)
		}
		cancel()
		e.verifyOwned(b, set)
	}
}

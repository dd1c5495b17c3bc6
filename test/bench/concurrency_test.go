package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// workers is the Argo Rollouts controller's default number of rollout workers (--rollout-threads).
const workers = 10

// sequentialRollouts is how many Rollouts the one-caller leaves step, back to back.
const sequentialRollouts = 100

// concurrencyRollouts is the number of Rollouts ($CMA_BENCH_ROLLOUTS, default 500).
func concurrencyRollouts() int {
	if n, err := strconv.Atoi(os.Getenv("CMA_BENCH_ROLLOUTS")); err == nil && n > 0 {
		return n
	}
	return 500
}

// BenchmarkConcurrent: 10 concurrent callers (the controller's default workers) step every one
// of 500 Rollouts once (1 ReplicaSet each; even ones list 1 ConfigMap, odd ones 1 ConfigMap and
// 1 Secret: 750 objects). Before each invocation every reference is cleared (untimed), so
// every step attaches; afterwards one list per kind checks all 750. ns/op is wall time per
// step (1/throughput); p50/p99 are the latencies the callers saw.
//
// rpc-default-args: the built binary as the controller starts it with only --kubeconfig
// (--qps 50, --burst 200), starting with a full token bucket. rpc-qps1000: the same with
// --qps 1000 --burst 2000. inprocess: one step.Step shared by the 10 goroutines (the variant
// `make bench` also runs under -race). floor-*: the same requests per step sent raw with
// client-go (the reads of the namespace's users as floorUsers sends them, the patches 8 at a
// time, one Event), with the lists consistent (resourceVersion "", as the plugin lists) or
// served from the watch cache as is (resourceVersion "0"). callers=1 steps the first 100 Rollouts back to back from one caller.
//
// One pass per run ($CMA_BENCH_CONCURRENT_RUNS, default 1): each leaf's pass is 500 steps.
func BenchmarkConcurrent(b *testing.B) {
	e := newEnv(b)
	id := e.controllerIdentity(b)
	n := concurrencyRollouts()
	sets := make([]*objectSet, n)
	var g errgroup.Group
	g.SetLimit(16)
	t0 := time.Now()
	for i := range sets {
		g.Go(func() error {
			ctx, cancel := bg()
			defer cancel()
			var err error
			sets[i], err = e.createObjectSet(ctx, fmt.Sprintf("c%03d", i), 1, i%2, nil)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d Rollouts with their ReplicaSets and objects in %v", n, time.Since(t0).Round(time.Millisecond))
	kubeconfig := e.kubeconfigArgs(b, id)
	raw, rawMeta := clientset(b, protoConfig(id)), metaClient(b, id) // protobuf answers, as the plugin's typed reads

	leaves := []struct {
		name  string
		args  []string
		qps   float64
		burst int
		raw   string // resourceVersion of the floor's list
	}{
		{name: "rpc-default-args", args: kubeconfig, qps: plugin.DefaultQPS, burst: plugin.DefaultBurst},
		{name: "rpc-qps1000", args: append(append([]string(nil), kubeconfig...), "--qps", "1000", "--burst", "2000"), qps: 1000, burst: 2000},
		{name: "inprocess"},
		{name: "floor-consistentlist", raw: ""},
		{name: "floor-cachedlist", raw: "0"},
	}
	for _, c := range []struct{ callers, rollouts int }{{workers, n}, {1, min(n, sequentialRollouts)}} {
		for _, l := range leaves {
			if c.callers == 1 && (l.name == "rpc-qps1000" || l.name == "inprocess") {
				continue
			}
			b.Run(fmt.Sprintf("callers=%d/%s", c.callers, l.name), func(b *testing.B) {
				limitRuns(b, "CMA_BENCH_CONCURRENT_RUNS", 1)
				var step func(s *objectSet) error
				var bucket *tokenBucket
				switch {
				case l.args != nil:
					proc := startPlugin(b, l.qps, l.burst, l.args...)
					bucket = proc.bucket
					step = func(s *objectSet) error { return checkResult(proc.step.Run(s.ro, stepContext(s))) }
				case l.name == "inprocess":
					st := inProcessStep(b, id, true)
					step = func(s *objectSet) error { return checkResult(st.Run(s.ro, stepContext(s))) }
				default:
					step = func(s *objectSet) error { return rawStep(raw, rawMeta, s, l.raw) }
				}
				sub := sets[:c.rollouts]
				var subObjs []objRef
				for _, s := range sub {
					subObjs = append(subObjs, s.objects()...)
				}
				concurrencyLeaf(b, e, c.callers, sub, subObjs, step, bucket)
			})
		}
	}
}

// rawStep sends a step's requests straight through client-go: the reads of the namespace's
// users at resourceVersion rv (floorUsers), one patch per object (8 at a time, through the
// metadata client), one Event.
func rawStep(cs kubernetes.Interface, m metadata.Interface, s *objectSet, rv string) error {
	ctx, cancel := bg()
	defer cancel()
	if err := floorUsers(ctx, cs, m, s, rv); err != nil {
		return err
	}
	if err := floorMetaPatches(ctx, m, s.ro.Namespace, s.objects(), ownerPatch(s.rs)); err != nil {
		return err
	}
	now := time.Now()
	_, err := cs.CoreV1().Events(s.ro.Namespace).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", s.ro.Name, now.UnixNano()), Namespace: s.ro.Namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: s.ro.Name, Namespace: s.ro.Namespace, UID: s.ro.UID},
		Reason:         plugin.ReasonAttached, Message: "floor", Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "configmap-attacher-bench"},
		FirstTimestamp: metav1.Time{Time: now}, LastTimestamp: metav1.Time{Time: now}, Count: 1,
	}, metav1.CreateOptions{})
	return err
}

func concurrencyLeaf(b *testing.B, e *env, k int, sets []*objectSet, objs []objRef, step func(*objectSet) error, bucket *tokenBucket) {
	// Warm the path (client, connections) on one Rollout.
	if err := step(sets[0]); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	var all []time.Duration
	var wall time.Duration
	var errs atomic.Int64
	var firstErr atomic.Value
	for b.Loop() {
		b.StopTimer()
		e.resetOwners(b, objs)
		if bucket != nil {
			bucket.waitFor(int(bucket.burst)) // start with a full bucket
		}
		time.Sleep(time.Second)
		b.StartTimer()
		start := time.Now()
		lat, _ := callers(k, len(sets), func(i int) error {
			err := step(sets[i])
			if err != nil {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Errorf("%s: %w", sets[i].name, err))
			}
			return err
		})
		wall += time.Since(start)
		b.StopTimer()
		all = append(all, lat...)
		if errs.Load() == 0 {
			e.verifyOwned(b, sets...)
		}
		b.StartTimer()
	}
	rec := reportLatency(b, all)
	rec.SamplesMs = nil
	st := summarize(durationsMs(all))
	rec.metric(b, "ns/op", float64(wall)/float64(len(all)))
	rec.metric(b, "steps/s", float64(len(all))/wall.Seconds())
	rec.metric(b, "p99-ms", st.P99)
	rec.metric(b, "max-ms", st.Max)
	rec.metric(b, "errors", float64(errs.Load()))
	run.add(b, rec)
	if errs.Load() > 0 {
		b.Fatalf("%d steps failed; first: %v", errs.Load(), firstErr.Load())
	}
}

func durationsMs(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	return out
}

var _ = context.Background

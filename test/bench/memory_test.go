package bench

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memorySteps is how many steps the memory benchmark runs per plugin process
// ($CMA_BENCH_MEMORY_STEPS, default 10,000); RSS is read after 1,000 and after the last.
func memorySteps() int {
	return envInt("CMA_BENCH_MEMORY_STEPS", 10000)
}

// memoryQPS are the plugin args of the memory benchmark: 10,000 steps of about 10 requests
// each (the users' reads, the patch, the Event) would take over half an hour at the default
// 50 QPS, and the limits do not change what is kept in memory.
var memoryQPS = []string{"--qps", "1000", "--burst", "1000"}

// memoryCallers step the memory benchmark's Rollouts concurrently, as the controller's 10
// workers would. One caller alone would be paced by the apiserver: each step's event write
// makes the next step's consistent ReplicaSet list wait for a watch-cache progress request,
// which the apiserver sends at most every 100 ms (see settleBase).
const memoryCallers = 10

// BenchmarkPluginMemory: the plugin process's resident set (VmRSS from /proc/<pid>/status,
// the pid from go-plugin's ReattachConfig) when idle after InitPlugin, after 1,000 steps and
// after 10,000 steps (1 object each, through the RPC boundary, 10 callers over 10 Rollouts;
// the first step of each Rollout attaches, the rest change nothing), its peak (VmHWM), and
// the binary's size. Each invocation starts a fresh process; ns/op is wall time per step.
//
// One process per run ($CMA_BENCH_MEMORY_RUNS, default 1): 10,000 steps are its own repetition.
func BenchmarkPluginMemory(b *testing.B) {
	e := newEnv(b)
	id := e.controllerIdentity(b)
	sets := make([]*objectSet, memoryCallers)
	var objs []objRef
	for i := range sets {
		sets[i] = e.newObjectSet(b, fmt.Sprintf("mem%d", i), 1, 0, nil)
		objs = append(objs, sets[i].objects()...)
	}
	args := append(e.kubeconfigArgs(b, id), memoryQPS...)
	total := memorySteps()
	b.Run(fmt.Sprintf("steps=%d", total), func(b *testing.B) {
		limitRuns(b, "CMA_BENCH_MEMORY_RUNS", 1)
		rec := &record{Metrics: map[string]float64{}}
		var all []time.Duration
		var wall time.Duration
		for b.Loop() {
			b.StopTimer()
			e.resetOwners(b, objs)
			proc := startPlugin(b, 1000, 1000, args...)
			time.Sleep(2 * time.Second)
			idle := mustRSS(b, proc.pid, "VmRSS")
			rss := map[int]int64{}
			done := 0
			for _, upto := range []int{min(1000, total), total} {
				b.StartTimer()
				start := time.Now()
				lat, err := callers(memoryCallers, upto-done, func(i int) error {
					s := sets[(done+i)%len(sets)]
					return checkResult(proc.step.Run(s.ro, stepContext(s)))
				})
				wall += time.Since(start)
				b.StopTimer()
				all = append(all, lat...)
				if err != nil {
					b.Fatal(err)
				}
				done = upto
				rss[upto] = mustRSS(b, proc.pid, "VmRSS")
			}
			hwm := mustRSS(b, proc.pid, "VmHWM")
			anon, file := mustRSS(b, proc.pid, "RssAnon"), mustRSS(b, proc.pid, "RssFile")
			proc.client.Kill()
			e.verifyOwned(b, sets...)
			b.StartTimer()
			rec.Metrics["rss-idle-MiB"] = mib(idle)
			rec.Metrics["rss-1k-MiB"] = mib(rss[min(1000, total)])
			rec.Metrics["rss-end-MiB"] = mib(rss[total])
			rec.Metrics["hwm-MiB"] = mib(hwm)
			rec.Metrics["rss-end-anon-MiB"] = mib(anon)
			rec.Metrics["rss-end-file-MiB"] = mib(file)
		}
		lat := reportLatency(b, all)
		lat.SamplesMs = nil // 10,000 samples do not belong in the JSON
		lat.metric(b, "ns/op", float64(wall)/float64(len(all)))
		lat.metric(b, "steps/s", float64(len(all))/wall.Seconds())
		for k, v := range rec.Metrics {
			lat.metric(b, k, v)
		}
		if st, err := os.Stat(stepBin); err == nil {
			lat.metric(b, "binary-MiB", float64(st.Size())/(1<<20))
		}
		run.add(b, lat)
	})
}

// callers runs n calls of f (f(0)…f(n-1)) on k goroutines and returns each call's latency
// and the first error.
func callers(k, n int, f func(i int) error) ([]time.Duration, error) {
	lat := make([][]time.Duration, k)
	errs := make([]error, k)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < k; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				err := f(i)
				lat[w] = append(lat[w], time.Since(t0))
				if err != nil && errs[w] == nil {
					errs[w] = fmt.Errorf("call %d: %w", i, err)
				}
			}
		}()
	}
	wg.Wait()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	for _, err := range errs {
		if err != nil {
			return all, err
		}
	}
	return all, nil
}

func mustRSS(b *testing.B, pid int, field string) int64 {
	kb, err := rssKiB(pid, field)
	if err != nil {
		b.Fatal(err)
	}
	return kb
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

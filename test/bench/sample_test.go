package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"
)

// argo-rollouts' own step plugin sample (test/cmd/step-plugin-sample in the argo-rollouts
// module: the same go-plugin RPC and v1alpha1 types as ours, no Kubernetes client), measured
// beside ours in the same run as the anchor of the plugin process's goals.

// samplePackage is the sample's main package; go build resolves it through our go.mod, so it
// is built from the module cache at the argo-rollouts version we require (v1.10.2) with our
// versions of its dependencies.
const samplePackage = "github.com/argoproj/argo-rollouts/test/cmd/step-plugin-sample"

// sampleRTSteps is how many sequential Run calls time the sample's round trip.
const sampleRTSteps = 2000

var sampleOnce struct {
	sync.Once
	path string
	err  error
}

// sampleBinary builds the sample as `make build` builds ours (static, -trimpath, -s -w), once.
func sampleBinary() (string, error) {
	sampleOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cma-bench-sample-")
		if err != nil {
			sampleOnce.err = err
			return
		}
		out := filepath.Join(dir, "step-plugin-sample")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, samplePackage)
		cmd.Dir = repoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			sampleOnce.err = fmt.Errorf("go build %s: %v\n%s", samplePackage, err, b)
			return
		}
		sampleOnce.path = out
	})
	return sampleOnce.path, sampleOnce.err
}

// BenchmarkSamplePlugin: the sample's resident set idle after InitPlugin, after 1,000 and
// after 10,000 steps (10 callers, as BenchmarkPluginMemory drives ours, with the same Rollout
// objects), its binary size, and its Run round trip: sequential calls, one at a time, with the
// same Rollout object as ours carries. The sample's Run does no I/O (it draws a number and
// completes): the round trip is the go-plugin RPC alone, gob encoding of the Rollout included.
//
// Once per run, as BenchmarkPluginMemory ($CMA_BENCH_MEMORY_RUNS).
func BenchmarkSamplePlugin(b *testing.B) {
	bin, err := sampleBinary()
	if err != nil {
		b.Fatal(err)
	}
	e := newEnv(b)
	sets := make([]*objectSet, memoryCallers)
	for i := range sets {
		sets[i] = e.newObjectSet(b, fmt.Sprintf("smp%d", i), 1, 0, nil)
	}
	// The sample's config: synchronous (it completes in the same call).
	cfg, err := json.Marshal(map[string]bool{"async": false})
	if err != nil {
		b.Fatal(err)
	}
	stepCtx := &types.RpcStepContext{PluginName: "argoproj-labs/sample", Config: cfg}
	total := memorySteps()
	b.Run(fmt.Sprintf("steps=%d", total), func(b *testing.B) {
		limitRuns(b, "CMA_BENCH_MEMORY_RUNS", 1)
		rec := &record{Metrics: map[string]float64{}}
		var rt []time.Duration
		for b.Loop() {
			b.StopTimer()
			proc := startPluginBinary(b, bin, 0, 0)
			time.Sleep(2 * time.Second)
			idle := mustRSS(b, proc.pid, "VmRSS")
			rss := map[int]int64{}
			done := 0
			for _, upto := range []int{min(1000, total), total} {
				_, err := callers(memoryCallers, upto-done, func(i int) error {
					s := sets[(done+i)%len(sets)]
					return checkResult(proc.step.Run(s.ro, stepCtx))
				})
				if err != nil {
					b.Fatal(err)
				}
				done = upto
				rss[upto] = mustRSS(b, proc.pid, "VmRSS")
			}
			hwm := mustRSS(b, proc.pid, "VmHWM")
			anon, file := mustRSS(b, proc.pid, "RssAnon"), mustRSS(b, proc.pid, "RssFile")
			// The round trip, warm: one caller, one call at a time.
			b.StartTimer()
			for i := 0; i < sampleRTSteps; i++ {
				t0 := time.Now()
				if err := checkResult(proc.step.Run(sets[i%len(sets)].ro, stepCtx)); err != nil {
					b.Fatal(err)
				}
				rt = append(rt, time.Since(t0))
			}
			b.StopTimer()
			proc.client.Kill()
			rec.Metrics["rss-idle-MiB"] = mib(idle)
			rec.Metrics["rss-1k-MiB"] = mib(rss[min(1000, total)])
			rec.Metrics["rss-end-MiB"] = mib(rss[total])
			rec.Metrics["hwm-MiB"] = mib(hwm)
			rec.Metrics["rss-end-anon-MiB"] = mib(anon)
			rec.Metrics["rss-end-file-MiB"] = mib(file)
			b.StartTimer()
		}
		lat := reportLatency(b, rt)
		lat.SamplesMs = nil
		for k, v := range rec.Metrics {
			lat.metric(b, k, v)
		}
		if st, err := os.Stat(bin); err == nil {
			lat.metric(b, "binary-MiB", float64(st.Size())/(1<<20))
			lat.metric(b, "binary-bytes", float64(st.Size()))
		}
		run.add(b, lat)
	})
}

package bench

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// Environment of a benchmark run (make bench sets them).
const (
	// envResults is where TestMain writes the run's figures as JSON. Relative paths in these
	// variables are relative to the module root.
	envResults = "CMA_BENCH_RESULTS"
	// envRaceResults is the JSON of the -race run, included in the report.
	envRaceResults = "CMA_BENCH_RACE_RESULTS"
	// envDoc and envChart are where TestMain writes the report and its chart.
	envDoc   = "CMA_BENCH_DOC"
	envChart = "CMA_BENCH_CHART"
	// envReportFrom, without -bench, re-renders the report ($CMA_BENCH_DOC, $CMA_BENCH_CHART,
	// with $CMA_BENCH_RACE_RESULTS) from a saved results JSON instead of measuring.
	envReportFrom = "CMA_BENCH_REPORT_FROM"
	// envLoadBefore is the load average make bench saw before starting the run.
	envLoadBefore = "CMA_BENCH_LOAD_BEFORE"
)

var (
	shared    *cluster.Cluster
	sharedErr error
	pluginBin string
	// stepBin is the step plugin's own binary (install-plugin's): every plugin process of the run.
	stepBin string
	run     = newRunResults()
)

// benchmarking reports whether -test.bench was given: only then is a control plane started.
func benchmarking() bool {
	f := flag.Lookup("test.bench")
	return f != nil && f.Value.String() != ""
}

func TestMain(m *testing.M) {
	flag.Parse()
	if !benchmarking() {
		code := m.Run()
		if from := envPath(envReportFrom); from != "" && code == 0 {
			// Re-render the report from a saved run, without measuring anything.
			if err := rerender(from); err != nil {
				fmt.Fprintln(os.Stderr, "bench report:", err)
				code = 1
			}
		}
		os.Exit(code)
	}
	run.start()
	shared, sharedErr = cluster.StartShared(cluster.Options{})
	if sharedErr == nil {
		sharedErr = cluster.InstallRolloutCRD(shared)
	}
	if sharedErr == nil {
		pluginBin, sharedErr = cluster.PluginBinary() // make bench passes make build's
	}
	if sharedErr == nil {
		stepBin, sharedErr = cluster.StepPluginBinary()
	}
	if sharedErr != nil {
		fmt.Fprintln(os.Stderr, "bench setup:", sharedErr)
	}
	code := m.Run()
	shared.Stop()
	if err := run.finish(code); err != nil {
		fmt.Fprintln(os.Stderr, "bench report:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// sharedCluster returns the run's cluster, or skips (fails with CI=true) without one.
func sharedCluster(b *testing.B) *cluster.Cluster {
	b.Helper()
	return cluster.Require(b, shared, sharedErr)
}

// invocations counts each benchmark's invocations in this run (one per -count).
var invocations = map[string]int{}

// limitRuns skips b's invocations beyond $env (default def): a benchmark whose one invocation
// already holds hundreds of samples, or whose figures are per process, need not repeat under
// make bench's -count 3, which is for the short latency leaves.
func limitRuns(b *testing.B, env string, def int) {
	b.Helper()
	invocations[b.Name()]++
	if n := envInt(env, def); invocations[b.Name()] > n {
		b.Skipf("measured %d time(s) per run (%s)", n, env)
	}
}

// repoRoot is the module root.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

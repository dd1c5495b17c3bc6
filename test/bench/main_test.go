package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// Environment of a benchmark run (make bench sets them).
const (
	// envBinary is the plugin binary to measure (make bench passes bin/configmap-attacher from
	// `make build`); without it the benchmark builds one with the same flags.
	envBinary = "CMA_PLUGIN_BINARY"
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
	run       = newRunResults()
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
		pluginBin, sharedErr = pluginBinary()
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

// repoRoot is the module root.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// pluginBinary returns $CMA_PLUGIN_BINARY, or builds the binary exactly as `make build` does
// (static, -trimpath, stripped with -s -w) into a temporary directory.
func pluginBinary() (string, error) {
	if abs := envPath(envBinary); abs != "" {
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("%s: %w", envBinary, err)
		}
		return abs, nil
	}
	dir, err := os.MkdirTemp("", "cma-bench-bin-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "configmap-attacher")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w -X github.com/configmap-attacher/configmap-attacher/plugin.Version=bench", "-o", out, ".")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, b)
	}
	return out, nil
}

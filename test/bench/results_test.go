package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// record is one invocation of a benchmark leaf (one -count repetition).
type record struct {
	// SamplesMs are per-step (or per-run) latencies in milliseconds, in order.
	SamplesMs []float64 `json:"samplesMs,omitempty"`
	// Variants are per-step latencies in milliseconds of each variant a leaf interleaves.
	Variants map[string][]float64 `json:"variantsMs,omitempty"`
	// Metrics are the figures the leaf reported (the same as on the go test line).
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Requests are API requests per step by "verb resource".
	Requests map[string]int `json:"requests,omitempty"`
	// FloorRequests are the API requests of one step of the floor with the users' reads.
	FloorRequests map[string]int `json:"floorRequests,omitempty"`
	// Bytes are kube-apiserver's response bytes per step by "verb resource".
	Bytes map[string]float64 `json:"apiserverBytes,omitempty"`
	// Notes are remarks worth a line in the report.
	Notes []string `json:"notes,omitempty"`
}

// machine describes where the run happened.
type machine struct {
	CPU        string `json:"cpu"`
	NumCPU     int    `json:"nproc"`
	Kernel     string `json:"kernel"`
	GoVersion  string `json:"go"`
	Kubernetes string `json:"kubernetes"`
	MemTotal   string `json:"memTotal"`
}

// results is everything a run measured; TestMain writes it as JSON and renders the report.
type results struct {
	mu sync.Mutex

	Started    time.Time         `json:"started"`
	Finished   time.Time         `json:"finished"`
	ExitCode   int               `json:"exitCode"`
	Race       bool              `json:"race"`
	Flags      map[string]string `json:"flags"`
	Machine    machine           `json:"machine"`
	LoadBefore string            `json:"loadBefore"`
	LoadAvg1   []float64         `json:"loadAvg1"` // the 1-minute load average, every 5 s
	Binary     binaryInfo        `json:"binary"`
	// StepBinary is the step plugin's own binary: every plugin process of the run.
	StepBinary binaryInfo           `json:"stepBinary"`
	Benchmarks map[string][]*record `json:"benchmarks"`

	stop chan struct{}
	done chan struct{}
}

type binaryInfo struct {
	Path    string `json:"path"`
	Bytes   int64  `json:"bytes"`
	Version string `json:"version"`
}

func newRunResults() *results {
	return &results{Benchmarks: map[string][]*record{}, Flags: map[string]string{}}
}

// add records one invocation of the benchmark b.
func (r *results) add(b *testing.B, rec *record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := strings.TrimPrefix(b.Name(), "Benchmark")
	r.Benchmarks[name] = append(r.Benchmarks[name], rec)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				return ""
			}
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return ""
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// start records the machine and the flags, and samples the load average every 5 s.
func (r *results) start() {
	r.Started = time.Now()
	r.Race = raceEnabled
	r.LoadBefore = os.Getenv(envLoadBefore)
	if r.LoadBefore == "" {
		r.LoadBefore = loadavg()
	}
	r.Machine = machine{CPU: cpuModel(), NumCPU: runtime.NumCPU(), Kernel: kernel(), GoVersion: runtime.Version(),
		Kubernetes: cluster.KubeVersion, MemTotal: memTotal()}
	flag.Visit(func(f *flag.Flag) { r.Flags[strings.TrimPrefix(f.Name, "test.")] = f.Value.String() })
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.done)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			if f := strings.Fields(loadavg()); len(f) > 0 {
				if v, err := strconv.ParseFloat(f[0], 64); err == nil {
					r.mu.Lock()
					r.LoadAvg1 = append(r.LoadAvg1, v)
					r.mu.Unlock()
				}
			}
			select {
			case <-r.stop:
				return
			case <-t.C:
			}
		}
	}()
}

// finish writes the JSON ($CMA_BENCH_RESULTS) and the report ($CMA_BENCH_DOC, $CMA_BENCH_CHART).
func (r *results) finish(code int) error {
	close(r.stop)
	<-r.done
	r.Finished = time.Now()
	r.ExitCode = code
	if pluginBin != "" {
		r.Binary.Path = pluginBin
		if st, err := os.Stat(pluginBin); err == nil {
			r.Binary.Bytes = st.Size()
		}
		r.Binary.Version = binaryVersion(pluginBin)
	}
	if stepBin != "" {
		r.StepBinary.Path = stepBin
		if st, err := os.Stat(stepBin); err == nil {
			r.StepBinary.Bytes = st.Size()
		}
		r.StepBinary.Version = r.Binary.Version // built from the same tree; it has no -version
	}
	if p := envPath(envResults); p != "" {
		if err := writeJSON(p, r); err != nil {
			return err
		}
	}
	if code != 0 && (envPath(envDoc) != "" || envPath(envScaleDoc) != "") {
		return fmt.Errorf("not writing %s%s: the benchmarks failed (exit %d)", envPath(envDoc), envPath(envScaleDoc), code)
	}
	return report(r)
}

// report writes $CMA_BENCH_DOC and $CMA_BENCH_CHART from r and the -race run's JSON.
func report(r *results) error {
	if doc := envPath(envScaleDoc); doc != "" && len(r.leaf("ControllerScale/replicasets=0")) > 0 {
		if err := writeScaleReport(r, doc, envPath(envScaleChart)); err != nil {
			return fmt.Errorf("capacity report: %w", err)
		}
	}
	doc, chart := envPath(envDoc), envPath(envChart)
	if doc == "" {
		return nil
	}
	var race *results
	if p := envPath(envRaceResults); p != "" {
		race = &results{}
		if err := readJSON(p, race); err != nil {
			return err
		}
	}
	return writeReport(r, race, doc, chart)
}

// rerender writes the report from a saved results JSON.
func rerender(path string) error {
	r := &results{}
	if err := readJSON(path, r); err != nil {
		return err
	}
	return report(r)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// envPath is a path from the environment; a relative one is relative to the module root (go
// test runs the benchmark in test/bench).
func envPath(name string) string {
	p := os.Getenv(name)
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(repoRoot(), p)
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// stats summarises samples.
type stats struct {
	N                             int
	Mean, Min, P50, P90, P99, Max float64
}

func summarize(xs []float64) stats {
	if len(xs) == 0 {
		return stats{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return stats{N: len(s), Mean: sum / float64(len(s)), Min: s[0], Max: s[len(s)-1],
		P50: quantile(s, 0.50), P90: quantile(s, 0.90), P99: quantile(s, 0.99)}
}

// quantile of sorted samples, by linear interpolation between closest ranks.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reportLatency reports per-step samples as the leaf's figures: ns/op is the mean step
// latency (one op = one step), plus p50/p90/p99 in milliseconds.
func reportLatency(b *testing.B, samples []time.Duration) *record {
	rec := &record{Metrics: map[string]float64{}}
	for _, d := range samples {
		rec.SamplesMs = append(rec.SamplesMs, ms(d))
	}
	st := summarize(rec.SamplesMs)
	b.ReportMetric(st.Mean*1e6, "ns/op")
	b.ReportMetric(st.P50, "p50-ms")
	b.ReportMetric(st.P90, "p90-ms")
	b.ReportMetric(float64(st.N), "steps")
	rec.Metrics["ns/op"] = st.Mean * 1e6
	rec.Metrics["p50-ms"] = st.P50
	rec.Metrics["p90-ms"] = st.P90
	rec.Metrics["steps"] = float64(st.N)
	return rec
}

func (rec *record) metric(b *testing.B, unit string, v float64) {
	b.ReportMetric(v, unit)
	if rec.Metrics == nil {
		rec.Metrics = map[string]float64{}
	}
	rec.Metrics[unit] = v
}

// binaryVersion is the binary's -version output (command-line mode, no plugin cookie).
func binaryVersion(bin string) string {
	cmd := exec.Command(bin, "-version")
	cmd.Env = envWithoutCookie()
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func envWithoutCookie() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, cluster.RolloutsHandshake.MagicCookieKey+"=") {
			env = append(env, kv)
		}
	}
	return env
}

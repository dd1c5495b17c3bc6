package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.5, 3}, {1, 5}, {0.25, 2}, {0.9, 4.6}} {
		if got := quantile(s, c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	st := summarize([]float64{4, 1, 3, 2})
	if st.N != 4 || st.Min != 1 || st.Max != 4 || st.Mean != 2.5 || st.P50 != 2.5 {
		t.Errorf("summarize = %+v", st)
	}
}

func TestTokenBucketWaits(t *testing.T) {
	tb := newTokenBucket(100, 10)
	if d := tb.waitFor(10); d != 0 {
		t.Errorf("a full bucket waited %v", d)
	}
	if d := tb.waitFor(5); d < 40*time.Millisecond {
		t.Errorf("an empty bucket waited only %v for 5 tokens at 100/s", d)
	}
}

// TestReportRenders renders the report and the chart from synthetic figures: every section,
// the goal verdicts and the reproduce commands are there.
func TestReportRenders(t *testing.T) {
	r := newRunResults()
	r.Started, r.Finished = time.Unix(0, 0), time.Unix(600, 0)
	r.Machine = machine{CPU: "Test CPU", NumCPU: 2, Kubernetes: "v1.34.5"}
	r.LoadBefore = "0.50 0.40 0.30"
	r.LoadAvg1 = []float64{1, 2, 3}
	r.Flags = map[string]string{"bench": ".", "benchtime": "1x", "count": "3"}
	r.Binary = binaryInfo{Path: "/x/configmap-attacher", Bytes: 50 << 20, Version: "configmap-attacher dev"}
	add := func(name string, rec *record) { r.Benchmarks[name] = append(r.Benchmarks[name], rec) }
	for _, l := range latencySizes {
		for _, mode := range []string{modeFresh, modeIdempot} {
			rec := &record{Variants: map[string][]float64{}}
			for i, v := range []string{vFloor, vFloorList, vFloorCached, vFloorUsers, vInProcNoEv, vInProc, vPluginRPC} {
				base := float64(l.objects)/2 + 3 + float64(i)
				rec.Variants[v] = []float64{base, base + 1, base + 2}
			}
			add(latLeaf(l.objects, mode), rec)
		}
		for _, mode := range []string{modeFresh, "repeat"} {
			add(fmt.Sprintf("APIRequests/explicit/objects=%d/%s", l.objects, mode), &record{
				Metrics:  map[string]float64{"requests/op": float64(l.objects + 2)},
				Requests: map[string]int{"list replicasets": 1, "patch configmaps": l.objects, "create events": 1}})
		}
	}
	addBusyFixture(r, busyFixture{})
	add("PluginMemory/steps=10000", &record{Metrics: map[string]float64{"rss-idle-MiB": 40, "rss-1k-MiB": 50, "rss-end-MiB": 50.5, "hwm-MiB": 52}})
	add("Concurrent/callers=10/rpc-default-args", &record{Metrics: map[string]float64{"steps/s": 14, "p50-ms": 600, "p99-ms": 900, "errors": 0, "steps": 500}})
	add("CommandLine/objects=10/fresh/binary", &record{SamplesMs: []float64{100, 110}, Notes: []string{"event refused"}})
	race := newRunResults()
	race.Flags = map[string]string{"bench": "^BenchmarkConcurrent$/^inprocess$"}
	race.Benchmarks["Concurrent/callers=10/inprocess"] = []*record{{Metrics: map[string]float64{"steps": 500, "errors": 0, "steps/s": 20}}}

	dir := t.TempDir()
	doc, chart := filepath.Join(dir, "docs", "benchmarks.md"), filepath.Join(dir, "docs", "chart.svg")
	if err := writeReport(r, race, doc, chart); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{
		"## Summary", "## Machine and run", "## Reproduce", "## 1. Step latency", "## 2. API requests per step",
		"## 3. Plugin process memory", "## 4. Concurrency", "## 5. Command-line mode", "## What the figures mean",
		"Test CPU", "![step latency p50 by object count](chart.svg)", "-bench . -benchtime 1x -count 3",
		"clean: no data race, 500 steps", "**missed**", "### The 1.3× goal", "Observed on stderr: event refused",
		"| explicit, 10 object(s), fresh | 12 |", "## 1b. The step in a busy namespace",
		fmt.Sprintf("| 5000 | step-only | 10 | 10 | 20 | 22 | 1.10× | 1.10× | %d (%d) | %d (%d) | 2000 | 0 |", 18+5000/formulaPageSize, 5000/formulaPageSize, 17+5000/formulaPageSize, 5000/formulaPageSize),
		"| step p50, 5000 Pods ÷ quiet (0 Pods), controller, 1 object(s) | 1.10× | ≤ 1.3× | met |",
		fmt.Sprintf("| 5000 | controller | 1 create events, 1 get leases, %d list-page pods", 5000/formulaPageSize),
		"(goal ≤ 1.3× of floor+users)", "11 (1 users' lists + 10 patches)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	svg, err := os.ReadFile(chart)
	if err != nil || !strings.Contains(string(svg), "<svg") {
		t.Fatalf("chart: %v", err)
	}
}

package bench

import (
	"strings"
	"testing"
)

// busyFixture plants figures into synthetic busy leaves: slow multiplies the plugin's p50 at
// the largest Pod count (1.1 when zero), rssDelta is the concurrent peak over the quiet one
// (4 MiB when zero), extra adds requests per step at a Pod count, failedSteps is how many of
// the concurrent steps failed.
type busyFixture struct {
	slow        float64
	rssDelta    float64
	extra       map[int]int
	failedSteps float64
	exited      bool
}

// addBusyFixture adds BenchmarkStepBusy's leaves to r: plugin p50 20 ms in the quiet
// namespace, floor 10 ms, floor+formula 20 ms everywhere.
func addBusyFixture(r *results, f busyFixture) {
	if f.slow == 0 {
		f.slow = 1.1
	}
	if f.rssDelta == 0 {
		f.rssDelta = 4
	}
	big := busyPodCounts[len(busyPodCounts)-1]
	for _, pods := range busyPodCounts {
		for _, install := range busyInstalls {
			for _, n := range busyObjectCounts {
				pl := 20.0
				extra := f.extra[pods]
				if pods == big {
					pl = 20 * f.slow
				}
				pages := float64(pods / formulaPageSize)
				rec := &record{Variants: map[string][]float64{vFloor: {10}, vFloorFormula: {20}, vPluginRPC: {pl}},
					Metrics: map[string]float64{"requests/op": float64(n+8+extra) + pages, "page-requests/op": pages,
						"floor-formula-requests/op": float64(n+7) + pages, "floor-formula-page-requests/op": pages,
						"apiserver-bytes/op": 2048 * 1000, "apiserver-429": 0},
					Requests:      map[string]int{"list-page pods": int(pages), "get leases": 1, "create events": 1},
					FloorRequests: map[string]int{"get leases": 1},
					Bytes:         map[string]float64{"list pods": 1500 * 1024, "list replicasets": 300 * 1024}}
				r.Benchmarks[busyLeafName(pods, install, n)] = append(r.Benchmarks[busyLeafName(pods, install, n)], rec)
			}
		}
	}
	for _, install := range busyInstalls {
		r.Benchmarks[busyRSSLeafName(install)] = append(r.Benchmarks[busyRSSLeafName(install)], &record{Metrics: map[string]float64{
			"quiet-sequential-hwm-MiB": 35, "busy-concurrent-hwm-MiB": 35 + f.rssDelta, "quiet-sequential-p50-ms": 40, "busy-concurrent-p50-ms": 90,
			"busy-concurrent-errors": f.failedSteps, "busy-concurrent-exited": map[bool]float64{true: 1}[f.exited]}})
	}
}

// verdicts maps each busy goal's text to its verdict.
func verdicts(r *results) map[string]string {
	out := map[string]string{}
	for _, g := range busyGoals(r) {
		out[g.What] = g.verdictText()
	}
	return out
}

// TestBusyGoals: every goal met on good figures; each planted fault (a slow step-only step at
// 5,000 Pods, a controller-install step 1.5× the quiet one, 12 MiB more peak RSS, failed
// concurrent steps, one request more at 1,000 or at 5,000 Pods) says missed exactly where planted;
// one request fewer in the quiet namespace, which has no Pod whose spec is read, is no miss.
func TestBusyGoals(t *testing.T) {
	good := newRunResults()
	addBusyFixture(good, busyFixture{})
	for what, v := range verdicts(good) {
		if v != "met" {
			t.Errorf("good figures: %q is %s, want met", what, v)
		}
	}
	if n := len(busyGoals(good)); n != 2*len(busyObjectCounts)*3+len(busyInstalls) {
		t.Errorf("%d goals, want one per install and object count for latency, formula and requests, and one RSS per install", n)
	}

	for _, c := range []struct {
		name  string
		f     busyFixture
		wantN int    // goals missed
		want  string // a goal that must be missed
	}{
		{"step 1.5× the quiet one", busyFixture{slow: 1.5}, 6, // controller ÷ quiet (2) and ÷ floor+formula (4)
			"step p50, 5000 Pods ÷ quiet (0 Pods), controller, 1 object(s)"},
		{"step-only 2.5× the quiet one", busyFixture{slow: 2.5}, 8, // both installs ÷ quiet (4) and ÷ floor+formula (4)
			"step p50, 5000 Pods ÷ quiet (0 Pods), step-only, 10 object(s)"},
		{"12 MiB more peak", busyFixture{rssDelta: 12}, 2,
			"plugin peak RSS (VmHWM), 10 concurrent steps at 5000 Pods vs sequential quiet steps, step-only"},
		{"2 of the concurrent steps failed", busyFixture{failedSteps: 2}, 2,
			"plugin peak RSS (VmHWM), 10 concurrent steps at 5000 Pods vs sequential quiet steps, controller"},
		{"the plugin process died", busyFixture{exited: true}, 2,
			"plugin peak RSS (VmHWM), 10 concurrent steps at 5000 Pods vs sequential quiet steps, step-only"},
		{"a request more at 5,000 Pods", busyFixture{extra: map[int]int{5000: 1}}, 4,
			"requests per step apart from pages at 0 / 1000 / 5000 Pods, controller, 10 object(s)"},
		{"a request more at 1,000 Pods", busyFixture{extra: map[int]int{1000: 1}}, 4,
			"requests per step apart from pages at 0 / 1000 / 5000 Pods, step-only, 1 object(s)"},
		// The quiet namespace is shown, not held to it: a request fewer there is no miss.
		{"a request fewer in the quiet namespace", busyFixture{extra: map[int]int{0: -1}}, 0, ""},
	} {
		r := newRunResults()
		addBusyFixture(r, c.f)
		v := verdicts(r)
		if got := v[c.want]; c.want != "" && got != "**missed**" {
			t.Errorf("%s: %q is %q, want **missed**", c.name, c.want, got)
		}
		missed := 0
		for _, x := range v {
			if strings.Contains(x, "missed") {
				missed++
			}
		}
		if missed != c.wantN {
			t.Errorf("%s: %d goals missed, want %d: %v", c.name, missed, c.wantN, v)
		}
	}

	// No figures: no verdict, not a fake one.
	for what, v := range verdicts(newRunResults()) {
		if v != "—" {
			t.Errorf("no figures: %q is %s, want —", what, v)
		}
	}
}

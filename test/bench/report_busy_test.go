package bench

import (
	"fmt"
	"math"
	"strings"
)

// The goals of the busy namespace, as BenchmarkStepBusy measures them.
const (
	busyGoalController = 1.3 // busy/quiet plugin p50 where the controller maintains the objects
	busyGoalStepOnly   = 2.0 // busy/quiet plugin p50 in a step-only install
	busyGoalFormula    = 1.3 // plugin p50 against floor+formula, in the busy namespace
	busyGoalRSSMiB     = 10  // peak RSS, concurrent busy steps over sequential quiet ones
)

// busyGoal is one verdict of the busy section, computed from the figures.
type busyGoal struct {
	What  string
	Got   string // the figure, rendered
	Limit string // the goal, rendered
	// Met is nil when the run has no figure for it.
	Met *bool
}

// verdictText is the goal's verdict as the report writes it.
func (g busyGoal) verdictText() string {
	switch {
	case g.Met == nil:
		return "—"
	case *g.Met:
		return "met"
	default:
		return "**missed**"
	}
}

// judged is a verdict from a figure and a test that needs it (NaN: no verdict).
func judged(x float64, ok func(float64) bool) *bool {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	v := ok(x)
	return &v
}

// busyP50 pools one variant's samples of a busy leaf over its invocations.
func (r *results) busyP50(pods int, install string, objects int, v string) float64 {
	var xs []float64
	for _, rec := range r.leaf(busyLeafName(pods, install, objects)) {
		xs = append(xs, rec.Variants[v]...)
	}
	if len(xs) == 0 {
		return math.NaN()
	}
	return summarize(xs).P50
}

// nonPageRequests is a busy leaf's requests per step apart from lists' later pages.
func (r *results) nonPageRequests(pods int, install string, objects int) float64 {
	name := busyLeafName(pods, install, objects)
	return r.metric(name, "requests/op") - r.metric(name, "page-requests/op")
}

// busyGoals computes the busy namespace's verdicts from a run: for the largest namespace against the
// quiet one, per install and object count; the plugin against floor+formula there; the peak
// RSS of concurrent busy steps against sequential quiet ones; and requests per step apart from
// pages equal at every busy Pod count.
func busyGoals(r *results) []busyGoal {
	quiet, big := busyPodCounts[0], busyPodCounts[len(busyPodCounts)-1]
	var out []busyGoal
	for _, install := range busyInstalls {
		limit := busyGoalController
		if install == installStepOnly {
			limit = busyGoalStepOnly
		}
		for _, n := range busyObjectCounts {
			x := r.busyP50(big, install, n, vPluginRPC) / r.busyP50(quiet, install, n, vPluginRPC)
			out = append(out, busyGoal{What: fmt.Sprintf("step p50, %d Pods ÷ quiet (0 Pods), %s, %d object(s)", big, install, n),
				Got: ratioOf(x), Limit: fmt.Sprintf("≤ %.1f×", limit), Met: judged(x, func(v float64) bool { return v <= limit })})
		}
	}
	for _, install := range busyInstalls {
		for _, n := range busyObjectCounts {
			x := r.busyP50(big, install, n, vPluginRPC) / r.busyP50(big, install, n, vFloorFormula)
			out = append(out, busyGoal{What: fmt.Sprintf("step p50 ÷ floor+formula, %d Pods, %s, %d object(s)", big, install, n),
				Got: ratioOf(x), Limit: fmt.Sprintf("≤ %.1f×", busyGoalFormula), Met: judged(x, func(v float64) bool { return v <= busyGoalFormula })})
		}
	}
	for _, install := range busyInstalls {
		name := busyRSSLeafName(install)
		q, b := r.metric(name, "quiet-sequential-hwm-MiB"), r.metric(name, "busy-concurrent-hwm-MiB")
		// A peak reached by steps that failed is no peak of the steps' work: failures miss it.
		failed, exited := r.metric(name, "busy-concurrent-errors"), r.metric(name, "busy-concurrent-exited")
		got := fmt.Sprintf("%s vs %s MiB (%+.1f)", f1(b), f1(q), b-q)
		if failed > 0 {
			got += fmt.Sprintf(", %s steps failed", f1(failed))
		}
		if exited > 0 {
			got += ", the plugin process exited"
			failed = math.Max(failed, 1)
		}
		out = append(out, busyGoal{What: fmt.Sprintf("plugin peak RSS (VmHWM), %d concurrent steps at %d Pods vs sequential quiet steps, %s", busyConcurrent, big, install),
			Got: got, Limit: fmt.Sprintf("≤ quiet + %d MiB, no step failed", busyGoalRSSMiB),
			Met: judged(b-q, func(d float64) bool { return d <= busyGoalRSSMiB && !(failed > 0) })})
	}
	// Requests: the same at every Pod count of the busy make-up. The quiet namespace (no Pod at
	// all) is shown beside them but not held to it: it has no Pod whose spec is read, and where
	// Pods of an unknown controller exist their specs take one list per group (not per Pod).
	for _, install := range busyInstalls {
		for _, n := range busyObjectCounts {
			var counts []string
			lo, hi := math.Inf(1), math.Inf(-1)
			for i, pods := range busyPodCounts {
				x := r.nonPageRequests(pods, install, n)
				counts = append(counts, f1(x))
				if i > 0 {
					lo, hi = math.Min(lo, x), math.Max(hi, x)
				}
			}
			out = append(out, busyGoal{What: fmt.Sprintf("requests per step apart from pages at %s Pods, %s, %d object(s)", podList(), install, n),
				Got: strings.Join(counts, " / "), Limit: fmt.Sprintf("the same at %s Pods", busyList()),
				Met: judged(hi-lo, func(d float64) bool { return d == 0 })})
		}
	}
	return out
}

func ratioOf(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", x)
}

// busyList is the busy namespaces' Pod counts (the quiet one left out), "1000 and 5000".
func busyList() string {
	s := make([]string, len(busyPodCounts)-1)
	for i, p := range busyPodCounts[1:] {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, " and ")
}

func podList() string {
	s := make([]string, len(busyPodCounts))
	for i, p := range busyPodCounts {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, " / ")
}

// renderBusyPods is the busy-namespace section.
func renderBusyPods(w *mdWriter, r *results) {
	if len(r.leaf(busyLeafName(busyPodCounts[0], installController, busyObjectCounts[0]))) == 0 {
		return
	}
	w.p("## 1b. The step in a busy namespace")
	w.p("")
	s1, s5 := shapeOf(busyPodCounts[1]), shapeOf(busyPodCounts[2])
	w.p("Three namespaces in the same run: the quiet one (0 Pods: only the benchmark's own Rollouts, one ReplicaSet each) and two busy ones, made once per run by creating every object directly (no kubelet: the Pods stay Pending; kube-controller-manager is stopped while the Pods are created and started again after, and the run waits until the replicaset-controller counts exactly each ReplicaSet's Pods). Of %d (%d) Pods: %d (%d) of %d (%d) Rollouts' current ReplicaSets (%d Pods each; each Rollout also has %d old ReplicaSets at 0 replicas), %d (%d) of %d (%d) StatefulSets (two ControllerRevisions each), %d (%d) of as many Jobs, and %d (%d) of %d (%d) `workflows.bench.example` objects, a controller kind the project does not know. Every Pod and template has a few labels and annotations, an env var from a Secret of its own and a ConfigMap volume of its own; every Pod has its controller's owner reference.",
		s1.pods, s5.pods, s1.rsPods, s5.rsPods, s1.rollouts, s5.rollouts, busyPodsPerWorkload, busyRevisions-1, s1.stsPods, s5.stsPods, s1.statefulSets, s5.statefulSets,
		s1.jobs, s5.jobs, s1.wfP, s5.wfP, s1.wfs, s5.wfs)
	w.p("")
	w.p("Two installs, one plugin process each (the built binary through go-plugin, default client limits, never throttled while timed): **controller**: the objects carry the opt-in label and a controller Lease exists exactly as the controller's leader writes it (label `configmap-attacher.io/controller=true`, its namespaces, selector and workloads annotations, a holder, renewed every %v with a %v duration by the benchmark rather than by a real controller process, whose watches over every namespace would load the apiserver and the 2 CPUs during every timed step), and the plugin's `--controller-lease` names it; **step-only**: the plugin's `--controller-lease` names a Lease that does not exist. Variants, interleaved step by step as in section 1, %s steps each, attaching: `floor` (the patches), `floor+formula` (the reads of the formula below, sent with client-go as the same ServiceAccount, then the patches) and `plugin-rpc`.", benchLeaseRenew, benchLeaseDuration, f1(r.metric(busyLeafName(busyPodCounts[0], installController, busyObjectCounts[0]), "steps")))
	w.p("")
	w.p("**The formula** (`test/bench/formula_test.go` `floorFormula`): always the step's own Rollout's ReplicaSets (a list by its selector), each listed object's metadata (a GET each) and the controller Lease (a GET); only when some object is not maintained by a live controller (step-only), then every ReplicaSet, the metadata of each controller kind of the ReplicaSets not the step's own, every StatefulSet, DaemonSet, Job, CronJob and apps/v1 ControllerRevision and the Pods' metadata, every list in **pages of %d**, typed lists in protobuf; then the specs of the Pods whose controller is none of ReplicaSet, Job, StatefulSet or DaemonSet: one paged list per group of them with the same label keys, its selector built from their own labels (`plugin.PodCensus.SpecReads`; the others by name); then the patches and one Event. Waiting for its target the step sends only the first list.", formulaPageSize)
	w.p("")
	var rows [][]string
	for _, pods := range busyPodCounts {
		for _, install := range busyInstalls {
			for _, n := range busyObjectCounts {
				name := busyLeafName(pods, install, n)
				fl, ff, pl := r.busyP50(pods, install, n, vFloor), r.busyP50(pods, install, n, vFloorFormula), r.busyP50(pods, install, n, vPluginRPC)
				rows = append(rows, []string{fmt.Sprint(pods), install, fmt.Sprint(n), f1(fl), f1(ff), f1(pl), ratio(pl, ff),
					ratio(pl, r.busyP50(busyPodCounts[0], install, n, vPluginRPC)),
					fmt.Sprintf("%s (%s)", f1(r.metric(name, "requests/op")), f1(r.metric(name, "page-requests/op"))),
					fmt.Sprintf("%s (%s)", f1(r.metric(name, "floor-formula-requests/op")), f1(r.metric(name, "floor-formula-page-requests/op"))),
					f1(r.metric(name, "apiserver-bytes/op") / 1024), f1(r.metric(name, "apiserver-429"))})
			}
		}
	}
	w.p("p50 in ms; requests per step (of which later pages); the apiserver's response bytes per plugin step as sent (gzip-compressed above 128 KiB, which client-go accepts; `apiserver_response_sizes` sum, /metrics delta over %d steps on attached objects, the benchmark's Lease renewals included) and its 429s during the leaf", busyBytesSteps)
	w.p("")
	w.table([]string{"Pods", "install", "objects", "floor", "floor+formula", "plugin-rpc", "÷ floor+formula", "÷ quiet", "plugin requests", "floor+formula requests", "apiserver KiB/step", "429s"}, rows)
	rows = nil
	for _, g := range busyGoals(r) {
		rows = append(rows, []string{g.What, g.Got, g.Limit, g.verdictText()})
	}
	w.p("Goals, from the figures above:")
	w.p("")
	w.table([]string{"goal", "figure", "limit", "verdict"}, rows)
	w.p("The requests are held to the same count at every busy Pod count and shown for the quiet namespace beside them: it holds no Pod, so no Pod's spec is read there, while in the busy ones the specs of the Pods of the unknown controller kind (one label scheme) take one list, whatever their number.")
	w.p("")
	rows = nil
	for _, pods := range busyPodCounts {
		for _, install := range busyInstalls {
			n := busyObjectCounts[len(busyObjectCounts)-1]
			name := busyLeafName(pods, install, n)
			recs := r.leaf(name)
			if len(recs) == 0 {
				continue
			}
			last := recs[len(recs)-1]
			rows = append(rows, []string{fmt.Sprint(pods), install, breakdown(last.Requests), breakdown(last.FloorRequests), topBytes(last.Bytes, 4)})
		}
	}
	w.p("Requests of one step at %d objects (`list-page`: a list's later pages) and where the apiserver's bytes go:", busyObjectCounts[len(busyObjectCounts)-1])
	w.p("")
	w.table([]string{"Pods", "install", "plugin (in-process step.Step, counted)", "floor+formula", "largest responses per step"}, rows)
	rows = nil
	var notes []string
	for _, install := range busyInstalls {
		name := busyRSSLeafName(install)
		rows = append(rows, []string{install, f1(r.metric(name, "quiet-sequential-hwm-MiB")), f1(r.metric(name, "quiet-sequential-p50-ms")),
			f1(r.metric(name, "busy-concurrent-hwm-MiB")), f1(r.metric(name, "busy-concurrent-p50-ms")), f1(r.metric(name, "busy-concurrent-errors")), f1(r.metric(name, "busy-concurrent-exited"))})
		for _, rec := range r.leaf(name) {
			notes = append(notes, rec.Notes...)
		}
	}
	w.p("Plugin memory: a fresh process per column, default args, its VmHWM sampled every 20 ms while the steps run; %d Rollouts of 1 object stepped 3 times each: one at a time in the quiet namespace, %d at once (as the controller's workers) in the %d-Pod one, where the steps that ask while a read of the namespace is in flight share the next one (`plugin.SharedReads`).", busyConcurrent, busyConcurrent, busyPodCounts[len(busyPodCounts)-1])
	w.p("")
	w.table([]string{"install", "quiet, sequential: VmHWM MiB", "p50 ms", "busy, concurrent: VmHWM MiB", "p50 ms", "failed steps", "process exited"}, rows)
	for _, n := range notes {
		w.p("- %s", n)
	}
	if len(notes) > 0 {
		w.p("")
	}
}

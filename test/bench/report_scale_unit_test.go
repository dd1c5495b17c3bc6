package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// synthetic is a run whose RSS is exactly base + perRS·rs + perObj·unrelated (KiB).
func synthetic(base, perRSKiB, perObjKiB float64) *results {
	r := newRunResults()
	add := func(leaf string, rs, unrelated float64) {
		rss := base + (perRSKiB*rs+perObjKiB*unrelated)/1024
		r.Benchmarks["ControllerScale/"+leaf] = []*record{{Metrics: map[string]float64{
			"replicasets": rs, "unrelated": unrelated, "opted-in": 2 * rs, "rss-MiB": rss, "hwm-MiB": 1.5 * rss, "rss-file-MiB": 40,
		}}}
	}
	add("replicasets=0", 0, 0)
	add("unrelated-only", 0, 20000)
	for _, n := range []float64{1000, 10000, 50000} {
		add(fmt.Sprintf("replicasets=%.0f", n), n, 20000+2*n)
	}
	return r
}

func TestScaleModelFit(t *testing.T) {
	md, err := fitScale(synthetic(50, 3, 0.4))
	if err != nil {
		t.Fatal(err)
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("base", md.BaseMiB, 50)
	near("per ReplicaSet", md.PerRSKiB, 3)
	near("per object", md.PerUnrelatedKiB, 0.4)
	near("unrelated per ReplicaSet", md.UnrelatedPerRS, 2)
	near("peak ratio", md.PeakRatio, 1.5)
	if md.Check != 50000 || len(md.Fit) != 2 {
		t.Errorf("fitted on %v, checked %d; want 1000 and 10000, 50000", md.Fit, md.Check)
	}
	near("prediction", md.predict(50000, 120000), 50+(3*50000+0.4*120000)/1024)
	// The largest cluster whose peak fits: peak(n) = 1.5·(50 + 3.8n/1024) = limit.
	near("max at 512 Mi", md.maxReplicaSets(512), (512/1.5-50)/(3.8/1024))
	req, lim := md.chartResources()
	if req%16 != 0 || lim%32 != 0 || float64(req) < md.predictCluster(sizingAt) || float64(lim) < 1.5*md.predictCluster(2*sizingAt) {
		t.Errorf("chart resources %d/%d Mi for a model of %.1f MiB at %d", req, lim, md.predictCluster(sizingAt), sizingAt)
	}
}

func TestScaleMissingPoints(t *testing.T) {
	r := synthetic(50, 3, 0.4)
	delete(r.Benchmarks, "ControllerScale/unrelated-only")
	if _, err := fitScale(r); err == nil {
		t.Fatal("a run without the unrelated-only point fitted")
	}
}

func TestReplaceBetween(t *testing.T) {
	p := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(p, []byte("head\n"+scaleBegin+"\nold\n"+scaleEnd+"\ntail\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // idempotent
		if err := replaceBetween(p, scaleBegin, scaleEnd, "new\n"); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(p)
	if want := "head\n" + scaleBegin + "\nnew\n" + scaleEnd + "\ntail\n"; string(b) != want {
		t.Errorf("got %q, want %q", b, want)
	}
}

// TestResourcesFollowModel: the memory defaults of the chart and its README's template are what
// the capacity model of the committed run gives (make bench-scale writes them; this catches a
// hand edit or a run whose docs were not committed). README.md and examples/controller.yaml
// follow from them (test/chart TestChartReadmeUpToDate, TestExamplesFollowChart).
func TestResourcesFollowModel(t *testing.T) {
	r := &results{}
	if err := readJSON(filepath.Join(repoRoot(), "docs", "controller-scale.json"), r); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			t.Skip("no docs/controller-scale.json")
		}
		t.Fatal(err)
	}
	md, err := fitScale(r)
	if err != nil {
		t.Fatal(err)
	}
	read := func(rel string) []byte {
		b, err := os.ReadFile(filepath.Join(repoRoot(), rel))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, f := range []struct{ rel, block string }{{resourceFiles.values, chartValuesBlock(md)}} {
		b := read(f.rel)
		want, err := replaceResources(b, f.block)
		if err != nil {
			t.Fatalf("%s: %v", f.rel, err)
		}
		if string(want) != string(b) {
			t.Errorf("%s: the resources block is not the model's; run make bench-scale (or re-render from docs/controller-scale.json), want:\n%s", f.rel, f.block)
		}
	}
	if b := read(resourceFiles.readme); !strings.Contains(string(b), readmeRow(md)+"\n") {
		t.Errorf("%s: the `resources` row is not the model's, want:\n%s", resourceFiles.readme, readmeRow(md))
	}
}

// TestScaleKindsFit: each user kind's cost comes from its own leaf, against the point it grew
// from, and the mix at the largest size is predicted with them; a leaf with nothing to grow
// from is refused.
func TestScaleKindsFit(t *testing.T) {
	cost := map[string]float64{"revisions": 2.5, "jobs": 2, "pods": 1.5, "anchors": 4}
	r := synthetic(50, 3, 0.4)
	// The run's order: the kinds of the mix at 10k, the mix at 50k, the others after it.
	counts := map[string]float64{}
	add := func(leaf string, rs float64) map[string]float64 {
		m := map[string]float64{"replicasets": rs, "unrelated": 20000 + 2*rs}
		kib := 3*rs + 0.4*m["unrelated"]
		for k, n := range counts {
			m[k] = n
			kib += cost[k] * n
		}
		m["rss-MiB"], m["hwm-MiB"] = 50+kib/1024, 1.5*(50+kib/1024)
		if leaf != "" {
			r.Benchmarks["ControllerScale/"+leaf] = []*record{{Metrics: m}}
		}
		return m
	}
	counts["revisions"] = 2000
	add("revisions=2000", 10000)
	counts["jobs"] = 1000
	add("jobs=1000", 10000)
	mix := add("", 50000)
	r.Benchmarks["ControllerScale/replicasets=50000"][0].Metrics = mix
	counts["pods"] = 2000
	add("pods=2000", 50000)
	counts["anchors"] = 2000
	add("anchors=2000", 50000)

	md, err := fitScale(r)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range cost {
		if got := md.PerKindKiB[k]; math.Abs(got-want) > 1e-6 {
			t.Errorf("%s: %v KiB each, want %v", k, got, want)
		}
	}
	if math.Abs(md.PerRSKiB-3) > 1e-9 || md.Check != 50000 {
		t.Errorf("per ReplicaSet %v, checked %d; want 3 and 50000", md.PerRSKiB, md.Check)
	}
	_, _, sizes, _ := scalePoints(r)
	if got, want := md.predictPoint(sizes[len(sizes)-1]), mix["rss-MiB"]; math.Abs(got-want) > 1e-9 {
		t.Errorf("the mix predicted at %v MiB, measured %v", got, want)
	}
	// The report names the kinds and the goal of a revision's cost.
	out := renderScale(r, md, "docs/controller.md", "")
	for _, s := range []string{"50000 + 2000 ControllerRevisions + 1000 Jobs", "a ControllerRevision costs no more than a ReplicaSet", "| anchored StatefulSet |"} {
		if !strings.Contains(out, s) {
			t.Errorf("the report lacks %q", s)
		}
	}
	// A kind leaf whose point before it is missing cannot be fitted.
	delete(r.Benchmarks, "ControllerScale/revisions=2000")
	if _, err := fitScale(r); err == nil || !strings.Contains(err.Error(), "jobs=1000") {
		t.Errorf("a jobs leaf without the revisions point before it: %v", err)
	}
}

// TestRenderCrowd: the crowd leaf's figures land in the capacity section, beside the floor.
func TestRenderCrowd(t *testing.T) {
	r := newRunResults()
	var w mdWriter
	renderCrowd(&w, r)
	if w.String() != "" {
		t.Fatalf("no crowd leaf, yet rendered:\n%s", w.String())
	}
	r.Benchmarks["ControllerScale/crowd=1000"] = []*record{{Metrics: map[string]float64{
		"replicasets": 10000, "crowd-jobs": 1000, "crowd-create-s": 12, "crowd-settled-s": 3.5, "crowd-owners": 31, "crowd-job-owners": 30,
		"crowd-uncapped-owners": 1000, "crowd-bytes": 4321, "crowd-uncapped-bytes": 98765, "crowd-requests": 80, "crowd-patches": 6, "crowd-rss-MiB": 3, "crowd-heap-MiB": 2,
	}}}
	renderCrowd(&w, r)
	for _, want := range []string{"`crowd=1000`", "| owner references on the object | 31 | 1000 |", "30 of them (those that owned the objects before they were more than 32)", "| the object's size | 4321 bytes | 98765 bytes |", "80 requests for them (6 patches).", "its Go heap in use was 2.0 MiB and its RSS 3.0 MiB higher"} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("missing %q in:\n%s", want, w.String())
		}
	}
}

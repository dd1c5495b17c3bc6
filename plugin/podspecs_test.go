package plugin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// censusPod is a Pod's metadata as the metadata list returns it.
func censusPod(name, kind string, labels map[string]string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: labels}}
	apiVersion := map[string]string{"ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "Workflow": "argoproj.io/v1alpha1"}[kind]
	if kind != "" {
		yes := true
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "uid-owner", Controller: &yes}}
	}
	return m
}

// readsOf describes SpecReads as "labels <selector>", "name <name>" or "all".
func readsOf(c *PodCensus, revisions bool) []string {
	var out []string
	for _, o := range c.SpecReads(revisions) {
		switch {
		case o.FieldSelector != "":
			out = append(out, "name "+strings.TrimPrefix(o.FieldSelector, "metadata.name="))
		case o.LabelSelector != "":
			out = append(out, "labels "+o.LabelSelector)
		default:
			out = append(out, "all")
		}
		if o.FieldSelector == "" && o.Limit != PageSize {
			out[len(out)-1] += " (not paged)"
		}
	}
	return out
}

// TestSpecReads: the specs of the Pods no known controller stands for are read with a number
// of requests that does not grow with their count: one list per group with the same label keys
// (when its selector returns at most a page more), the others by name, or every Pod in one
// list when more than manyPods are left by name.
func TestSpecReads(t *testing.T) {
	team := map[string]string{"team": "payments"}
	for _, tc := range []struct {
		name      string
		pods      func(add func(*metav1.PartialObjectMetadata))
		revisions bool
		want      []string
	}{
		{"a ReplicaSet's Pods: nothing", func(add func(*metav1.PartialObjectMetadata)) {
			for i := range 200 {
				add(censusPod(fmt.Sprint("web-", i), "ReplicaSet", team))
			}
		}, true, nil},
		{"a Workflow's Pods among many copying labels: one list by theirs", func(add func(*metav1.PartialObjectMetadata)) {
			for i := range 200 {
				add(censusPod(fmt.Sprint("web-", i), "ReplicaSet", map[string]string{"team": "payments", "app": "wf"}))
			}
			for i := range 50 {
				add(censusPod(fmt.Sprint("wf-", i), "Workflow", map[string]string{"team": "payments", "app": "wf", "workflow": fmt.Sprint("wf-", i/5)}))
			}
		}, true, []string{"labels app in (wf),team in (payments),workflow in (wf-0,wf-1,wf-2,wf-3,wf-4,wf-5,wf-6,wf-7,wf-8,wf-9)"}},
		{"a selector that would return over a page more: by name", func(add func(*metav1.PartialObjectMetadata)) {
			for i := range 200 {
				add(censusPod(fmt.Sprint("web-", i), "ReplicaSet", team))
			}
			add(censusPod("a", "Workflow", team))
			add(censusPod("b", "Workflow", team))
		}, true, []string{"name a", "name b"}},
		{"a key with one value per Pod past maxSelector is left out", func(add func(*metav1.PartialObjectMetadata)) {
			for i := range 70 {
				add(censusPod(fmt.Sprint("run-", i), "", map[string]string{"pipeline": "p",
					"taskrun": fmt.Sprintf("a-task-run-with-a-rather-long-generated-name-%04d", i)}))
			}
		}, true, []string{"labels pipeline in (p)"}},
		{"bare Pods without labels: by name", func(add func(*metav1.PartialObjectMetadata)) {
			add(censusPod("debug", "", nil))
			add(censusPod("shell", "", nil))
		}, true, []string{"name debug", "name shell"}},
		{"more than manyPods by name: every Pod in one list", func(add func(*metav1.PartialObjectMetadata)) {
			for i := range manyPods + 1 {
				add(censusPod(fmt.Sprint("debug-", i), "", nil))
			}
		}, true, []string{"all"}},
		{"a StatefulSet's Pods only without its revisions", func(add func(*metav1.PartialObjectMetadata)) {
			for i := range 3 {
				add(censusPod(fmt.Sprint("db-", i), "StatefulSet", map[string]string{"app": "db", "pod": fmt.Sprint(i)}))
			}
		}, false, []string{"labels app in (db),pod in (0,1,2)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c PodCensus
			tc.pods(func(m *metav1.PartialObjectMetadata) { c.Add(m) })
			got := readsOf(&c, tc.revisions)
			if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Errorf("reads\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			if len(c.setPods) > 0 {
				if r := readsOf(&c, true); len(r) != 0 {
					t.Errorf("with revisions, a StatefulSet's Pods read: %v", r)
				}
			}
		})
	}
}

// TestDocsStateSpecReadLimits: docs/security.md states the limits the spec reads use.
func TestDocsStateSpecReadLimits(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	for _, want := range []string{
		fmt.Sprintf("would pass %s characters", thousandsOf(maxSelector)),
		fmt.Sprintf("when more than %d Pods would be read by name", manyPods),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/security.md does not say %q", want)
		}
	}
}

func thousandsOf(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

package plugin

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
)

// The specs of the Pods no known controller's template stands for (bare, or of a kind
// configmap-attacher does not read, such as an Argo Workflow's or a Tekton TaskRun's): which
// Pods they are comes from the Pods' metadata and their controller references (podController);
// how they are read is chosen here so that the requests do not grow with their number.
//
// Labels narrow that read and never decide it. The Pods wanted are fixed, by UID, before any
// label is looked at; the Pods that share the same label keys are read with one list whose
// selector is built from their own labels (each key, in the values they carry), every answer is
// kept by UID only, and a wanted Pod the answer did not hold (its labels changed since the
// metadata read) is read by name after. A copied label can make the list return more Pods,
// never fewer.

// podName is a Pod whose spec may have to be read, with its labels (the material of the
// selector that reads it).
type podName struct {
	name   string
	uid    types.UID
	labels map[string]string
}

// PodCensus is what a read of a namespace's Pods' metadata keeps for reading specs: the Pods
// whose spec may be needed and, to know how many Pods a selector would return, how many Pods
// carry each distinct set of labels (a few per workload; one per Pod only where Pods carry a
// label of their own, as a StatefulSet's statefulset.kubernetes.io/pod-name).
type PodCensus struct {
	// setPods are the Pods a StatefulSet or DaemonSet controls (their revisions stand for
	// them when read), otherPods those no known controller does.
	setPods, otherPods []podName
	sets               map[string]*labelCount
	// keys and key are Add's scratch: it runs once per Pod of a busy namespace, inside the
	// step, and builds a label set's key without allocating unless the set is new.
	keys []string
	key  []byte
}

// labelCount is one distinct set of labels and how many Pods carry it.
type labelCount struct {
	labels labels.Set
	n      int
}

// Add takes one Pod's metadata.
func (c *PodCensus) Add(m metav1.Object) {
	ls := m.GetLabels()
	// The set's key: its pairs sorted by key ("k=v,"; neither '=' nor ',' can occur in a
	// label's key or value, so the key is unambiguous).
	c.keys = c.keys[:0]
	for k := range ls {
		c.keys = append(c.keys, k)
	}
	slices.Sort(c.keys)
	c.key = c.key[:0]
	for _, k := range c.keys {
		c.key = append(append(append(append(c.key, k...), '='), ls[k]...), ',')
	}
	if c.sets == nil {
		c.sets = map[string]*labelCount{}
	}
	if lc := c.sets[string(c.key)]; lc != nil {
		lc.n++
	} else {
		c.sets[string(c.key)] = &labelCount{labels: ls, n: 1}
	}
	p := podName{m.GetName(), m.GetUID(), m.GetLabels()}
	switch podController(metav1.GetControllerOfNoCopy(m)) {
	case podOfTemplate:
	case podOfSet:
		c.setPods = append(c.setPods, p)
	default:
		c.otherPods = append(c.otherPods, p)
	}
}

// want is the Pods whose spec is read: those no known controller stands for, and the
// StatefulSets' and DaemonSets' unless their revisions were read.
func (c *PodCensus) want(revisions bool) []podName {
	if revisions {
		return c.otherPods
	}
	return append(slices.Clip(c.otherPods), c.setPods...)
}

// SpecReads lists the requests that read the wanted Pods' specs (revisions: the
// ControllerRevisions were read), in order: one paged list per group of at least two Pods with
// the same label keys whose selector returns at most a page more than the group; each other
// wanted Pod by name; or, when those by name would be more than manyPods, one paged list of
// every Pod instead of all of them. A wanted Pod a group's list no longer returns is read by
// name after (not listed here: its labels changed in between).
func (c *PodCensus) SpecReads(revisions bool) []metav1.ListOptions {
	reads, _ := c.specReads(c.want(revisions))
	return reads
}

// specReads is SpecReads of want, and the Pods it reads by a group's selector.
func (c *PodCensus) specReads(want []podName) (reads []metav1.ListOptions, grouped []podName) {
	if len(want) == 0 {
		return nil, nil
	}
	groups, rest := c.plan(want)
	if len(rest) > manyPods {
		return []metav1.ListOptions{{Limit: PageSize}}, nil
	}
	for _, g := range groups {
		reads = append(reads, metav1.ListOptions{LabelSelector: g.selector, Limit: PageSize})
		grouped = append(grouped, g.pods...)
	}
	for _, p := range rest {
		reads = append(reads, byName(p.name))
	}
	return reads, grouped
}

func byName(name string) metav1.ListOptions {
	return metav1.ListOptions{FieldSelector: "metadata.name=" + name}
}

// maxSelector bounds a selector's length: a key whose values would make it longer (one value
// per Pod, as a TaskRun's name) is left out, which widens the list and never shortens it.
const maxSelector = 2000

// specGroup is wanted Pods read by one label selector.
type specGroup struct {
	selector string
	pods     []podName
}

// plan splits want into groups read by a selector and the rest, read by name.
func (c *PodCensus) plan(want []podName) (groups []specGroup, rest []podName) {
	byKeys := map[string][]podName{}
	var order []string
	for _, p := range want {
		keys := make([]string, 0, len(p.labels))
		for k := range p.labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		sig := strings.Join(keys, ",")
		if _, ok := byKeys[sig]; !ok {
			order = append(order, sig)
		}
		byKeys[sig] = append(byKeys[sig], p)
	}
	for _, sig := range order {
		pods := byKeys[sig]
		if len(pods) < 2 || sig == "" {
			rest = append(rest, pods...)
			continue
		}
		sel, ok := selectorOf(pods)
		if !ok || c.matching(sel)-len(pods) > PageSize {
			rest = append(rest, pods...)
			continue
		}
		groups = append(groups, specGroup{sel.String(), pods})
	}
	return groups, rest
}

// selectorOf is the selector "key in (values)" over every label key the pods share, in the
// values they carry, without the keys with the most values while it is longer than
// maxSelector; false when no key is left.
func selectorOf(pods []podName) (labels.Selector, bool) {
	values := map[string]map[string]bool{}
	for k := range pods[0].labels {
		values[k] = map[string]bool{}
	}
	for _, p := range pods {
		for k, v := range p.labels {
			if vs, ok := values[k]; ok {
				vs[v] = true
			}
		}
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	// Fewest values first; ties by name, so the same Pods give the same selector.
	sort.Slice(keys, func(i, j int) bool {
		if len(values[keys[i]]) != len(values[keys[j]]) {
			return len(values[keys[i]]) < len(values[keys[j]])
		}
		return keys[i] < keys[j]
	})
	for n := len(keys); n > 0; n-- {
		sel := labels.NewSelector()
		for _, k := range keys[:n] {
			vs := make([]string, 0, len(values[k]))
			for v := range values[k] {
				vs = append(vs, v)
			}
			r, err := labels.NewRequirement(k, selection.In, vs)
			if err != nil {
				return nil, false
			}
			sel = sel.Add(*r)
		}
		if len(sel.String()) <= maxSelector {
			return sel, true
		}
	}
	return nil, false
}

// matching is how many Pods of the census sel selects.
func (c *PodCensus) matching(sel labels.Selector) int {
	n := 0
	for _, lc := range c.sets {
		if sel.Matches(lc.labels) {
			n += lc.n
		}
	}
	return n
}

// podSpecs reads the specs of the Pods the census wants, as SpecReads says, keeping each answer
// by UID; then, by name, any wanted Pod a group's list did not
// return. A Pod gone since is simply not there. Lists, not gets: the Rollouts controller's role
// lists Pods but does not get them.
func (r *usageRead) podSpecs(ctx context.Context, census *PodCensus) error {
	want := census.want(r.revisions)
	if len(want) == 0 {
		return nil
	}
	keep := make(map[types.UID]bool, len(want))
	for _, p := range want {
		keep[p.uid] = true
	}
	var mu sync.Mutex
	seen := map[types.UID]bool{}
	var added []template
	// read sends one list (paged when opts has a limit), adding the wanted Pods it returns.
	read := func(ctx context.Context, opts metav1.ListOptions) error {
		var mine []template
		var mineSeen []types.UID
		page := func(ctx context.Context, opts metav1.ListOptions) (string, error) {
			l, err := r.a.Client.ListPods(ctx, r.ns, opts)
			if err != nil {
				return "", err
			}
			for i := range l.Items {
				if p := &l.Items[i]; keep[p.UID] {
					mine = append(mine, template{user: OtherUser{"Pod", p.Name}, refs: TemplateReferences(&p.Spec)})
					mineSeen = append(mineSeen, p.UID)
				}
			}
			r.read.Add(int64(len(l.Items)))
			return l.Continue, nil
		}
		var err error
		if opts.Limit > 0 {
			err = r.a.pages(ctx, opts, func() { mine, mineSeen = nil, nil }, page)
		} else {
			err = r.a.call(ctx, func(ctx context.Context) error {
				mine, mineSeen = nil, nil
				_, err := page(ctx, opts)
				return err
			})
		}
		mu.Lock()
		defer mu.Unlock()
		added = append(added, mine...)
		for _, uid := range mineSeen {
			seen[uid] = true
		}
		return err
	}
	// send reads by name concurrently and the paged lists one after another, beside them:
	// each page holds up to PageSize Pods in full, so one at a time keeps the memory of one
	// list of every Pod, however many groups there are.
	send := func(reads []metav1.ListOptions) error {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(r.a.concurrency())
		var paged []metav1.ListOptions
		for _, opts := range reads {
			if opts.Limit > 0 {
				paged = append(paged, opts)
			}
		}
		g.Go(func() error {
			for _, opts := range paged {
				if err := read(gctx, opts); err != nil {
					return err
				}
			}
			return nil
		})
		for _, opts := range reads {
			if opts.Limit == 0 {
				g.Go(func() error { return read(gctx, opts) })
			}
		}
		return g.Wait()
	}
	reads, grouped := census.specReads(want)
	err := send(reads)
	if err == nil {
		var again []metav1.ListOptions
		for _, p := range grouped {
			if !seen[p.uid] {
				again = append(again, byName(p.name))
			}
		}
		err = send(again)
	}
	if err != nil {
		return r.a.usageError(err, "pods", r.ns)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.u.templates = append(r.u.templates, added...)
	return nil
}

// manyPods is how many Pods' specs are read by name (a small request each, concurrently)
// before one paged list of the namespace's Pods is read instead. By name is far cheaper for
// both sides until the requests outnumber that list's pages many times over: 64 Pods by name
// are ~64 small answers (~4 KiB each), while one list of a 5,000-Pod namespace is 50 pages of
// every Pod in full (MiBs). Pods that share their label keys (a Workflow's, a TaskRun's) are
// read by one list per group instead, so only Pods with label keys of their own count here.
const manyPods = 64

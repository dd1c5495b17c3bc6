package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// say prints a narration line.
func say(format string, args ...any) {
	fmt.Printf("   "+format+"\n", args...)
}

// stage prints a stage heading.
func stage(format string, args ...any) {
	fmt.Printf("\n── "+format+"\n", args...)
}

func since(t time.Time) time.Duration {
	d := time.Since(t)
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// printTree prints the heading and the current tree.
func (d *demo) printTree(heading string) error {
	s, err := d.snapshot()
	if err != nil {
		return fmt.Errorf("read the state for the tree: %w", err)
	}
	d.notePluginPIDs()
	stage("%s", heading)
	fmt.Print(render(s))
	return nil
}

// snapshot reads the Rollout, its ReplicaSets and the app's revisioned objects.
func (d *demo) snapshot() (snapshot, error) {
	ro, err := d.rollout()
	if err != nil {
		return snapshot{}, err
	}
	rss, err := d.replicaSets(ro)
	if err != nil {
		return snapshot{}, err
	}
	s := snapshot{Rollout: namespace + "/" + appName}
	rsName := func(hash string) string { return appName + "-" + hash }
	switch {
	case ro.Status.CurrentPodHash == ro.Status.StableRS:
		s.Summary = fmt.Sprintf("%s, stable %s", ro.Status.Phase, rsName(ro.Status.StableRS))
	default:
		s.Summary = fmt.Sprintf("stable %s, canary %s", rsName(ro.Status.StableRS), rsName(ro.Status.CurrentPodHash))
		if len(ro.Status.PauseConditions) > 0 && ro.Status.CurrentStepIndex != nil {
			s.Summary += fmt.Sprintf(", paused at step %d", *ro.Status.CurrentStepIndex)
		} else {
			s.Summary += ", " + string(ro.Status.Phase)
		}
	}
	for i := range rss {
		rs := &rss[i]
		v := rsView{Name: rs.Name, Revision: rs.Annotations[revisionAnnot], Ready: rs.Status.ReadyReplicas}
		if rs.Spec.Replicas != nil {
			v.Replicas = *rs.Spec.Replicas
		}
		switch h := rs.Labels[cluster.RolloutsHashLabel]; {
		case h == ro.Status.StableRS:
			v.Role = "stable"
		case h == ro.Status.CurrentPodHash:
			v.Role = "canary"
		default:
			v.Role = "old"
		}
		for _, ref := range cluster.PodConfigRefs(&rs.Spec.Template.Spec) {
			m, err := d.meta(ref)
			if err != nil {
				return snapshot{}, err
			}
			o := objView{Kind: ref.Kind, Name: ref.Name, State: stateOwned}
			switch {
			case m == nil:
				o.State = stateMissing
			case !ownedBy(m.OwnerReferences, rs):
				o.State = stateNotOwned
			}
			v.Objects = append(v.Objects, o)
		}
		s.RSs = append(s.RSs, v)
	}
	// Revisioned objects of the app that no ReplicaSet owns.
	for n := 1; n <= revisions; n++ {
		r := d.revs[n]
		if r == nil {
			continue
		}
		for _, ref := range r.objects() {
			m, err := d.meta(ref)
			if err != nil {
				return snapshot{}, err
			}
			if m != nil && !slices.ContainsFunc(m.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "ReplicaSet" }) {
				s.Unowned = append(s.Unowned, objView{Kind: ref.Kind, Name: ref.Name, State: fmt.Sprintf("(revision %d)", n)})
			}
		}
	}
	// What the demo created that is gone.
	for n := 1; n <= revisions; n++ {
		r := d.revs[n]
		if r == nil {
			continue
		}
		var gone []string
		if r.rs != nil && findRSByUID(rss, r.rs.UID) == nil {
			gone = append(gone, "ReplicaSet "+r.rs.Name)
		}
		for _, ref := range r.objects() {
			m, err := d.meta(ref)
			if err != nil {
				return snapshot{}, err
			}
			if m == nil {
				gone = append(gone, ref.Kind+" "+ref.Name)
			}
		}
		if len(gone) > 0 {
			s.Collected = append(s.Collected, fmt.Sprintf("rev %d: %s", n, strings.Join(gone, ", ")))
		}
	}
	return s, nil
}

package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// WriteText writes the report as a tree per workload, the findings with their repair
// commands, what -fix did (or would do), and a summary line.
func (r *Report) WriteText(w io.Writer) {
	for _, ra := range append(append([]Workload(nil), r.Rollouts...), r.Deployments...) {
		writeWorkload(w, ra)
	}
	if len(r.Unattributed) > 0 {
		fmt.Fprintf(w, "Opted-in objects (%s) that no audited workload uses and nothing owns\n", r.Selector)
		writeFindings(w, r.Unattributed)
		fmt.Fprintln(w)
	}
	r.writeSummary(w)
}

// writeWorkload writes one workload: a branch per ReplicaSet with the status of each object
// it references, one for the objects no ReplicaSet uses, then the findings.
func writeWorkload(w io.Writer, ra Workload) {
	kind := ra.Kind
	if kind == "" {
		kind = plugin.KindRollout
	}
	fmt.Fprintf(w, "%s %s/%s\n", kind, ra.Namespace, ra.Name)
	if ra.Error != "" {
		fmt.Fprintf(w, "└─ ERROR %s\n\n", ra.Error)
		return
	}
	type node struct {
		label string
		lines [][2]string // object label, status
	}
	var nodes []node
	width := 0
	findingTypes := map[plugin.Object][]string{}
	for _, f := range ra.Findings {
		o := plugin.Object{Kind: f.Kind, Name: f.Name}
		if !slices.Contains(findingTypes[o], f.Type) {
			findingTypes[o] = append(findingTypes[o], f.Type)
		}
	}
	for _, rs := range ra.ReplicaSets {
		var notes []string
		if rs.Current {
			notes = append(notes, "current")
		}
		if rs.Revision != "" {
			notes = append(notes, "revision "+rs.Revision)
		}
		if rs.Deleting {
			notes = append(notes, "being deleted")
		}
		n := node{label: "ReplicaSet " + rs.Name}
		if len(notes) > 0 {
			n.label += " (" + strings.Join(notes, ", ") + ")"
		}
		for _, e := range rs.Objects {
			n.lines = append(n.lines, [2]string{string(e.Kind) + " " + e.Name, edgeText(e)})
		}
		nodes = append(nodes, n)
	}
	other := node{label: "not used by any ReplicaSet"}
	for _, o := range ra.Objects {
		if len(o.UsedBy) > 0 {
			continue
		}
		var st []string
		for _, t := range findingTypes[o.Object()] {
			if t == FindingStray || t == FindingLegacy {
				t += " owner"
			}
			st = append(st, strings.ToUpper(t))
		}
		switch {
		case len(st) > 0:
		case !o.Exists:
			st = append(st, "absent (named in a step)")
		case len(o.Owners) > 0:
			st = append(st, "owned")
		default:
			st = append(st, "no owner")
		}
		other.lines = append(other.lines, [2]string{string(o.Kind) + " " + o.Name, strings.Join(st, ", ")})
	}
	if len(other.lines) > 0 {
		nodes = append(nodes, other)
	}
	if len(nodes) == 0 {
		nodes = append(nodes, node{label: "(no ReplicaSets)"})
	}
	for _, n := range nodes {
		for _, l := range n.lines {
			width = max(width, len(l[0]))
		}
	}
	for i, n := range nodes {
		branch, indent := "├─ ", "│  "
		if i == len(nodes)-1 {
			branch, indent = "└─ ", "   "
		}
		fmt.Fprintf(w, "%s%s\n", branch, n.label)
		for j, l := range n.lines {
			b := "├─ "
			if j == len(n.lines)-1 {
				b = "└─ "
			}
			fmt.Fprintf(w, "%s%s%-*s  %s\n", indent, b, width, l[0], l[1])
		}
	}
	writeFindings(w, ra.Findings)
	fmt.Fprintln(w)
}

// writeSummary writes what -fix did or can do, the objects it may not touch, and the counts.
func (r *Report) writeSummary(w io.Writer) {
	s := r.Summary
	switch {
	case r.Fix != nil:
		n := 0
		parts := make([]string, len(r.Fix.Added))
		for i, add := range r.Fix.Added {
			n += len(add.ReplicaSets)
			parts[i] = fmt.Sprintf("%s/%s %s ← %s", add.Namespace, add.Kind, add.Name, strings.Join(add.ReplicaSets, ", "))
		}
		if len(parts) == 0 {
			fmt.Fprintln(w, "fixed: nothing to add")
		} else {
			fmt.Fprintf(w, "fixed: added %d owner reference(s) to %d object(s): %s\n", n, len(parts), strings.Join(parts, "; "))
		}
		for _, e := range r.Fix.Errors {
			fmt.Fprintf(w, "fix failed: %s\n", e)
		}
		for _, sk := range r.Fix.Skipped {
			fmt.Fprintf(w, "fix left alone: %s\n", sk)
		}
	case s.Fixable > 0:
		fmt.Fprintf(w, "missing owners: %d owner reference(s) can be added: run again with -fix\n", s.Fixable)
	}
	if s.SharedOwners > 0 {
		fmt.Fprintf(w, "shared: %d ReplicaSet(s) use objects that a user that cannot own them also uses; -fix leaves them alone\n", s.SharedOwners)
	}
	if n := s.MissingOwners - s.Fixable - s.SharedOwners; n > 0 {
		fmt.Fprintf(w, "not opted in: %d ReplicaSet(s) use objects that other ReplicaSets own; -fix leaves them alone (label them %s=true to let it add owners)\n",
			n, plugin.OptInLabel)
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if s.Errors > 0 {
		fmt.Fprintf(w, "errors: %d Rollout(s) could not be audited\n", s.Errors)
	}
	// shared only when there are some: the line's four counts are what scripts read.
	shared := ""
	if s.Shared > 0 {
		shared = fmt.Sprintf(", %d shared", s.Shared)
	}
	fmt.Fprintf(w, "findings: %d lost, %d unowned, %d stray, %d legacy%s\n", s.Lost, s.Unowned, s.Stray, s.Legacy, shared)
}

func writeFindings(w io.Writer, fs []Finding) {
	for _, f := range fs {
		fmt.Fprintf(w, "  %-8s %s %s: %s\n", strings.ToUpper(f.Type), f.Kind, f.Name, f.Message)
		if f.Command != "" {
			fmt.Fprintf(w, "  %-8s $ %s\n", "", f.Command)
		}
	}
}

func edgeText(e Edge) string {
	switch e.Status {
	case EdgeOwned:
		return "owned"
	case EdgeMissingOwner:
		if e.Fixable {
			return "MISSING OWNER"
		}
		if e.Shared {
			return "MISSING OWNER (shared: -fix leaves it alone)"
		}
		return "MISSING OWNER (not opted in: -fix leaves it alone)"
	case EdgeLost:
		return "LOST (does not exist)"
	case EdgeAbsentOptional:
		return "absent (optional reference)"
	case EdgeNotOptedIn:
		return "not opted in"
	}
	return e.Status
}

// WriteJSON writes the report as one indented JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

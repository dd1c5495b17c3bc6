package main

import (
	"fmt"
	"strings"
)

// snapshot is what one tree shows: the Rollout, its ReplicaSets (newest first) with the
// ConfigMaps and Secrets each pod template uses, the revisioned objects no ReplicaSet owns,
// and what the demo created that is gone.
type snapshot struct {
	Rollout   string // namespace/name
	Summary   string // e.g. "stable web-5b8a1c, canary web-6d9f8c, paused at step 2"
	RSs       []rsView
	Unowned   []objView
	Collected []string // e.g. "rev 1: ReplicaSet web-5b8a1c, ConfigMap web-config-a1b2c"
}

type rsView struct {
	Name            string
	Revision        string
	Role            string // stable, canary, old
	Ready, Replicas int32
	Objects         []objView
}

// Object states.
const (
	stateOwned    = "owned"
	stateNotOwned = "not owned"
	stateMissing  = "missing"
)

type objView struct {
	Kind, Name string
	State      string // stateOwned, stateNotOwned, stateMissing; for Unowned: a note
}

// render draws s as a tree with box-drawing characters, columns aligned.
func render(s snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Rollout %s  (%s)\n", s.Rollout, s.Summary)
	nameW, roleW, objW := 0, 0, 0
	for _, rs := range s.RSs {
		nameW = max(nameW, len(rs.Name))
		roleW = max(roleW, len(rs.Role))
		for _, o := range rs.Objects {
			objW = max(objW, len(o.Name))
		}
	}
	for _, o := range s.Unowned {
		objW = max(objW, len(o.Name))
	}
	type branch struct {
		line     string
		children []string
	}
	var branches []branch
	for _, rs := range s.RSs {
		br := branch{line: fmt.Sprintf("ReplicaSet %-*s  rev %s  %-*s  %d/%d ready", nameW, rs.Name, rs.Revision, roleW, rs.Role, rs.Ready, rs.Replicas)}
		for _, o := range rs.Objects {
			br.children = append(br.children, fmt.Sprintf("%-9s %-*s  %s", o.Kind, objW, o.Name, objectState(o.State)))
		}
		if len(rs.Objects) == 0 {
			br.children = append(br.children, "(no ConfigMap or Secret)")
		}
		branches = append(branches, br)
	}
	if len(s.Unowned) == 0 {
		branches = append(branches, branch{line: "(not owned by any ReplicaSet)  none"})
	} else {
		br := branch{line: "(not owned by any ReplicaSet: never collected)"}
		for _, o := range s.Unowned {
			br.children = append(br.children, strings.TrimRight(fmt.Sprintf("%-9s %-*s  %s", o.Kind, objW, o.Name, o.State), " "))
		}
		branches = append(branches, br)
	}
	for i, c := range s.Collected {
		line := "           " + c
		if i == 0 {
			line = "collected  " + c
		}
		branches = append(branches, branch{line: line})
	}
	for i, br := range branches {
		last := i == len(branches)-1
		head, pad := "├─ ", "│  "
		if last {
			head, pad = "└─ ", "   "
		}
		b.WriteString(head + br.line + "\n")
		for j, c := range br.children {
			if j == len(br.children)-1 {
				b.WriteString(pad + "└─ " + c + "\n")
			} else {
				b.WriteString(pad + "├─ " + c + "\n")
			}
		}
	}
	return b.String()
}

func objectState(s string) string {
	switch s {
	case stateOwned:
		return "← owned"
	case stateNotOwned:
		return "✗ NOT OWNED by this ReplicaSet"
	case stateMissing:
		return "✗ MISSING (its pods fail with CreateContainerConfigError)"
	}
	return s
}

package soak

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// quietResult is what the end of the run found once the faults had stopped.
type quietResult struct {
	settleTook    time.Duration
	stepErrors    []string // step Errors that did not clear
	stepErrorSeen int      // step plugin statuses in Error at the start of the quiet phase
	rvChecked     int
	gcCleanups    int // resourceVersion changes that were the garbage collector removing references to deleted ReplicaSets
	rvWindow      time.Duration
	gauges        map[string][2]float64 // ns -> unowned, lost (leader's gauges)
	audit         map[string][2]float64 // ns -> unowned, lost (audit)
	auditGaps     map[string][2]float64 // ns -> unowned, lost (audit's gaps: the gauges' computation)
	auditFindings map[string][]string   // ns -> the audit's unowned and lost findings
	unattributed  []string              // the audit's unattributed findings (not compared)
	auditScope    string
	auditErr      string
	final         []string // unowned/lost pairs seen by the soak's own final check
}

// final stops the faults, waits for quiet and checks everything once more.
func (s *soak) final() *quietResult {
	q := &quietResult{}
	t0 := time.Now()
	s.note("operations stopped; waiting for quiet")
	// The CronJob is suspended: no Job starts (and gains owners) while quiet.
	if s.kinds != nil {
		if err := s.suspendCron(); err != nil {
			s.note("suspending the CronJob: %v", err)
		}
	}
	// A leader, and the ReplicaSets stable (no add or delete) for 10 s.
	deadline := time.Now().Add(90 * time.Second)
	for s.leader() == nil && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	var last string
	stableSince := time.Now()
	for time.Now().Before(deadline) {
		// Every workload's controller has observed its last apply (a Rollouts controller that
		// was restarted or throttled can take seconds to create the ReplicaSet of an apply made
		// just before the operations stopped), and no ReplicaSet came or went for 10 s.
		fp := s.rsFingerprint() + "|" + s.unobserved()
		if fp != last {
			last, stableSince = fp, time.Now()
		}
		if time.Since(stableSince) > 10*time.Second && s.unobserved() == "" {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Every step Error clears once the faults stop (the Rollouts controller retries).
	errs := s.stepErrors()
	q.stepErrorSeen = len(errs)
	for len(errs) > 0 && time.Now().Before(deadline.Add(60*time.Second)) {
		time.Sleep(2 * time.Second)
		errs = s.stepErrors()
	}
	for _, e := range errs {
		s.addViolation(6, "step Error did not clear after the faults stopped: "+e)
	}
	q.stepErrors = errs
	q.settleTook = time.Since(t0)
	// Nothing unowned, nothing lost, on the soak's own reading.
	if snap, err := s.mon.list(nowCtx()); err == nil {
		q.final = unownedIn(snap, "")
	}
	// Invariant 5: with nothing running, no resourceVersion moves (one full resync of the
	// controller mode, -resync, falls inside the window).
	before, err := s.resourceVersions()
	if err != nil {
		s.note("resourceVersions: %v", err)
	}
	q.rvWindow = resync + 3*time.Second
	time.Sleep(q.rvWindow)
	after, err := s.resourceVersions()
	if err != nil {
		s.note("resourceVersions: %v", err)
	}
	q.rvChecked = len(before)
	live := map[types.UID]bool{}
	if snap, err := s.mon.list(nowCtx()); err == nil {
		live = snap.alive
	}
	for k, v := range before {
		a, ok := after[k]
		if !ok || a.rv == v.rv {
			continue
		}
		// The garbage collector removing references to owners that are gone (ReplicaSets,
		// Jobs deleted by their TTL, anchors whose grace ran out) is the one write expected
		// with nothing running.
		var added, removedLive []string
		removed := 0
		for uid, name := range a.uids {
			if _, had := v.uids[uid]; !had {
				added = append(added, name)
			}
		}
		for uid, name := range v.uids {
			if _, has := a.uids[uid]; !has {
				removed++
				if live[uid] {
					removedLive = append(removedLive, name)
				}
			}
		}
		switch {
		case len(removedLive) > 0:
			s.addViolation(5, fmt.Sprintf("%s: owner references to live owners %v removed while nothing ran (resourceVersion %s → %s, owners %s → %s; managers %s)",
				k, removedLive, v.rv, a.rv, v.owners, a.owners, a.managers))
		case removed > 0 && len(added) == 0:
			q.gcCleanups++
		default:
			s.addViolation(5, fmt.Sprintf("%s rewritten while nothing ran: resourceVersion %s → %s, owners %s → %s (managers %s)",
				k, v.rv, a.rv, v.owners, a.owners, a.managers))
		}
	}
	s.checkLeaks()
	// Invariant 6: the gauges (recomputed every 10 s: the window above was longer) agree with a
	// fresh audit.
	q.gauges, q.audit, q.auditScope, q.auditErr = s.gaugesAndAudit(q)
	detail := func(ns string) string {
		d := fmt.Sprintf(" (audit's gaps: unowned=%v lost=%v; its findings: %s)", q.auditGaps[ns][0], q.auditGaps[ns][1], strings.Join(q.auditFindings[ns], "; "))
		if snap, err := s.mon.list(nowCtx()); err == nil {
			d += "; the soak's own reading: " + strings.Join(unownedIn(snap, ns), ", ")
		}
		return d
	}
	for ns, g := range q.gauges {
		if a := q.audit[ns]; a != g && q.auditScope != "" && (q.auditScope == "all" || strings.Contains(q.auditScope, ns)) {
			s.addViolation(6, fmt.Sprintf("namespace %s: gauges unowned=%v lost=%v, audit unowned=%v lost=%v", ns, g[0], g[1], a[0], a[1])+detail(ns))
		}
	}
	for ns, a := range q.audit {
		if _, ok := q.gauges[ns]; !ok && (a[0] != 0 || a[1] != 0) {
			s.addViolation(6, fmt.Sprintf("namespace %s: no gauge, audit unowned=%v lost=%v", ns, a[0], a[1])+detail(ns))
		}
	}
	for _, u := range q.unattributed {
		s.note("audit, unattributed (not a gauge figure, not compared): %s", u)
	}
	for _, f := range q.final {
		s.addViolation(2, "after quiet: "+f)
	}
	return q
}

func (s *soak) rsFingerprint() string {
	snap, err := s.mon.list(nowCtx())
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, rs := range snap.rss {
		parts = append(parts, fmt.Sprintf("%s/%v", rs.UID, rs.DeletionTimestamp != nil))
	}
	for _, w := range snap.workloads {
		if w.kind == "Job" {
			parts = append(parts, fmt.Sprintf("%s/%v", w.uid, w.live))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (s *soak) stepErrors() []string {
	var out []string
	for _, w := range s.wd.ws {
		if w.kind != kindCanary {
			continue
		}
		ro, err := s.wd.getRollout(w)
		if err != nil || ro.Status.Canary.StepPluginStatuses == nil {
			continue
		}
		for _, st := range ro.Status.Canary.StepPluginStatuses {
			if st.Phase == v1alpha1.StepPluginPhaseError {
				out = append(out, fmt.Sprintf("%s step %d %s: %s", w, st.Index, st.Operation, st.Message))
			}
		}
	}
	return out
}

type rvInfo struct {
	rv, owners, managers string
	uids                 map[types.UID]string
}

func (s *soak) resourceVersions() (map[string]rvInfo, error) {
	snap, err := s.mon.list(nowCtx())
	if err != nil {
		return nil, err
	}
	out := map[string]rvInfo{}
	for k, o := range snap.objs {
		uids := map[types.UID]string{}
		for _, r := range o.meta.OwnerReferences {
			uids[r.UID] = r.Name
		}
		out[k] = rvInfo{o.meta.ResourceVersion, refsString(o.meta.OwnerReferences), managers(o.meta.ManagedFields), uids}
	}
	return out, nil
}

// gaugesAndAudit scrapes the leader's unowned and lost gauges and runs a fresh
// `configmap-attacher audit -A -o json`.
func (s *soak) gaugesAndAudit(q *quietResult) (gauges, audit map[string][2]float64, scope, auditErr string) {
	q.auditGaps, q.auditFindings = map[string][2]float64{}, map[string][]string{}
	gauges = map[string][2]float64{}
	if r := s.leader(); r != nil {
		if m, err := r.scrape(); err == nil {
			for ns, v := range perNamespace(m, "unowned_objects") {
				if soakNS(ns) {
					g := gauges[ns]
					g[0] = v
					gauges[ns] = g
				}
			}
			for ns, v := range perNamespace(m, "lost_references") {
				if soakNS(ns) {
					g := gauges[ns]
					g[1] = v
					gauges[ns] = g
				}
			}
		}
	}
	args := []string{"audit", "-A", "-o", "json", "-kubeconfig", s.c.KubeconfigPath}
	help, _ := exec.Command(s.bin, "audit", "-h").CombinedOutput()
	scope = "all"
	if bytes.Contains(help, []byte("-workloads")) {
		args = append(args, "-workloads", "rollouts,deployments")
	} else {
		// audit does not know Deployments yet: compare the Rollout namespaces only.
		var nss []string
		for _, w := range s.wd.ws {
			if w.kind != kindDeployment {
				nss = append(nss, w.ns)
			}
		}
		scope = "Rollout namespaces only (audit has no -workloads flag yet): " + strings.Join(nss, ", ")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run() // exits non-zero when it finds something
	var rep any
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return gauges, nil, scope, fmt.Sprintf("audit: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	audit = map[string][2]float64{}
	seen := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			typ, _ := x["type"].(string)
			ns, _ := x["namespace"].(string)
			if uo, ok := x["unownedObjects"].(float64); ok && soakNS(ns) {
				lr, _ := x["lostReferences"].(float64)
				q.auditGaps[ns] = [2]float64{uo, lr}
			}
			if (typ == "unowned" || typ == "lost") && soakNS(ns) {
				key := fmt.Sprint(typ, ns, x["kind"], x["name"], x["replicaSet"])
				if !seen[key] {
					seen[key] = true
					q.auditFindings[ns] = append(q.auditFindings[ns], fmt.Sprintf("%s %v/%v rs=%v: %v", typ, x["kind"], x["name"], x["replicaSet"], x["message"]))
					a := audit[ns]
					if typ == "unowned" {
						a[0]++
					} else {
						a[1]++
					}
					audit[ns] = a
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	// The unattributed findings (objects no ReplicaSet of an audited workload uses, e.g. the
	// Secret only the StatefulSet and old revisions use) are not the gauges' (plugin.Gaps counts
	// the objects live watched ReplicaSets reference): noted, not compared.
	if m, ok := rep.(map[string]any); ok {
		if un, ok := m["unattributed"].([]any); ok {
			for _, f := range un {
				if x, ok := f.(map[string]any); ok {
					q.unattributed = append(q.unattributed, fmt.Sprintf("%v %v %v/%v: %v", x["namespace"], x["type"], x["kind"], x["name"], x["message"]))
				}
			}
			delete(m, "unattributed")
		}
	}
	walk(rep)
	return gauges, audit, scope, ""
}

var panicRE = regexp.MustCompile(`(?m)^(panic: |fatal error: |goroutine \d+ \[running\]:)|plugin.configmap-attacher.*panic`)

// scanLogs: invariant 6, no panic in the plugin's or the controller mode's logs.
func (s *soak) scanLogs() {
	logs := []string{s.rollouts.LogPath}
	for _, r := range s.replicas {
		logs = append(logs, r.logPath)
	}
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			s.note("read %s: %v", p, err)
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if panicRE.MatchString(line) {
				s.addViolation(6, fmt.Sprintf("panic in %s: %s", p, strings.TrimSpace(line)))
				break
			}
		}
	}
}

// checkLeaks decides the objects invariant 3 found not collected: kube-controller-manager is
// restarted, and an object its fresh garbage collector deletes within 30 s had correct owner
// references, all gone — the old collector's graph had lost the owner's delete event (it keeps
// a ReplicaSet node whose delete it missed, e.g. when its monitors were resynced after an
// apiserver restart; see kubernetes/kubernetes#109748). One still there is a violation.
func (s *soak) checkLeaks() {
	s.mu.Lock()
	leaks := append([]leak(nil), s.leaks...)
	s.mu.Unlock()
	if len(leaks) == 0 {
		return
	}
	// Collected late: the garbage collector's own recovery after an apiserver restart (its
	// discovery sees the API change: REST mapper reset, monitors resynced; what failed
	// meanwhile is retried with per-item exponential backoff) when a restart fell within 90 s
	// before the owners went or while it waited; otherwise a violation.
	var pending []leak
	for _, l := range leaks {
		if l.collected.IsZero() {
			pending = append(pending, l)
			continue
		}
		s.mu.Lock()
		restart := overlap(s.down, l.from.Add(-90*time.Second), l.collected) > 0
		s.mu.Unlock()
		late := l.collected.Sub(l.from).Round(time.Second)
		if restart {
			l.how = fmt.Sprintf("collected %v after its last owner went, by the same garbage collector, recovering from an apiserver restart", late)
			s.mu.Lock()
			s.gcLeaks = append(s.gcLeaks, l)
			s.mu.Unlock()
			continue
		}
		l.v.Message += fmt.Sprintf(" (collected only after %v, no apiserver restart near it)", late)
		s.mu.Lock()
		s.violations = append(s.violations, l.v)
		s.mu.Unlock()
		s.t.Errorf("VIOLATION of invariant 3 at +%.1fs after %d operations (seed %d): %s", l.v.At.Seconds(), l.v.AfterOps, s.seed, l.v.Message)
	}
	leaks = pending
	if len(leaks) == 0 {
		return
	}
	s.note("%d object(s) not collected; restarting kube-controller-manager", len(leaks))
	if err := s.c.RestartControllerManager(); err != nil {
		s.note("restart kube-controller-manager: %v", err)
	}
	deadline := time.Now().Add(45 * time.Second)
	pending = leaks
	for len(pending) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Second)
		var still []leak
		for _, l := range pending {
			var err error
			if l.kind == "Secret" {
				_, err = s.kube.CoreV1().Secrets(l.ns).Get(nowCtx(), l.name, metav1.GetOptions{})
			} else {
				_, err = s.kube.CoreV1().ConfigMaps(l.ns).Get(nowCtx(), l.name, metav1.GetOptions{})
			}
			if apierrors.IsNotFound(err) {
				l.how = "still there at the end; collected by a fresh kube-controller-manager at once (the old collector's graph had lost the owner's delete event)"
				s.mu.Lock()
				s.gcLeaks = append(s.gcLeaks, l)
				s.mu.Unlock()
				continue
			}
			still = append(still, l)
		}
		pending = still
	}
	for _, l := range pending {
		s.mu.Lock()
		l.v.Message += " (a fresh kube-controller-manager did not collect it either)"
		s.violations = append(s.violations, l.v)
		s.mu.Unlock()
		s.t.Errorf("VIOLATION of invariant 3 at +%.1fs after %d operations (seed %d): %s", l.v.At.Seconds(), l.v.AfterOps, s.seed, l.v.Message)
	}
	s.note("%d of them collected by the fresh garbage collector, %d not", len(leaks)-len(pending), len(pending))
}

// unobserved names the workloads whose controller has not observed their latest generation
// (empty when all have).
func (s *soak) unobserved() string {
	var out []string
	for _, w := range s.wd.ws {
		if w.isRollout() {
			ro, err := s.wd.getRollout(w)
			if err != nil {
				out = append(out, w.name+": "+err.Error())
			} else if ro.Status.ObservedGeneration != strconv.FormatInt(ro.Generation, 10) {
				out = append(out, fmt.Sprintf("%s/%s generation %d observed %q", w.ns, w.name, ro.Generation, ro.Status.ObservedGeneration))
			}
		}
		if w.kind == kindDeployment || w.kind == kindWorkloadRef {
			d, err := s.wd.kube.AppsV1().Deployments(w.ns).Get(nowCtx(), w.deploymentName(), metav1.GetOptions{})
			if err != nil {
				out = append(out, w.deploymentName()+": "+err.Error())
			} else if w.kind == kindDeployment && d.Status.ObservedGeneration != d.Generation {
				out = append(out, fmt.Sprintf("Deployment %s/%s generation %d observed %d", w.ns, d.Name, d.Generation, d.Status.ObservedGeneration))
			}
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

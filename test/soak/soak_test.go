package soak

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	"k8s.io/apimachinery/pkg/types"
)

const nsPrefix = "soak-"

// apiFaultSpacing separates the apiserver faults (restart, throttling period): each is
// measured from a recovered system. Back to back, client-go's reflectors back off further at
// each restart (up to 30 s, reset after 2 min without failure), which the first 10-minute run
// (seed 1764577000, a restart every 40 s) showed as an unowned window of 15.7 s.
const apiFaultSpacing = 60 * time.Second

// resync is the controller mode's full-reconcile interval: short, so that the quiet phase's
// resourceVersion window sees one.
const resync = 15 * time.Second

// The apiserver flags of a throttling period (as test/faults' TestThrottledAPIServer):
// the ServiceAccounts of the plugin and the controller mode get 429s; system:masters (the
// Rollouts controller, kube-controller-manager, the fake kubelet, this test) is exempt.
var throttleFlags = []string{"--enable-priority-and-fairness=false", "--max-requests-inflight=2", "--max-mutating-requests-inflight=1"}

// op is one entry of the operation log.
type op struct {
	At     time.Duration `json:"at"`
	Kind   string        `json:"kind"`
	Fault  bool          `json:"fault"`
	Target string        `json:"target,omitempty"`
	Detail string        `json:"detail,omitempty"`
	Err    string        `json:"error,omitempty"`
	Took   time.Duration `json:"took"`
}

func (o op) String() string {
	s := fmt.Sprintf("+%7.1fs %-16s %s", o.At.Seconds(), o.Kind, o.Target)
	if o.Detail != "" {
		s += ": " + o.Detail
	}
	if o.Err != "" {
		s += " (error: " + o.Err + ")"
	}
	return s
}

type violationRec struct {
	Invariant int           `json:"invariant"`
	At        time.Duration `json:"at"`
	Message   string        `json:"message"`
	AfterOps  int           `json:"afterOps"`
	Log       []string      `json:"log"`
}

// soak is one run.
type soak struct {
	t        *testing.T
	seed     int64
	duration time.Duration
	start    time.Time
	c        *cluster.Cluster
	kube     kubernetes.Interface
	rollouts *cluster.RolloutsController
	kubelet  *cluster.FakeKubelet
	replicas []*replica
	bin      string
	wd       *world
	mon      *monitor
	kinds    *kinds

	mu          sync.Mutex
	down        []interval // apiserver out
	throttled   []interval
	leaderless  []interval
	leaderKills []time.Time
	leaderOK    bool
	// leaderChanges: when a scrape first saw another process leading (invariant 9: a new
	// leader starts the anchor grace of a gone workload again); leaderPID the last leader seen.
	leaderChanges []time.Time
	leaderPID     int
	ops           []op
	violations    []violationRec
	deferred      map[string]int
	notes         []string
	pruned        int
	// reactionHist: the controller mode's reaction_seconds buckets, last scrape per PID.
	reactionHist map[int]map[string]float64
	leaks        []leak
	gcLeaks      []leak // the garbage collector's, not ours: collected late after an apiserver restart, or at once by a fresh kube-controller-manager
	applies      int
}

func (s *soak) since() time.Duration { return time.Since(s.start) }

func (s *soak) note(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := fmt.Sprintf("+%.1fs ", s.since().Seconds()) + fmt.Sprintf(format, args...)
	s.notes = append(s.notes, n)
	s.t.Log(n)
}

func (s *soak) record(o op) {
	s.mu.Lock()
	s.ops = append(s.ops, o)
	s.mu.Unlock()
	s.t.Log(o.String())
}

func (s *soak) addViolation(inv int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := violationRec{Invariant: inv, At: s.since(), Message: msg, AfterOps: len(s.ops), Log: s.recentOps()}
	s.violations = append(s.violations, v)
	s.t.Errorf("VIOLATION of invariant %d at +%.1fs after %d operations (seed %d): %s", inv, v.At.Seconds(), v.AfterOps, s.seed, msg)
}

// recentOps describes the last 30 operations, for a violation's record (s.mu held).
func (s *soak) recentOps() []string {
	var log []string
	for _, o := range s.ops[max(0, len(s.ops)-30):] {
		log = append(log, o.String())
	}
	return log
}

// leak is an object invariant 3 found not collected, with the state when it was found.
type leak struct {
	ns, kind, name, msg string
	from, collected     time.Time // all owners gone; collected (zero: not yet)
	v                   violationRec
	how                 string // how it was decided
}

func (s *soak) leakCollected(key string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.leaks {
		if objKey(s.leaks[i].ns, s.leaks[i].kind, s.leaks[i].name) == key && s.leaks[i].collected.IsZero() {
			s.leaks[i].collected = at
		}
	}
}

func (s *soak) addLeak(l leak) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.v = violationRec{Invariant: 3, At: s.since(), Message: l.msg, AfterOps: len(s.ops), Log: s.recentOps()}
	s.leaks = append(s.leaks, l)
	s.t.Logf("+%.1fs not collected (checked at the end with a fresh kube-controller-manager): %s", l.v.At.Seconds(), l.msg)
}

func (s *soak) tracked(key string) *tracked {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wd.created[key]
}

func (s *soak) apiUp() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.down) == 0 || !s.down[len(s.down)-1].to.IsZero()
}

func openIv(ivs *[]interval, t time.Time) {
	if len(*ivs) == 0 || !(*ivs)[len(*ivs)-1].to.IsZero() {
		*ivs = append(*ivs, interval{from: t})
	}
}

func closeIv(ivs *[]interval, t time.Time) {
	if len(*ivs) > 0 && (*ivs)[len(*ivs)-1].to.IsZero() {
		(*ivs)[len(*ivs)-1].to = t
	}
}

func (s *soak) overlapDown(from, to time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return overlap(s.down, from, to)
}

// effective is the length of [from, now] not counting apiserver downtime.
func (s *soak) effective(from, now time.Time) time.Duration {
	return now.Sub(from) - s.overlapDown(from, now)
}

// bound is invariant 2's bound for a window [from, now]: 10 s, or lease + retry + 10 s when
// the controller mode had no leader during it (a killed leader, or one that exited because it
// could not renew while the apiserver was out or throttling).
func (s *soak) bound(from, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if overlap(s.leaderless, from.Add(-leaseDuration-retryPeriod), now) > 0 {
		return leaseDuration + retryPeriod + unownedBound
	}
	for _, k := range s.leaderKills {
		if !k.Before(from.Add(-leaseDuration-retryPeriod)) && !k.After(now) {
			return leaseDuration + retryPeriod + unownedBound
		}
	}
	return unownedBound
}

func (s *soak) throttledAt(t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, iv := range s.throttled {
		if !t.Before(iv.from) && !t.After(iv.end(time.Now())) {
			return true
		}
	}
	return false
}

// observeLeader scrapes both replicas, keeps the leaderless intervals and the last reaction
// histogram of every controller process (by PID: a killed process's last scrape counts).
func (s *soak) observeLeader() {
	ok := false
	leaderPID := 0
	hists := map[int]map[string]float64{}
	for _, r := range s.replicas {
		m, err := r.scrape()
		if err != nil {
			continue
		}
		if m[metricPrefix+"leader"] == 1 {
			ok = true
			if p := r.current(); p != nil {
				leaderPID = p.PID()
			}
		}
		h := map[string]float64{}
		for k, v := range m {
			if strings.HasPrefix(k, metricPrefix+"reaction_seconds_bucket{") {
				h[k] = v
			}
		}
		if p := r.current(); p != nil {
			hists[p.PID()] = h
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reactionHist == nil {
		s.reactionHist = map[int]map[string]float64{}
	}
	for pid, h := range hists {
		s.reactionHist[pid] = h
	}
	s.leaderOK = ok
	if ok && leaderPID != s.leaderPID {
		if s.leaderPID != 0 {
			s.leaderChanges = append(s.leaderChanges, time.Now())
		}
		s.leaderPID = leaderPID
	}
	if ok {
		closeIv(&s.leaderless, time.Now())
	} else {
		openIv(&s.leaderless, time.Now())
	}
}

func (s *soak) leader() *replica {
	for _, r := range s.replicas {
		if m, err := r.scrape(); err == nil && m[metricPrefix+"leader"] == 1 {
			return r
		}
	}
	return nil
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

func envInt(t *testing.T, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// TestSoak: random rollout operations and faults against the real control plane, the real
// Argo Rollouts controller with the step plugin and the controller mode (2 replicas), with
// invariants checked every second and once everything is quiet. SOAK_DURATION (default 60s),
// SOAK_SEED (default 1), SOAK_ROLLOUTS (workloads, default 5), SOAK_REPORT (default
// bin/soak/report.md), SOAK_BINARY (a prebuilt configmap-attacher binary instead of building
// this tree).
func TestSoak(t *testing.T) {
	s := &soak{t: t, deferred: map[string]int{}}
	s.duration = envDuration(t, "SOAK_DURATION", 60*time.Second)
	s.seed = envInt(t, "SOAK_SEED", 1)
	n := int(envInt(t, "SOAK_ROLLOUTS", 5))
	report := os.Getenv("SOAK_REPORT")
	if report == "" {
		report = filepath.Join(cluster.RepoRoot(), "bin", "soak", "report.md")
	}
	setupStart := time.Now()
	s.setup(n)
	setupTook := time.Since(setupStart)
	t.Logf("setup took %v (seed %d, %d workloads, duration %v)", setupTook.Round(time.Millisecond), s.seed, n, s.duration)

	stop := make(chan struct{})
	monDone := make(chan struct{})
	s.mon.watch(stop)
	go s.mon.run(stop, monDone)
	for _, r := range s.replicas {
		go r.supervise(stop)
	}
	s.start = time.Now()
	if os.Getenv("SOAK_NO_APISERVER_FAULTS") == "1" {
		s.note("apiserver faults off (SOAK_NO_APISERVER_FAULTS=1): a control run")
	}
	s.observeLeader()
	s.loop()
	quiet := s.final()
	close(stop)
	<-monDone
	s.mon.closed.Store(true)
	s.mon.checks.Wait()
	for _, r := range s.replicas {
		r.shutdown()
	}
	if err := s.rollouts.Stop(); err != nil {
		s.note("stopping the Rollouts controller: %v", err)
	}
	s.kubelet.Stop()
	s.scanLogs()
	if err := s.writeReport(report, setupTook, quiet); err != nil {
		t.Errorf("report: %v", err)
	} else {
		t.Logf("report written to %s", report)
	}
}

func (s *soak) setup(n int) {
	t := s.t
	s.bin = os.Getenv("SOAK_BINARY")
	if s.bin == "" {
		if _, err := cluster.FindBinDir(); err != nil {
			cluster.SkipOrFail(t, err)
		}
		if _, err := cluster.RolloutsDir(cluster.RolloutsVersion); err != nil {
			cluster.SkipOrFail(t, err)
		}
		b, err := cluster.PluginBinary()
		if err != nil {
			t.Fatal(err)
		}
		s.bin = b
	} else {
		s.note("testing the prebuilt binary %s (SOAK_BINARY)", s.bin)
	}
	// The workload controllers of every kind of user (the every-kind namespace).
	s.c = cluster.Start(t, cluster.Options{ExtraControllers: []string{"statefulset-controller", "daemonset-controller",
		"job-controller", "cronjob-controller", "ttl-after-finished-controller"}})
	var err error
	if s.kube, err = kubernetes.NewForConfig(s.c.AdminConfig); err != nil {
		t.Fatal(err)
	}
	rc, err := rolloutsclient.NewForConfig(s.c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	s.kubelet = cluster.StartFakeKubelet(s.kube)
	// The CronJob's Jobs run to completion (sleep jobRun).
	s.kubelet.RunImage(jobImage, cluster.PodRunner{Binary: "/bin/sleep", LogDir: filepath.Join(s.c.Dir, "runs"),
		Kubeconfig: func(context.Context, string, string) (string, error) { return s.c.KubeconfigPath, nil }})
	s.rollouts, err = cluster.StartRolloutsController(s.c, cluster.RolloutsControllerOptions{Version: cluster.RolloutsVersion, PluginBinary: s.bin,
		// The step finds the controller mode by its Lease (-leader-election-id soak below): the
		// groups' config, shared by a Rollout and a Deployment, is attached beside it.
		PluginArgs: []string{"--require-opt-in", "--controller-lease", "configmap-attacher/soak"}})
	if err != nil {
		s.kubelet.Stop()
		cluster.SkipOrFail(t, err)
	}
	idCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	kc, err := cluster.ControllerModeIdentity(idCtx, s.c, s.kube)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		r := &replica{name: name, dir: s.c.Dir, bin: s.bin, logPath: filepath.Join(s.c.Dir, "controller-"+name+".log"),
			args: []string{"-kubeconfig", kc, "-leader-election-namespace", "configmap-attacher", "-leader-election-id", "soak",
				"-leader-election-lease-duration", leaseDuration.String(), "-leader-election-renew-deadline", renewDeadline.String(),
				"-leader-election-retry-period", retryPeriod.String(), "-resync", resync.String(), "-anchor-grace", anchorGrace.String(), "-log-level", "debug"}}
		if err := r.launch(); err != nil {
			t.Fatal(err)
		}
		s.replicas = append(s.replicas, r)
	}
	s.wd = &world{kube: s.kube, ro: rc, rnd: rand.New(rand.NewSource(s.seed)), created: map[string]*tracked{}}
	kinds := []workloadKind{kindCanary, kindBlueGreen, kindWorkloadRef, kindDeployment}
	for i := 0; i < n; i++ {
		k := kinds[i%len(kinds)]
		if i >= len(kinds) && k == kindWorkloadRef {
			k = kindCanary // one workloadRef Rollout is enough
		}
		w := &workload{kind: k, ns: fmt.Sprintf("%s%d-%s", nsPrefix, i, strings.ToLower(string(k))), name: fmt.Sprintf("app%d", i), image: 1}
		if err := s.wd.setup(w); err != nil {
			t.Fatalf("set up %s: %v", w, err)
		}
		s.wd.ws = append(s.wd.ws, w)
	}
	// The shared-config namespace: a step Rollout and a Deployment sharing an opted-in
	// ConfigMap, and a StatefulSet sharing an opted-in Secret with the Rollout.
	g := &group{ns: fmt.Sprintf("%s%d-shared", nsPrefix, n), sts: fmt.Sprintf("app%d-cache", n)}
	g.ro = &workload{kind: kindCanary, ns: g.ns, name: fmt.Sprintf("app%d", n), image: 1, group: g, useSts: true}
	g.dep = &workload{kind: kindDeployment, ns: g.ns, name: fmt.Sprintf("app%d-d", n), image: 1, group: g}
	g.ws = []*workload{g.ro, g.dep}
	if err := s.wd.setupGroup(g); err != nil {
		t.Fatalf("set up the shared namespace %s: %v", g.ns, err)
	}
	s.wd.ws = append(s.wd.ws, g.ws...)
	s.wd.groups = append(s.wd.groups, g)
	// The every-kind namespace.
	s.kinds = newKinds(fmt.Sprintf("%s%d-kinds", nsPrefix, n+1))
	s.wd.kinds = s.kinds
	if err := s.wd.setupKinds(s.kinds); err != nil {
		t.Fatalf("set up the every-kind namespace %s: %v", s.kinds.ns, err)
	}
	s.mon = newMonitor(s)
	// Every workload reaches its first ReplicaSet, and the controller mode elects a leader.
	deadline := time.Now().Add(90 * time.Second)
	for _, w := range s.wd.ws {
		for {
			ok, why := s.wd.settled(w)
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not settled after setup: %s", w, why)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for s.leader() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the controller mode elected no leader:\n%s", tail(s.replicas[0].logPath, 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// The operations and faults, weighted.
var opWeights = []struct {
	kind   string
	weight int
	fault  bool
}{
	{"newRevision", 18, false},
	{"imageOnly", 7, false},
	{"promote", 12, false},
	{"promoteFull", 6, false},
	{"abort", 4, false},
	{"retry", 4, false},
	{"undo", 6, false},
	{"deletePods", 8, false},
	{"sharedRevision", 5, false},
	{"recreate", 3, false},
	{"restartRollouts", 2, true},
	{"killPlugin", 3, true},
	{"killLeader", 3, true},
	{"restartAPIServer", 2, true},
	{"throttle", 2, true},
}

func (s *soak) pick() (string, bool) {
	total := 0
	for _, w := range opWeights {
		total += w.weight
	}
	r := s.wd.rnd.Intn(total)
	for _, w := range opWeights {
		if r < w.weight {
			return w.kind, w.fault
		}
		r -= w.weight
	}
	panic("unreachable")
}

// kindsEvery: every kindsEvery-th operation is one of kindsOps, in turn (so that even the
// short soak runs each of them); a deferred one comes again at the next turn.
const kindsEvery = 4

// loop runs random operations until the duration is over.
func (s *soak) loop() {
	deadline := s.start.Add(s.duration)
	var throttleEnd time.Time
	next := 0 // the next of kindsOps; it moves on once one was applied (not deferred)
	for n := 0; time.Now().Before(deadline); n++ {
		if !throttleEnd.IsZero() && time.Now().After(throttleEnd) {
			s.endThrottle()
			throttleEnd = time.Time{}
		}
		kind, fault := s.pick()
		kindsTurn := n%kindsEvery == kindsEvery-1
		if kindsTurn {
			kind, fault = kindsOps[next%len(kindsOps)], false
		}
		if (kind == "throttle" || kind == "restartAPIServer") && os.Getenv("SOAK_NO_APISERVER_FAULTS") == "1" {
			continue
		}
		if kind == "throttle" || kind == "restartAPIServer" {
			s.mu.Lock()
			var last time.Time
			if len(s.down) > 0 {
				last = s.down[len(s.down)-1].end(time.Now())
			}
			s.mu.Unlock()
			if !throttleEnd.IsZero() || time.Until(deadline) < 15*time.Second || time.Since(last) < apiFaultSpacing {
				continue // one apiserver fault at a time, spaced, none at the very end
			}
		}
		o := op{At: s.since(), Kind: kind, Fault: fault}
		t0 := time.Now()
		detail, target, err := s.do(kind, &throttleEnd)
		o.Detail, o.Target, o.Took = detail, target, time.Since(t0)
		if err != nil {
			o.Err = err.Error()
		}
		if detail == "skip" {
			continue
		}
		if kindsTurn && !strings.HasPrefix(detail, "deferred") {
			next++
		}
		s.record(o)
		time.Sleep(time.Duration(200+s.wd.rnd.Intn(1300)) * time.Millisecond)
	}
	if !throttleEnd.IsZero() {
		s.endThrottle()
	}
}

func (s *soak) randomWorkload(ok func(*workload) bool) *workload {
	var c []*workload
	for _, w := range s.wd.ws {
		if ok(w) {
			c = append(c, w)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[s.wd.rnd.Intn(len(c))]
}

func anyWorkload(*workload) bool   { return true }
func rolloutOnly(w *workload) bool { return w.isRollout() }

// do runs one operation; detail "skip" means it did not apply and is not logged.
func (s *soak) do(kind string, throttleEnd *time.Time) (detail, target string, err error) {
	if slices.Contains(kindsOps, kind) {
		return s.kindsOp(kind)
	}
	switch kind {
	case "newRevision", "imageOnly":
		w := s.randomWorkload(anyWorkload)
		return s.apply(w, kind == "newRevision")
	case "promote", "promoteFull", "abort", "retry":
		w := s.randomWorkload(rolloutOnly)
		switch kind {
		case "promote":
			detail, err = s.wd.promote(w)
		case "promoteFull":
			detail, err = s.wd.promoteFull(w)
		case "abort":
			err = s.wd.patchStatus(w, `{"status":{"abort":true}}`)
		case "retry":
			err = s.wd.patchStatus(w, `{"status":{"abort":false}}`)
		}
		return detail, w.String(), err
	case "undo":
		w := s.randomWorkload(func(w *workload) bool { return w.kind != kindWorkloadRef })
		detail, err = s.wd.undo(w)
		return detail, w.String(), err
	case "sharedRevision":
		if len(s.wd.groups) == 0 {
			return "skip", "", nil
		}
		return s.sharedRevision(s.wd.groups[s.wd.rnd.Intn(len(s.wd.groups))])
	case "recreate":
		w := s.randomWorkload(func(w *workload) bool { return w.kind != kindWorkloadRef })
		return s.recreate(w)
	case "deletePods":
		w := s.randomWorkload(anyWorkload)
		detail, err = s.wd.deletePods(w, 1+s.wd.rnd.Intn(2))
		return detail, w.String(), err
	case "restartRollouts":
		plugins := s.rollouts.PluginPIDs()
		err = s.rollouts.Restart()
		return fmt.Sprintf("plugin processes before: %v", plugins), "rollouts-controller", err
	case "killPlugin":
		pids := s.rollouts.PluginPIDs()
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if len(pids) == 0 {
			return "no plugin process running", "plugin", nil
		}
		return fmt.Sprintf("SIGKILL %v", pids), "plugin", nil
	case "killLeader":
		r := s.leader()
		if r == nil {
			return "no leader to kill", "controller mode", nil
		}
		pid := r.current().PID()
		s.mu.Lock()
		s.leaderKills = append(s.leaderKills, time.Now())
		s.mu.Unlock()
		r.kill()
		return fmt.Sprintf("SIGKILL replica %s (pid %d)", r.name, pid), "controller mode", nil
	case "restartAPIServer":
		down := time.Duration(1000+s.wd.rnd.Intn(2000)) * time.Millisecond
		err = s.restartAPIServer(down, nil)
		return fmt.Sprintf("down %v", down), "kube-apiserver", err
	case "throttle":
		d := time.Duration(8+s.wd.rnd.Intn(10)) * time.Second
		err = s.restartAPIServer(0, throttleFlags)
		s.mu.Lock()
		openIv(&s.throttled, time.Now())
		s.mu.Unlock()
		*throttleEnd = time.Now().Add(d)
		return fmt.Sprintf("%v with %s", d, strings.Join(throttleFlags, " ")), "kube-apiserver", err
	}
	return "skip", "", nil
}

// restartAPIServer stops the apiserver for down and starts it with flags (nil: the normal ones).
func (s *soak) restartAPIServer(down time.Duration, flags []string) error {
	s.mu.Lock()
	openIv(&s.down, time.Now())
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		closeIv(&s.down, time.Now())
		s.mu.Unlock()
		if s.rollouts.PID() == 0 {
			s.note("the Rollouts controller had exited; restarting it")
			if err := s.rollouts.Start(); err != nil {
				s.note("restart of the Rollouts controller: %v", err)
			}
		}
	}()
	if err := s.c.StopAPIServer(); err != nil {
		return err
	}
	time.Sleep(down)
	return s.c.RestartAPIServerWithArgs(flags...)
}

func (s *soak) endThrottle() {
	t0 := time.Now()
	err := s.restartAPIServer(0, nil)
	s.mu.Lock()
	closeIv(&s.throttled, time.Now())
	s.mu.Unlock()
	o := op{At: t0.Sub(s.start), Kind: "throttleEnd", Fault: true, Target: "kube-apiserver", Detail: "normal flags again", Took: time.Since(t0)}
	if err != nil {
		o.Err = err.Error()
	}
	s.record(o)
}

// apply is a GitOps sync: the revision's objects, the template, then the prune. Never while
// the controller mode has no leader or the apiserver is out (deferred, counted).
func (s *soak) apply(w *workload, newConfig bool) (string, string, error) {
	if why := s.gate(w); why != "" {
		return why, w.String(), nil
	}
	var detail string
	if newConfig {
		detail = s.wd.nextRevision(w)
	} else {
		w.image++
		detail = fmt.Sprintf("image :%d (config of rev %d)", w.image, w.rev)
	}
	s.mu.Lock()
	err := s.wd.applyConfig(w)
	s.mu.Unlock()
	if err != nil {
		return detail, w.String(), err
	}
	if err := s.wd.applyTemplate(w); err != nil {
		return detail, w.String(), err
	}
	deleted, err := s.wd.prune(w)
	s.mu.Lock()
	s.applies++
	s.pruned += len(deleted)
	s.mu.Unlock()
	if len(deleted) > 0 {
		detail += "; prune deleted " + strings.Join(deleted, ", ")
	}
	return detail, w.String(), err
}

// gate is what every sync waits for, or the reason it is deferred ("deferred: ..."): never
// while the controller mode has no leader or the apiserver is out; and the previous sync of
// each workload has been acted on (its ReplicaSet exists and its objects are owned).
func (s *soak) gate(ws ...*workload) string {
	if !s.apiUp() {
		s.deferred["apiserver out"]++
		return "deferred: apiserver out"
	}
	s.mu.Lock()
	leaderOK := s.leaderOK
	s.mu.Unlock()
	if !leaderOK || s.leader() == nil {
		s.deferred["no controller-mode leader"]++
		return "deferred: no controller-mode leader"
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, w := range ws {
		for {
			ok, why := s.wd.settled(w)
			if ok {
				break
			}
			if time.Now().After(deadline) {
				s.deferred["previous revision not rolled out"]++
				return "deferred: " + w.name + ": " + why
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	s.waitOwned(ws[0], 10*time.Second)
	return ""
}

// sharedRevision is a GitOps sync of the shared-config namespace: a new shared ConfigMap
// (and, sometimes, the Rollout starts or stops mounting the StatefulSet's Secret), both
// templates written, then the prune.
func (s *soak) sharedRevision(g *group) (string, string, error) {
	target := g.ns + " (shared: " + g.ro.name + ", " + g.dep.name + ")"
	if why := s.gate(g.ws...); why != "" {
		return why, target, nil
	}
	detail := s.wd.nextSharedRevision(g)
	if s.wd.rnd.Float64() < 0.3 {
		g.ro.useSts = !g.ro.useSts
	}
	if g.ro.useSts {
		detail += fmt.Sprintf("; %s mounts the StatefulSet's Secret %s", g.ro.name, g.sec)
	} else {
		detail += fmt.Sprintf("; %s does not mount the StatefulSet's Secret", g.ro.name)
	}
	s.mu.Lock()
	err := s.wd.applyGroupConfig(g)
	s.mu.Unlock()
	if err != nil {
		return detail, target, err
	}
	for _, w := range g.ws {
		if err := s.wd.applyTemplate(w); err != nil {
			return detail, target, err
		}
	}
	deleted, err := s.wd.prune(g.ro)
	s.mu.Lock()
	s.applies++
	s.pruned += len(deleted)
	s.mu.Unlock()
	if len(deleted) > 0 {
		detail += "; prune deleted " + strings.Join(deleted, ", ")
	}
	return detail, target, err
}

// recreate is `kubectl delete -f` and `kubectl apply -f` of a workload: its Rollout or
// Deployment and its revision's ConfigMap and Secret deleted (the controller waited for until
// gone), then the objects created again with the same names and content, then the controller
// with the same name and template and a new UID. Its old ReplicaSets, controller gone, are the
// garbage collector's; they never become owners of the new objects.
func (s *soak) recreate(w *workload) (string, string, error) {
	if why := s.gate(w); why != "" {
		return why, w.String(), nil
	}
	old, err := s.wd.deleteWorkload(w)
	detail := fmt.Sprintf("deleted %s %s (uid %s), ConfigMap %s, Secret %s", w.controllerKind(), w.name, short(old), w.cm, w.sec)
	if err != nil {
		return detail, w.String(), err
	}
	s.mu.Lock()
	err = s.wd.applyConfig(w)
	s.mu.Unlock()
	if err != nil {
		return detail, w.String(), err
	}
	uid, err := s.wd.createWorkload(w)
	detail += fmt.Sprintf("; recreated them (uid %s)", short(uid))
	return detail, w.String(), err
}

func short(uid types.UID) string {
	if len(uid) > 8 {
		return string(uid[:8])
	}
	return string(uid)
}

// waitOwned waits until every opted-in object the workload's live ReplicaSets reference is
// owned by each of them (a GitOps sync does not follow the previous one within milliseconds).
func (s *soak) waitOwned(w *workload, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		snap, err := s.mon.list(nowCtx())
		if err == nil && len(unownedIn(snap, w.ns)) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// unownedIn lists "object <- ReplicaSet" pairs of ns where an opted-in object lacks a live
// ReplicaSet that references it as an owner, and the lost references (object missing).
func unownedIn(snap *snapshot, ns string) []string {
	var out []string
	for i := range snap.rss {
		rs := &snap.rss[i]
		if (ns != "" && rs.Namespace != ns) || !snap.liveRS(rs) {
			continue
		}
		for _, r := range cluster.PodConfigRefs(&rs.Spec.Template.Spec) {
			k := objKey(rs.Namespace, r.Kind, r.Name)
			o := snap.objs[k]
			if o == nil {
				out = append(out, "lost "+r.String()+" <- "+rs.Name)
				continue
			}
			if !o.optedIn() || snap.blocked[k] != "" {
				continue
			}
			owned := false
			for _, ref := range o.meta.OwnerReferences {
				owned = owned || ref.UID == rs.UID
			}
			if !owned {
				out = append(out, "unowned "+r.String()+" <- "+rs.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}
